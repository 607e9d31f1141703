"""Every state of a schema's automaton knows where it is in the schema (its JSON pointer
and the part being written), read the way a person reads the document."""

from __future__ import annotations

import json

import pytest

from app.presets import presets
from engine.constraint import Constraint
from engine.regex.dfa import build_char_dfa
from engine.schema.places import schema_places

PERSON = presets()["Person (JSON schema)"]
ORDER = presets()["Same order, compact separators (JSON schema)"]


def _dfa(p: dict):
    return build_char_dfa(Constraint(p["kind"], p["text"], p["whitespace"]).regex())


def _walk(dfa, places: dict, text: str) -> list[tuple[str, str]]:
    """(pointer, part) of the state after each prefix of `text`."""
    s, out = dfa.initial, []
    for ch in text:
        s = dfa.step(s, ch)
        assert s is not None, (text, ch)
        out.append(tuple(places[str(s)]))
    return out


@pytest.mark.parametrize("preset", [PERSON, ORDER], ids=["person", "order"])
def test_every_state_has_a_place(preset):
    dfa = _dfa(preset)
    places = schema_places(dfa)
    assert set(places) == {str(s) for s in range(dfa.num_states)}
    assert all(p[0].startswith("/") and p[1] for p in places.values())


def test_a_person_document_is_read_key_by_key_and_inside_its_strings():
    dfa = _dfa(PERSON)
    places = schema_places(dfa)
    doc = '{"name": "Ann \\"A\\" \\u00e9", "age": 30'
    at = dict(zip(range(1, len(doc) + 1), _walk(dfa, places, doc), strict=True))
    i = doc.index("Ann") + 1  # after "A" of Ann
    assert at[i] == ("/properties/name", "string value")
    assert at[doc.index('\\"A') + 1] == ("/properties/name", "string value, after a backslash")
    assert at[doc.index("\\u00") + 3] == (
        "/properties/name",
        "string value, inside a \\u escape (hex digits)",
    )
    assert at[doc.index('"age"') + 2][1] == "key" and at[doc.index('"age"') + 2][0] == (
        "/properties/age"
    )  # the key's own text is forced: its property is known from its first letter
    assert at[len(doc)] == ("/properties/age", "number")
    assert at[doc.index(", ") + 1] == ("/", "before a key")


def test_array_items_point_into_items():
    dfa = _dfa(ORDER)
    schema = json.loads(ORDER["text"])
    places = schema_places(dfa)
    assert "items" in schema["properties"]
    doc = '{"orderId":7,"status":"shipped","express":true,"items":["pen","m'
    last = _walk(dfa, places, doc)[-1]
    assert last == ("/properties/items/items", "string value")


def test_a_key_the_model_chooses_points_at_its_object_and_an_escaped_backslash_is_no_escape():
    schema = {
        "type": "object",
        "properties": {
            "x": {"type": "integer"},
            "a": {"type": "string"},
            "ab": {"type": "string"},
        },
        "required": ["x"],
        "additionalProperties": False,
    }
    dfa = build_char_dfa(Constraint("schema", json.dumps(schema), "compact").regex())
    places = schema_places(dfa)
    doc = '{"x":0,"a'
    assert _walk(dfa, places, doc)[-1] == ("/", "key (which one: the model's choice)")
    text = '{"x":0,"a":"p\\\\u12'  # an escaped backslash, then a plain u12
    assert _walk(dfa, places, text)[-1] == ("/properties/a", "string value")
