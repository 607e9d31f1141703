"""The graph in the schema's terms: on the person and order presets every position names
its JSON pointer, the graph boxes states by pointer, the outline follows the output, and no
edge label shows a raw escape."""

from __future__ import annotations

import json
import re

import pytest
from made_traces import step as made_step
from made_traces import trace as made_trace

from app.presets import presets
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.decoding.trace import Trace
from engine.schema.places import place_words, places_along
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
    places = places_along(tr.text, json.loads(p["text"]))  # read from the output itself
    for e in b.steps:
        where = places[e.offset]
        assert e.place == place_words(where) and e.pointer == where["pointer"]
    mid = [e.place for e in b.steps[1:-1]]
    assert any("/properties/" in a for a in mid)
    # the outline lists the pointers the output wrote, in order, each character counted once
    written = [r[0] for r in b.outline]
    assert written[0] == "/" and len(set(written)) == len(written)
    assert sum(sum(r[1:]) for r in b.outline) == len(tr.text)
    labels = [t for svg in b.layouts for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
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
    text = tr.text
    assert '"labels":{"' in text  # the model wrote at least one free key
    shown = []
    for e in step_bundle(tr).steps:  # what the page shows at each step
        assert resolve(LABELLED, e.pointer)[0], e.pointer
        assert e.place.startswith(f"in {e.pointer}"), e.place
        part = e.place.rsplit(": ", 1)[1]
        sc = scan_json(text, e.offset)
        if sc.in_str:
            assert part.startswith("key" if sc.str_is_key else "string value"), (e.offset, part)
        else:
            assert not part.startswith(("key", "string value")), (e.offset, part)
        shown.append(e.place)
    free = "in /properties/labels/additionalProperties (key "
    assert any(a.startswith(free) for a in shown), shown


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
    assert tr.text == text and tr.valid
    auto = tr.automaton
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


def _trace_past_the_automaton(schema: dict, text: str, spec: bool = False) -> Trace:
    """A schema run's trace as the service writes it, with the output cut in 4-character
    tokens, over the automaton of the closed reading: a key it does not list (written by
    a backend that read the object as open) ends the automaton's path there."""
    from engine.regex.dfa import build_char_dfa
    from engine.schema.places import places_for_view
    from engine.serving.service import automaton_json

    c = Constraint("schema", json.dumps(schema), "compact")
    dfa = build_char_dfa(c.regex())
    auto = automaton_json(dfa)
    auto["places"] = places_for_view(dfa, c.text)
    auto["path"] = dfa.path(text)
    chunks = [text[i : i + 4] for i in range(0, len(text), 4)]
    steps = [
        made_step(index=k, token_text=t, char_offset=4 * k, allowed=2, output_len=k)
        for k, t in enumerate(chunks)
    ]
    return made_trace(
        mode="masked",
        backend="llguidance",
        text=text,
        request={"constraint": {"kind": "schema", "text": c.text, "spec": spec}},
        tokens=[{"id": 1, "text": t, "origin": "model", "step": k} for k, t in enumerate(chunks)],
        steps=steps,
        automaton=auto,
        model={"vocab_size": 8},
    )


def test_the_step_view_follows_the_output_past_where_the_automaton_left_it():
    """Issue 46: with an object read as open, the model wrote an unlisted key; the step
    view kept saying "in /properties/metadata: key" at the state where the automaton's path
    ended. Every step's place now follows the text (the scanner's part, the key beside its
    pointer), and the outline lists only nodes of the schema."""
    from engine.analysis.json_scan import scan_json
    from engine.schema.pointer import resolve

    schema = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        },
    }
    text = '{"metadata":{"name":"web","description":"a long text","labels":{"app":"x"}}}'
    tr = _trace_past_the_automaton(schema, text)
    assert len(tr.automaton["path"]) - 1 <= text.index("description")
    b = step_bundle(tr)
    for e in b.steps:
        sc = scan_json(text, e.offset)
        if sc.in_str:
            assert e.place.endswith(": key" if sc.str_is_key else ": string value"), e
        assert resolve(schema, e.pointer)[0], e.pointer
    start = text.index("a long")
    value = next(e for e in b.steps if start < e.offset < start + 10)  # inside the value
    assert value.place == (
        'in /properties/metadata (key "description", not in the schema): string value'
    )
    assert value.position.startswith("the output left the drawn automaton at character")
    rows = [r[0] for r in b.outline]
    assert "/properties/metadata/properties/labels/additionalProperties" in rows
    assert all(resolve(schema, r)[0] for r in rows)
    assert sum(sum(r[1:]) for r in b.outline) == len(text)  # every character, once


def test_the_summary_names_the_objects_the_backend_read_as_open():
    from viz.summaries import open_objects_line

    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    tr = _trace_past_the_automaton(schema, '{"a":{}}', spec=True)
    line = open_objects_line(tr)
    assert line.startswith("**Open objects**: llguidance read `/`, `/properties/a` as open")
    assert open_objects_line(_trace_past_the_automaton(schema, '{"a":{}}')) == ""
    both = {"allOf": [{"type": "object", "properties": {"a": {}}}, {"properties": {"b": {}}}]}
    tr = _trace_past_the_automaton({"type": "object", "properties": {}}, "{}")
    tr.request["constraint"]["text"] = json.dumps(both)
    assert "`/allOf/0`, `/allOf/1` as open" in open_objects_line(tr)  # llguidance keeps allOf open


@pytest.mark.model
def test_an_llguidance_run_with_open_objects_is_placed_where_its_text_is(engine):
    """The run of issue 46: llguidance reads the Kubernetes-style schema's objects as open
    (the spec reading), the model may write keys the schema does not list; at every step
    the page's place follows the text (the scanner's part), each pointer is a node of the
    schema, and the summary names the open objects."""
    from engine.analysis.json_scan import scan_json
    from engine.schema.pointer import resolve
    from viz.summaries import open_objects_line

    kube = {
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 63},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "spec": {
                "type": "object",
                "properties": {"renewTime": {"type": "string", "format": "date-time"}},
            },
        },
        "required": ["metadata", "spec"],
    }
    c = Constraint("schema", json.dumps(kube), "compact", lenient=True, spec=True)
    req = GenerateRequest(
        prompt="Write a Kubernetes lease as JSON with metadata (name, labels) and spec.",
        constraint=c,
        mode="jump",
        backend="llguidance",
        max_new_tokens=60,
    )
    tr = engine.generate(req)
    text = tr.text
    for e in step_bundle(tr).steps:
        assert resolve(kube, e.pointer)[0], e.pointer
        part = e.place.rsplit(": ", 1)[1]
        sc = scan_json(text, e.offset)
        if sc.in_str:
            assert part.startswith("key" if sc.str_is_key else "string value"), (e.offset, part)
        else:
            assert not part.startswith(("key", "string value")), (e.offset, part)
    line = open_objects_line(tr)
    assert line.startswith("**Open objects**: llguidance read `/`, `/properties/metadata`")
