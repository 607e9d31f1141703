"""`auto` chooses the backend that can enforce the constraint and says why; a keyword no
backend enforces is named with every backend's reason and the ways to compile leniently.
No weights: the compile engine's tokenizer only."""

from __future__ import annotations

import json

import pytest

from engine.backends import AUTO, DEFAULT_BACKEND
from engine.constraint import Constraint
from engine.errors import CfsmError


def _schema(s: dict, **kw) -> Constraint:
    return Constraint.from_inputs("schema", json.dumps(s), "compact", **kw)


def test_auto_is_the_default_and_a_regex_goes_to_fsm(compile_engine):
    assert DEFAULT_BACKEND == AUTO
    res = compile_engine.compile(Constraint("regex", "(yes|no)"), AUTO)
    assert res.backend == "fsm" and "first choice" in res.why


def test_a_schema_too_large_for_the_regex_path_goes_to_a_native_backend(compile_engine):
    defs = {"l0": {"type": "integer"}}
    for d in range(1, 5):  # a small schema whose regex would be gigabytes
        ref = {"$ref": f"#/$defs/l{d - 1}"}
        defs[f"l{d}"] = {"type": "object", "properties": {f"p{i}": ref for i in range(40)}}
    res = compile_engine.compile(_schema({"$defs": defs, "$ref": "#/$defs/l4"}), AUTO)
    assert res.backend == "llguidance", res.why
    assert res.why.startswith("llguidance, because fsm refused it")
    assert "grows past" in res.why  # fsm's own reason, with the pointer


def test_a_keyword_no_backend_enforces_names_each_reason_and_lenient(compile_engine):
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with pytest.raises(CfsmError) as got:
        compile_engine.compile(_schema(schema), AUTO)
    msg = got.value.message
    assert got.value.kind == "unsupported_feature"
    assert "no backend enforces this schema" in msg and "uniqueItems" in msg
    assert all(f"{b}: " in msg for b in ("fsm", "llguidance", "xgrammar")), msg
    assert "tick Lenient" in msg and "--lenient" in msg and '"lenient": true' in msg
    lenient = compile_engine.compile(_schema(schema, lenient=True), AUTO)
    assert lenient.backend == "fsm" and any("uniqueItems" in w for w in lenient.compiled.warnings)


def test_a_library_refusal_that_names_a_keyword_gets_its_pointer(compile_engine):
    """llguidance names the keyword it lacks but not where: the message gains the first
    place the schema uses it (a real schema has many)."""
    one_of = {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": one_of}}
    with pytest.raises(CfsmError) as got:
        compile_engine.compile(_schema(schema), "llguidance")
    assert "oneOf" in got.value.message
    assert got.value.message.endswith("(at /properties/b/oneOf)"), got.value.message
    unique = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(CfsmError) as got:
        compile_engine.compile(_schema(unique), AUTO)
    assert "llguidance cannot compile this schema" in got.value.message
    assert '["uniqueItems"] (at /properties/tags/uniqueItems)' in got.value.message


def test_openapi_byte_and_uri_templates_are_enforced_on_fsm(compile_engine):
    """`format: byte` (base64: Kubernetes' and MCP's schemas) and `uri-template` compile
    on fsm, which accepts what the formats mean and nothing else."""
    from engine.analysis.check import check_text

    def accepts(schema: dict, text: str) -> bool:
        res = compile_engine.compile(_schema(schema), AUTO)
        assert res.backend == "fsm", res.why
        return check_text(res.compiled, None, compile_engine.ctx, text)["accepted"]

    data = {
        "type": "object",
        "properties": {"data": {"type": "string", "format": "byte"}},
        "required": ["data"],
    }
    assert accepts(data, '{"data":"aGVsbG8="}') and not accepts(data, '{"data":"hello!"}')
    tmpl = {"type": "string", "format": "uri-template"}
    assert accepts(tmpl, '"https://x.org/{id}{?q,page}"')
    assert not accepts(tmpl, '"https://x.org/{id"') and not accepts(tmpl, '"{=x}"')


def test_a_grammar_goes_to_the_backend_whose_syntax_it_is(compile_engine):
    ebnf = compile_engine.compile(Constraint("grammar", 'root ::= "yes" | "no"'), AUTO)
    assert ebnf.backend == "xgrammar"
    lark = compile_engine.compile(Constraint("grammar", 'start: "yes" | "no"'), AUTO)
    assert lark.backend == "llguidance" and "xgrammar refused it" in lark.why


def test_what_no_backend_can_do_better_is_answered_at_once(compile_engine):
    with pytest.raises(CfsmError) as got:
        compile_engine.compile(Constraint("regex", "a(b"), AUTO)
    assert got.value.kind == "invalid_regex" and "no backend" not in got.value.message


@pytest.mark.parametrize("backend", [AUTO, "xgrammar", "llguidance", "outlines", "fsm"])
def test_a_look_around_is_refused_before_any_compile_starts(compile_engine, backend):
    """Every backend reads the regex normalized, so none holds a look-around: it is refused
    before a compile worker is asked (xgrammar's setup took 3.3 s to say so)."""
    misses = compile_engine.cache.misses
    with pytest.raises(CfsmError) as got:
        compile_engine.compile(Constraint("regex", f"(?=q{backend})a[0-9]+"), backend)
    assert got.value.kind == "unsupported_feature" and "look-ahead" in got.value.message
    assert compile_engine.cache.misses == misses  # no compile was started


def test_a_backend_asked_for_by_name_is_not_second_guessed(compile_engine):
    res = compile_engine.compile(Constraint("regex", "(yes|no)"), "llguidance")
    assert res.backend == "llguidance" and res.why == ""
