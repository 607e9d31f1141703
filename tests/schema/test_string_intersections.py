"""A string held to more than one regular language is held to their intersection, exactly:
an `allOf` of two `pattern`s (refused before: "two different `pattern`s"), a `pattern`
with length bounds or with a `format` (refused: "length bounds together with a pattern",
"a `pattern` together with a `format`"). Checked against the jsonschema validator on
strings made to sit on each side of every constraint."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.errors import CfsmError
from engine.regex.dfa import build_char_dfa
from engine.schema import schema_to_regex

CASES = [
    (
        {
            "allOf": [
                {"type": "string", "pattern": "^[a-z0-9]+$"},
                {"type": "string", "pattern": "[0-9]"},
            ]
        },  # fmt: skip
        ["abc1", "1", "a", "", "A1", "abc", "9z9"],
    ),
    (
        {"type": "string", "pattern": "^[a-f]+$", "minLength": 2, "maxLength": 4},
        ["a", "ab", "abcd", "abcde", "abg", "fff"],
    ),
    (
        {"type": "string", "pattern": "a", "maxLength": 3},  # search semantics: "xxxxa" matches
        ["a", "xa", "aaa", "xxa", "xxxa", "bbb", ""],
    ),
    (
        {"type": "string", "format": "date", "pattern": "^2024-"},
        ["2024-02-29", "2023-01-01", "2024-13-01", "2024-1-1", "x2024-01-01"],
    ),
]


@pytest.mark.parametrize(
    ("schema", "texts"), CASES, ids=["two-patterns", "length", "search-length", "format"]
)
def test_the_intersection_accepts_exactly_the_valid_strings(schema, texts):
    dfa = build_char_dfa(schema_to_regex(json.dumps(schema), "compact"))
    check = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    for t in texts:
        assert dfa.accepts(json.dumps(t)) == check.is_valid(t), t


def test_an_intersection_past_its_limits_is_refused_by_keyword_and_place():
    schema = {"type": "string", "pattern": "^([a-z]+\\.)*[a-z]{2,}$", "maxLength": 300}
    with pytest.raises(CfsmError) as got:
        schema_to_regex(json.dumps(schema), "compact")
    assert got.value.kind == "unsupported_feature"
    assert (
        "`maxLength` at /maxLength" in got.value.message and "past its limits" in got.value.message
    )


def test_two_patterns_with_nothing_in_common_admit_no_string():
    schema = {
        "allOf": [{"type": "string", "pattern": "^a+$"}, {"type": "string", "pattern": "^b+$"}]
    }
    with pytest.raises(CfsmError) as got:
        schema_to_regex(json.dumps(schema), "compact")
    assert got.value.kind == "unsatisfiable"
