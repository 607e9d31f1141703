"""The graph in the schema's terms: on the person and order presets every position names
its JSON pointer, the graph boxes states by pointer, the outline follows the output, and no
edge label shows a raw escape."""

from __future__ import annotations

import json
import re

import pytest

from app.presets import presets
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from viz.graph import dot_source, graph_view
from viz.step_bundle import step_bundle


@pytest.mark.model
@pytest.mark.parametrize(
    "name", ["Person (JSON schema)", "Same order, compact separators (JSON schema)"]
)
def test_every_position_of_a_schema_run_names_its_pointer(engine, name):
    p = presets()[name]
    c = Constraint(p["kind"], p["text"], p["whitespace"])
    tr = engine.generate(
        GenerateRequest(prompt=p["prompt"], constraint=c, mode="jump", max_new_tokens=96)
    )
    b = step_bundle(tr)
    places = tr["automaton"]["places"]
    for e in b["steps"]:
        where = places[str(e["state"])]
        assert e["at"] == f"in {where[0]}: {where[1]}" and e["ptr"] == where[0]
    mid = [e["at"] for e in b["steps"][1:-1]]
    assert any("/properties/" in a for a in mid)
    # the outline lists the pointers the output wrote, in order, each character counted once
    written = [r[0] for r in b["outline"]]
    assert written[0] == "/" and len(set(written)) == len(written)
    assert sum(sum(r[1:]) for r in b["outline"]) == len(tr["automaton"]["path"]) - 1
    labels = [t for svg in b["layouts"] for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
    assert any(re.fullmatch(r"/properties/\w+", t) for t in labels)  # a cluster's label
    assert not [t for t in labels if "\\x" in t or "\\u00" in t or t.endswith("\u2026")]


def test_clusters_and_the_accepting_ring_in_the_dot_source():
    auto = {
        "num_states": 3,
        "initial": 0,
        "accepting": [2],
        "transitions": [
            {"from": 0, "to": 1, "label": '"', "class": 0},
            {"from": 1, "to": 1, "label": "a", "class": 1},
            {"from": 1, "to": 2, "label": '"', "class": 0},
        ],
        "classes": ['"', "a"],
        "chains": [],
        "places": {"0": ["/", "start"], "1": ["/properties/a", "string value"], "2": ["/", "x"]},
    }
    view = graph_view(auto)
    dot = dot_source(view)
    assert 'label="/properties/a"' in dot and dot.count("subgraph cluster_") == 2
    assert view.place(1) == "in /properties/a: string value" and view.place(None) == ""
    assert 's2 [id="s2", label="2", shape=doublecircle]' in dot


LABELLED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "labels": {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": 8},
            "maxProperties": 3,
        },
    },
    "required": ["name", "labels"],
}


@pytest.mark.model
def test_a_run_with_free_keys_places_every_position_as_the_scanner_reads_it(engine):
    """Issue 46: the place's part ("key", "string value") follows the JSON scanner at every
    position, and each pointer is a node of the schema (free keys under
    `/properties/labels/additionalProperties`, never `.../labels/properties/<key>`)."""
    from engine.analysis.json_scan import scan_json
    from engine.schema.pointer import resolve

    c = Constraint("schema", json.dumps(LABELLED), "compact")
    req = GenerateRequest(
        prompt="Describe a web server as JSON: a name and a few labels.",
        constraint=c,
        mode="jump",
        backend="fsm",
        max_new_tokens=80,
    )
    tr = engine.generate(req)
    places, text = tr["automaton"]["places"], tr["text"]
    assert '"labels":{"' in text  # the model wrote at least one free key
    parts = []
    for e in step_bundle(tr)["steps"]:
        pointer, part = places[str(e["state"])]
        assert resolve(LABELLED, pointer)[0], pointer
        sc = scan_json(text, e["o"])
        if sc.in_str:
            assert part.startswith("key" if sc.str_is_key else "string value"), (e["o"], part)
        parts.append((pointer, part))
    assert ("/properties/labels/additionalProperties", "string value") in parts


def test_a_60_property_object_is_drawn_in_focus_views_around_the_current_state(compile_engine):
    """A real-sized object (60 properties, some optional, a nested one): the graph is
    not drawn whole but in focus views of at most FOCUS_NODES states, each step's view holds
    its current state and what follows it, and its boxes are labelled with pointers the
    schema has. (No schema of the shared sample with 50+ properties in one object compiles
    on the regex path: optional members in order grow past its budget; this is the size
    the graph meets.)"""
    from viz.graph import FOCUS_NODES, MAX_FULL_NODES, covers, plan_focus
    from viz.step_bundle import graph_plan, positions

    props = {f"field_{i:02d}": {"type": "integer"} for i in range(58)}
    props["name"] = {"type": "string", "maxLength": 20}
    props["meta"] = {"type": "object", "properties": {"tag": {"enum": ["a", "b"]}}}
    required = [k for k in props if k != "field_57"]
    schema = {"type": "object", "properties": props, "required": required}
    c = Constraint("schema", json.dumps(schema))
    doc = {k: i for i, k in enumerate(required) if k.startswith("field")}
    doc.update(name="Ada", meta={"tag": "b"})
    text = json.dumps(doc, separators=(",", ":"))
    ctx = compile_engine.ctx
    ids = ctx.tokenizer.encode(text, add_special_tokens=False)
    content = [
        {"token": ctx.vocab.token_bytes[i].decode(), "logprob": 0.0, "top_logprobs": []}
        for i in ids
    ]
    reply = {"message": {"content": text}, "logprobs": {"content": content}}
    tr = compile_engine.replay(c, {"choices": [reply]}, {})
    assert tr["text"] == text and tr["valid"]
    auto = tr["automaton"]
    view = graph_view(auto)
    assert len(view.states) > MAX_FULL_NODES
    where = [view.element(s) or f"s{auto['initial']}" for s, _ in positions(tr)]
    keeps, which = plan_focus(view, where)
    assert len(keeps) > 1 and all(len(k) <= FOCUS_NODES for k in keeps)
    assert all(covers(view, keeps[i], el) for el, i in zip(where, which, strict=True))
    svgs, _, note = graph_plan(tr, view, where, whole=False)
    assert len(svgs) == len(keeps) and note == ""
    _, _, whole = graph_plan(tr, view, where[:1], whole=True)  # past WHOLE_LIMIT: says so
    assert f"{len(view.states):,} states remain" in whole
    box = re.compile(r'<g id="c\d+" class="cluster">\s*<path[^>]*/>\s*<text[^>]*>([^<]*)<')
    labels = {lab for svg in svgs for lab in box.findall(svg)}
    assert "/properties/meta/properties/tag" in labels or "/properties/meta" in labels, labels
    nodes = {"/", "/properties/meta/properties/tag"} | {f"/properties/{k}" for k in props}
    assert labels <= nodes and len(labels) > 10, labels - nodes
