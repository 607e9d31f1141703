"""One pointer module: pointers built from document paths name nodes the schema has (the
stopping rule), on hand-made schemas and on every valid MaskBench instance."""

import json
from pathlib import Path

import pytest

from engine.analysis.json_scan import scan_json
from engine.analysis.unbounded import unbounded_parts
from engine.constraint import Constraint
from engine.schema.pointer import (
    escape,
    join,
    resolve,
    scan_path,
    schema_pointer,
    split,
    text_pointer,
    unescape,
)

ROOT = Path(__file__).resolve().parents[2]
MASKBENCH = ROOT.parent / "shared" / "bench-data" / "jsonschemabench" / "maskbench"

SCHEMA = {
    "type": "object",
    "properties": {
        "a/b~c": {"type": "string"},
        "list": {
            "type": "array",
            "prefixItems": [{"type": "integer"}],
            "items": {"$ref": "#/$defs/node"},
        },
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "env": {"type": "object", "patternProperties": {"^X_": {"type": "integer"}}},
        "either": {"anyOf": [{"type": "object"}, {"type": "string"}]},
    },
    "additionalProperties": False,
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"next": {"$ref": "#/$defs/node"}, "name": {"type": "string"}},
        }
    },
}


def test_escaping_round_trips_and_join_escapes_each_segment():
    for key in ("a/b", "~0", "~1/~", "", "é/ü"):
        assert unescape(escape(key)) == key
    assert join("/properties", "a/b~c") == "/properties/a~1b~0c"
    assert split("/properties/a~1b~0c") == ["properties", "a/b~c"]


@pytest.mark.parametrize(
    "path, pointer",
    [
        (["a/b~c"], "/properties/a~1b~0c"),
        (["list", 0], "/properties/list/prefixItems/0"),
        (["list", 3], "/$defs/node"),  # items is a reference: its target
        (["list", 3, "next", "name"], "/$defs/node/properties/name"),
        (["list", 3, "next"], "/$defs/node"),  # a reference's own place is its target
        (["labels", "app"], "/properties/labels/additionalProperties"),
        (["env", "X_PORT"], "/properties/env/patternProperties/^X_"),
        (["env", "HOME"], "/properties/env"),  # no keyword admits it: the object
        (["unknown", "deeper"], "/"),  # a closed object: the root
        (["either", "x"], "/properties/either"),  # the branch is not decided
    ],
)
def test_a_path_stops_at_the_deepest_node_the_schema_has(path, pointer):
    assert schema_pointer(SCHEMA, path) == pointer
    assert resolve(SCHEMA, pointer)[0]


def test_without_a_schema_paths_are_spelled_as_properties_and_items():
    assert text_pointer(["a/b", 2, "c"]) == "/properties/a~1b/items/properties/c"
    assert schema_pointer(None, ["x"]) == "/properties/x"


def test_a_scan_names_the_object_while_a_key_is_chosen_and_the_member_once_it_is_known():
    text = '{"labels":{"app":"web","ti'
    assert scan_path(scan_json(text, len(text)).stack) == ["labels"]  # choosing a key
    text = '{"labels":{"app":"we'
    assert scan_path(scan_json(text, len(text)).stack) == ["labels", "app"]
    text = '{"labels":{"app":"web",'
    assert scan_path(scan_json(text, len(text)).stack) == ["labels"]


def _paths(value, path=()):
    """Every document path in a JSON value (each key and item)."""
    yield list(path)
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _records():
    return sorted(MASKBENCH.glob("*/*.json")) if MASKBENCH.is_dir() else []


@pytest.mark.skipif(not MASKBENCH.is_dir(), reason="the shared MaskBench sample is not here")
def test_every_place_of_every_valid_maskbench_instance_names_a_node_of_its_schema():
    """Real schemas and documents (780 records, 805 valid instances, about 14,000 paths):
    each path's pointer, and each unbounded place the Doctor lists, resolves in the schema
    as written (spelled as `properties/…`/`items`, as before, 6,136 of 13,970 did not)."""
    checked = 0
    bad: list = []
    for f in _records():
        rec = json.loads(f.read_text(encoding="utf-8"))
        schema = rec["schema"]
        if not isinstance(schema, dict):
            continue
        for t in rec["tests"]:
            if not t.get("valid"):
                continue
            for path in _paths(t["data"]):
                ptr = schema_pointer(schema, path)
                checked += 1
                if not resolve(schema, ptr)[0]:
                    bad.append((f.name, path, ptr))
        for u in unbounded_parts(Constraint("schema", json.dumps(schema))):
            if not resolve(schema, u["where"])[0]:
                bad.append((f.name, "unbounded", u["where"]))
    assert checked > 10_000
    assert bad == [], bad[:5]


def test_every_state_place_of_a_kubernetes_style_schema_resolves_in_it():
    """The graph's and step view's places (one per automaton state): free keys under
    `labels` read `.../labels/additionalProperties` (labels has no `properties`)."""
    from engine.regex.dfa import build_char_dfa
    from engine.schema.places import schema_places

    schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 8},
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "maxLength": 4},
                        "maxProperties": 2,
                    },
                },
                "required": ["name", "labels"],
            },
            "spec": {"$ref": "#/$defs/spec"},
        },
        "required": ["metadata", "spec"],
        "$defs": {"spec": {"type": "object", "properties": {"on": {"type": "boolean"}}}},
    }
    dfa = build_char_dfa(Constraint("schema", json.dumps(schema)).regex())
    places = schema_places(dfa, schema)
    pointers = {p for p, _ in places.values()}
    assert all(resolve(schema, p)[0] for p in pointers), pointers
    assert "/properties/metadata/properties/labels/additionalProperties" in pointers
    assert "/$defs/spec/properties/on" in pointers
    assert not any("labels/properties" in p for p in pointers)


def test_a_backtracking_pattern_does_not_hold_up_the_walk():
    """patternProperties are the user's regexes and a key can be the user's text: `(a|aa)+$`
    against 40 a's and a `!` backtracks for hours (Python's `re` and `regex` alike); the
    walk gives the pattern up after PATTERN_MATCH_S."""
    schema = {
        "type": "object",
        "patternProperties": {"(a|aa)+$": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    assert schema_pointer(schema, ["a" * 40 + "!"]) == "/additionalProperties"
    assert schema_pointer(schema, ["aaa"]) == "/patternProperties/(a|aa)+$"
