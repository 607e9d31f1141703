"""Every JSON pointer a refusal of the regex path names is a place the raw schema has:
the lowering walks through `$ref`s and merges branches with their parents, and named the
walked path (a CRD's `/properties/versions/items/.../properties/allOf/items`, through
references, where the node is written at `/definitions/...JSONSchemaProps/...`). These
messages are `auto`'s reason, the live check's, /v1's and the CLI's."""

from __future__ import annotations

import json
import re

from engine.errors import CfsmError
from engine.schema import schema_to_regex
from engine.schema.pointer import resolve


def named_pointers(message: str) -> list[list[str]]:
    """Each `at /...` of a message, with the readings that drop trailing punctuation (a
    pattern in a pointer may end in `)`)."""
    return [[m, m.rstrip(":;,"), m.rstrip(":;,)")] for m in re.findall(r"\bat (/\S*)", message)]


def refusal(schema: dict) -> CfsmError:
    try:
        schema_to_regex(json.dumps(schema), "compact")
    except CfsmError as exc:
        return exc
    raise AssertionError("the regex path took it")


def test_a_refusal_inside_a_reference_names_where_the_definition_is():
    props = {"type": "object", "properties": {"allOf": {"type": "array",
             "items": {"type": "string", "format": "jsonpath"}}}}  # fmt: skip
    schema = {
        "definitions": {"Props": props},
        "type": "object",
        "properties": {"spec": {"$ref": "#/definitions/Props", "description": "the spec"}},
    }
    msg = refusal(schema).message
    assert "at /definitions/Props/properties/allOf/items/format" in msg, msg


def test_a_keyword_merged_from_a_branch_names_the_branch():
    schema = {"type": "object", "allOf": [{"dependencies": {"a": {"required": ["b"]}}},
              {"required": ["a"]}]}  # fmt: skip
    msg = refusal(schema).message
    assert [p for p in named_pointers(msg) if resolve(schema, p[0])[0]], msg


def test_every_pointer_named_over_the_shared_sample_resolves(jsonschemabench):
    files = sorted(p for p in jsonschemabench.rglob("*.json") if p.name != "manifest.json")
    named = 0
    for path in files:
        obj = json.loads(path.read_text(encoding="utf-8"))
        schema = obj.get("schema") if "maskbench" in path.parts else obj
        if not isinstance(schema, dict):
            continue
        try:
            schema_to_regex(json.dumps(schema), "compact")
        except CfsmError as exc:
            for readings in named_pointers(exc.message):
                named += 1
                assert any(resolve(schema, p)[0] for p in readings), (path.name, exc.message)
    assert named >= 150  # the sample's refusals name places (222 on 2026-12-08)
