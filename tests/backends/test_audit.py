"""Known gaps of the native backends are refused by name (or warned with --lenient),
never dropped silently."""

import json
from pathlib import Path

import pytest

from engine.backends import BACKENDS, get_backend
from engine.constraint import Constraint
from engine.errors import CfsmError

PREFIX_ITEMS = {
    "type": "array",
    "prefixItems": [
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
        {"type": "integer"},
        {"type": "string"},
    ],
    "additionalItems": False,
}


def test_llguidance_prefix_items_next_to_additional_items_is_refused_by_name(ctx):
    """llguidance accepted `[{"name":"John","age":30},"test",42]` here (item 1 must be an
    integer): the audit names it before compiling."""
    with pytest.raises(CfsmError) as ei:
        get_backend("llguidance").compile(Constraint("schema", json.dumps(PREFIX_ITEMS)), ctx)
    assert ei.value.kind == "unsupported_feature" and "prefixItems" in ei.value.message
    lenient = Constraint("schema", json.dumps(PREFIX_ITEMS), lenient=True)
    compiled = get_backend("llguidance").compile(lenient, ctx)
    assert any("prefixItems" in w and "NOT enforced" in w for w in compiled.warnings)
    # the regex path enforces it: nothing to refuse there
    assert (
        get_backend("fsm").compile(Constraint("schema", json.dumps(PREFIX_ITEMS)), ctx).warnings
        == []
    )


DRAFT_MIXING = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "draft_mixing.json").read_text()
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_backend_accepts_an_invalid_instance_of_a_draft_mixing_schema_unwarned(backend):
    """Keywords of older drafts beside 2020-12's (tests/data/draft_mixing.json, in the test
    suite's format): each backend refuses the schema, or rejects every invalid instance,
    or warns that it lets them through. Walked byte by byte, as the conformance bench does."""
    from cfsm.bench.conformance import ConformanceRun
    from engine.backends import TokenizerContext
    from engine.tokens.byte_tokenizer import byte_tokenizer

    run = ConformanceRun(backend, TokenizerContext(byte_tokenizer()), "compact", lenient=False)
    wrongly_accepted = []
    for group in DRAFT_MIXING:
        out = run.evaluate(group)
        assert "crash" not in out, (group["description"], out)
        for valid, accepted, desc, _ in out.get("tests", []):
            if accepted and not valid and not out["warned"]:
                wrongly_accepted.append((group["description"], desc))
    assert wrongly_accepted == []


ENUM_OF_ANOTHER_TYPE = {  # JSONSchemaBench Github_medium/o30410, shortened
    "type": "object",
    "properties": {
        "builtin": {"enum": ["MODIFIABLE", "DELETABLE"], "type": "object"},
        "retries": {"type": "integer"},
    },
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_enum_beside_a_type_its_values_lack_is_enforced_or_refused(backend, ctx):
    """No document may have `builtin` (its values are strings, its type object): xgrammar
    accepted `{"builtin":"MODIFIABLE",...}`, an invalid MaskBench instance; it now refuses
    the schema by name, and every backend that compiles it rejects that document."""
    from cfsm.bench.jsonschemabench import walk_instance

    c = Constraint("schema", json.dumps(ENUM_OF_ANOTHER_TYPE), "compact")
    try:
        compiled = get_backend(backend).compile(c, ctx)
    except CfsmError as exc:
        assert backend == "xgrammar" and "`enum` at /properties/builtin/enum" in exc.message
        return
    assert backend != "xgrammar"
    bad = '{"builtin":"MODIFIABLE","retries":2}'
    assert not walk_instance(compiled, ctx.tokenizer, ctx.vocab.token_bytes, bad)["accepted"]
    good = '{"retries":2}'
    assert walk_instance(compiled, ctx.tokenizer, ctx.vocab.token_bytes, good)["accepted"]
