"""The doctor names schema nodes whose keywords imply a type they do not state: any JSON
value is valid there, which is what the samples (and the model) may write."""

import json

from app.presets import REAL_SCHEMAS, presets
from engine.analysis.untyped import untyped_places
from engine.constraint import Constraint
from viz.doctor_text import format_report


def test_a_real_schemas_untyped_object_is_named_with_its_fix(jsonschemabench):
    """JSONSchemaBench Github_hard/o75565: `shipment` lists 13 properties but has no type,
    so `{"shipment":876.1}` is valid (the doctor's synthesized samples wrote numbers)."""
    text = (jsonschemabench / "Github_hard" / "o75565.json").read_text(encoding="utf-8")
    notes = untyped_places(Constraint("schema", text, "compact"))
    assert [(n["where"], n["fix"]) for n in notes] == [
        ("/properties/shipment", 'add "type": "object"')
    ]
    assert "`properties` but no `type`" in notes[0]["what"]


def test_typed_nodes_and_nodes_typed_another_way_are_not_named():
    schema = {
        "type": "object",
        "properties": {
            "a": {"maxLength": 3},  # untyped: named
            "b": {"type": "string", "maxLength": 3},
            "c": {"enum": ["x"], "maxLength": 3},
            "d": {"anyOf": [{"type": "integer"}], "minimum": 1},
            "e": {"$ref": "#/$defs/n"},
            "f": {"items": {"type": "integer"}},  # untyped: named
        },
        "$defs": {"n": {"minimum": 0}},  # untyped, reached through e: named at its target
    }
    notes = untyped_places(Constraint("schema", json.dumps(schema)))
    assert [n["where"] for n in notes] == ["/properties/a", "/$defs/n", "/properties/f"]
    assert [n["fix"] for n in notes] == [
        f'add "type": "{t}"' for t in ("string", "number", "array")
    ]
    for name, p in presets().items():
        if p["kind"] == "schema" and name not in REAL_SCHEMAS:
            assert untyped_places(Constraint("schema", p["text"], p["whitespace"])) == []


def test_the_doctor_page_and_report_say_what_the_figures_count(ctx):
    """An untyped `n` lets the synthesized samples write any JSON value there: the report,
    the CLI text and the page's Doctor all name it, with the fix."""
    from engine.analysis.doctor import diagnose
    from viz.summaries import doctor_md

    schema = {
        "type": "object",
        "properties": {"n": {"minimum": 0, "maximum": 9}},
        "required": ["n"],
    }
    rep = diagnose(
        Constraint("schema", json.dumps(schema)), ctx.tokenizer, ctx.vocab.token_bytes, n=4
    )
    rep = rep.to_json()
    assert rep["untyped"][0]["where"] == "/properties/n"
    text = format_report(rep)
    assert "Accepts more than it seems" in text and "/properties/n: has `minimum`" in text
    assert "| /properties/n | has `minimum` but no `type`" in doctor_md(rep)
