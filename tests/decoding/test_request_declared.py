"""A request is declared once (`GenerateRequest`'s Offers): the CLI's flags and a requests
file's keys, the page's controls and permalink-free defaults, the Gradio `/run`
parameters and /v1's fields are built from it or held to it here, so a field added to the
declaration and forgotten on a surface fails a test. No weights."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest, offered_on, offers, page_default
from engine.errors import CfsmError


def _changed(value):
    """A value of the same type as `value`, other than it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return type(value)(value + 1) if value < 1 else type(value)(value - 0.5)
    return value + "x"


def test_the_cli_offers_each_declared_field_as_a_flag_with_its_help():
    from cfsm.cli import REQUEST_FIELDS, build_parser

    gen = build_parser()._subparsers._group_actions[0].choices["generate"]
    flags = {a.option_strings[0]: a for a in gen._actions if a.option_strings}
    for f, offer in offers():
        if not offer.cli:
            continue
        action = flags["--" + f.name.replace("_", "-")]
        assert action.help.startswith(offer.help) and action.default is None, f.name
        assert tuple(action.choices or ()) == offer.choices, f.name
    assert set(REQUEST_FIELDS) == {f.name for f, o in offers() if o.cli}
    args = build_parser().parse_args(["generate", "--prompt", "p", "--max-new-tokens", "7"])
    assert args.max_new_tokens == 7 and args.temperature is None  # the request's default


def test_declared_bounds_and_choices_are_what_validation_enforces():
    for f, offer in offers():
        c = Constraint("regex", "(a|b)")
        if offer.hi is not None:
            with pytest.raises(CfsmError) as got:
                GenerateRequest.from_inputs("p", c, **{f.name: offer.hi + 1})
            assert got.value.kind == "invalid_input" and f.name in got.value.message
        if offer.lo is not None:
            with pytest.raises(CfsmError) as got:
                GenerateRequest.from_inputs("p", c, **{f.name: offer.lo - 1})
            assert got.value.kind == "invalid_input" and f.name in got.value.message
        if offer.choices:
            with pytest.raises(CfsmError) as got:
                GenerateRequest.from_inputs("p", c, **{f.name: "nonsense"})
            assert f"{f.name} must be one of {', '.join(offer.choices)}" in got.value.message


def test_the_page_has_a_control_per_offered_field_and_each_reaches_the_request():
    from app.inputs import TRIGGER_FIELDS, PageInputs

    page = {f.name: f for f in fields(PageInputs)}
    base = PageInputs(kind="regex", rx="(a|b)")
    req = base.request()
    for name, control in offered_on("page").items():
        assert page[control].default == page_default(name), name
        if name in TRIGGER_FIELDS or name == "mode":
            continue  # the Tools box's and the reasoning row's: test_triggers; mode: below
        assert getattr(req, name) == page_default(name), name
        moved = PageInputs(kind="regex", rx="(a|b)", **{control: _changed(page_default(name))})
        if name == "runtime":
            moved.runtime = "transformers"
        assert getattr(moved.request(), name) == getattr(moved, control), name
    assert PageInputs(kind="regex", rx="(a|b)", mode="masked").request().mode == "masked"


def test_the_page_widgets_start_at_the_declared_defaults():
    import gradio as gr

    from app.inputs import CHOICES
    from app.layout import _run_settings

    with gr.Blocks():
        w = _run_settings(CHOICES["mode"], list(CHOICES["backend"]), CHOICES["ws"])
    shown = {n: c for n, c in offered_on("page").items() if c in w}
    assert {"max_new", "temp", "top_p", "seed", "mode", "runtime"} <= set(shown.values())
    for name, control in shown.items():
        assert w[control].value == page_default(name), name


def test_gradio_run_takes_the_declared_parameters_with_the_page_defaults():
    import gradio as gr

    from app.api import wire_api

    with gr.Blocks() as demo:
        wire_api(None, demo)
    run = next(f.fn for f in demo.fns.values() if f.api_name == "run")
    params = inspect.signature(run).parameters
    for name, param in offered_on("gradio").items():
        assert params[param].default == page_default(name), name
    own = {"prompt", "kind", "constraint", "whitespace", "lenient", "spec", "request"}
    assert set(params) - own == set(offered_on("gradio").values())


def test_v1_reads_every_declared_field_under_its_declared_name():
    from engine.openai.request import _USED, EXTENSIONS, HARMLESS

    for name, v1 in offered_on("v1").items():
        if v1 == "extension":
            assert name in EXTENSIONS
        else:
            assert v1 in _USED | HARMLESS, (name, v1)
    assert set(EXTENSIONS) == {k for k, v in offered_on("v1").items() if v == "extension"}
