"""Requests built from what users type (page, API, CLI flags, requests lines) in one place."""

import pytest

from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.errors import CfsmError


def test_inputs_are_coerced_and_defaults_fill_what_is_missing():
    r = GenerateRequest.from_inputs(
        "hi",
        Constraint("regex", "a+"),
        max_new_tokens="12",
        temperature=None,
        seed="",
        raw_prompt="false",
        top_p=0.5,
    )
    assert (r.max_new_tokens, r.temperature, r.seed, r.raw_prompt, r.top_p) == (
        12,
        0.0,
        0,
        False,
        0.5,
    )
    assert r.mode == "jump"  # under a constraint
    assert GenerateRequest.from_inputs("hi", None).mode == "free"


@pytest.mark.parametrize(
    "bad",
    [
        {"raw_prompt": "maybe"},
        {"max_new_tokens": "many"},
        {"max_new_tokens": 0},
        {"colour": "red"},
        {"mode": "greedy"},
    ],
)
def test_bad_inputs_are_one_line_errors(bad):
    with pytest.raises(CfsmError) as ei:
        GenerateRequest.from_inputs("hi", Constraint("regex", "a+"), **bad)
    assert ei.value.kind == "invalid_input"


def test_a_constraint_from_inputs_names_an_empty_field_and_keeps_schema_options_to_schemas():
    with pytest.raises(CfsmError, match="the regex is empty"):
        Constraint.from_inputs("regex", "  ")
    c = Constraint.from_inputs("regex", "a", "spaced", lenient=True, spec=True)
    assert (c.lenient, c.spec, c.whitespace) == (False, False, "spaced")
    s = Constraint.from_inputs("schema", "{}", None, lenient=True, spec=True)
    assert (s.lenient, s.spec, s.whitespace) == (True, True, "compact")
