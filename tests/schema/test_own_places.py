"""Issue 46 item 3: places are the schema's own. A pointer names a node the schema has; a
free key (additionalProperties, patternProperties) or a key an open object does not list
travels beside it as a label; each position's part follows the JSON scanner."""

from __future__ import annotations

import json

import jsonpointer
import pytest

from engine.analysis.json_scan import scan_json
from engine.analysis.unbounded import unbounded_parts, unfinished_line, why_unfinished
from engine.constraint import Constraint
from engine.schema.places import place_words, places_along
from engine.schema.pointer import locate

KUBE = {
    "type": "object",
    "properties": {
        "metadata": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 63},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["name"],
        },
        "spec": {
            "type": "object",
            "properties": {
                "holderIdentity": {"type": "string", "maxLength": 63},
                "renewTime": {"type": "string", "format": "date-time"},
                "ports": {"type": "array", "items": {"type": "integer", "maximum": 65535}},
            },
            "required": ["renewTime"],
        },
    },
    "required": ["metadata", "spec"],
}
LABELS = "/properties/metadata/properties/labels"
# a document with a free key, a key the schema does not list, an escape and an array
DOC = (
    '{"metadata":{"name":"web","description":"a \\"b\\"","labels":{"app":"x"}},'
    '"spec":{"renewTime":"2024-01-01T00:00:00Z","ports":[80,443]}}'
)


def resolves(schema: dict, pointer: str) -> bool:
    """Whether a pointer names a node of `schema` (the jsonpointer library's reading)."""
    try:
        jsonpointer.resolve_pointer(schema, "" if pointer == "/" else pointer)
    except jsonpointer.JsonPointerException:
        return False
    return True


def test_a_free_key_is_a_label_beside_its_keyword_and_an_unlisted_key_beside_its_object():
    app = locate(KUBE, ["metadata", "labels", "app"])
    assert (app.pointer, app.label) == (LABELS + "/additionalProperties", 'key "app"')
    extra = locate(KUBE, ["metadata", "description", "deeper"])
    assert extra.pointer == "/properties/metadata"
    assert extra.label == 'key "description", not in the schema'
    pattern = {"type": "object", "patternProperties": {"^x-/a": {"type": "string"}}}
    got = locate(pattern, ["x-/a1"])
    assert (got.pointer, got.label) == ("/patternProperties/^x-~1a", 'key "x-/a1"')
    branch = locate({"anyOf": [{"properties": {"a": {}}}]}, ["a"])
    assert (branch.pointer, branch.label) == ("/", 'key "a"')  # a branch may list it


def test_every_position_of_a_text_is_placed_as_the_scanner_reads_it():
    """Walk a document through the scanner: the part shown at each position is the
    scanner's (a key, a string value, outside strings), each pointer resolves in the
    schema, and a key under labels or not listed is named beside its pointer."""
    places = places_along(DOC, KUBE)
    assert len(places) == len(DOC) + 1
    for i, p in enumerate(places):
        sc = scan_json(DOC, i)
        if sc.in_str:
            assert p["part"].startswith("key" if sc.str_is_key else "string value"), (i, p)
        else:
            assert not p["part"].startswith(("key", "string value")), (i, p)
        assert resolves(KUBE, p["pointer"]), p
        assert "/properties/description" not in p["pointer"]
    in_app = places[DOC.index('"x"') + 2]
    assert place_words(in_app) == f'in {LABELS}/additionalProperties (key "app"): string value'
    i = DOC.index('"a \\"b') + 2
    assert place_words(places[i]) == (
        'in /properties/metadata (key "description", not in the schema): string value'
    )
    assert places[DOC.index("descr")]["part"] == "key"  # the whole key is read ahead
    assert places[DOC.index('\\"b') + 1]["part"] == "string value, after a backslash"


@pytest.mark.parametrize("spec", [False, True])
def test_why_a_run_did_not_end_names_the_schemas_own_node_and_the_key(spec):
    c = Constraint("schema", json.dumps(KUBE), spec=spec)
    u = why_unfinished(c, '{"metadata":{"name":"a","description":"xxxxxxxxxxx')
    line = unfinished_line(u)
    assert line.startswith(
        'It stopped at the token limit in /properties/metadata (key "description", not in '
        "the schema): the value of a key the schema does not list"
    )
    assert "maxLength" not in line and "additionalProperties: false" in line
    free = unfinished_line(why_unfinished(c, '{"metadata":{"name":"a","labels":{"app":"xxx'))
    assert free.startswith(
        f'It stopped at the token limit in {LABELS}/additionalProperties (key "app")'
    )


def test_may_not_end_covers_open_objects_in_the_spec_reading_and_never_advises_the_unenforceable():
    closed = {u["where"] for u in unbounded_parts(Constraint("schema", json.dumps(KUBE)))}
    spec = {
        u["where"]: u for u in unbounded_parts(Constraint("schema", json.dumps(KUBE), spec=True))
    }
    assert set(spec) - closed == {"/", "/properties/metadata", "/properties/spec"}
    assert "open object" in spec["/properties/metadata"]["what"]
    assert {LABELS, LABELS + "/additionalProperties", "/properties/spec/properties/ports"} <= closed
    renew = spec["/properties/spec/properties/renewTime"]["bound"]
    assert "enum" in renew and not renew.startswith("set maxLength")


BACKENDS = ("fsm", "xgrammar", "llguidance", "outlines")


def _compiles(engine, c: Constraint, backend: str) -> bool:
    """Whether `backend` compiles `c` within the compile limits (with the spec reading,
    outlines' index outgrows the compile memory limit on this schema)."""
    from engine.errors import CfsmError

    try:
        return engine.compile(c, backend).compiled is not None
    except CfsmError:
        return False


@pytest.mark.parametrize("spec", [False, True])
def test_every_pointer_the_doctor_and_the_schema_view_give_resolves_for_each_backend(
    compile_engine, spec
):
    """The Kubernetes-style schema, on every backend that compiles it (leniently: the
    format is not enforced natively), with no weights: the automaton's places, the places
    along the Doctor's samples, its causes and its unbounded parts all name nodes the
    schema has (resolved by the jsonpointer library)."""
    from engine.schema.places import places_for_view

    c = Constraint("schema", json.dumps(KUBE), lenient=True, spec=spec)
    compiled = [b for b in BACKENDS if _compiles(compile_engine, c, b)]
    assert compiled[:1] == ["fsm"] and (spec or compiled == list(BACKENDS))
    rep = compile_engine.diagnose(c, samples=4)
    pointers = {p for cause in rep["causes"] for p in cause["places"] if p.startswith("/")}
    pointers |= {u["where"] for u in rep["unbounded"]}
    pointers |= {v[0] for v in places_for_view(compile_engine.automaton(c), c.text).values()}
    for text in [*rep["samples"]["texts"], DOC]:
        pointers |= {p["pointer"] for p in places_along(text, KUBE)}
    assert LABELS + "/additionalProperties" in pointers
    assert [p for p in pointers if not resolves(KUBE, p)] == []
