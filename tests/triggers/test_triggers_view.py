"""What the page shows of a triggered run (viz only, no browser): the strip labels each
segment and marks the trigger token, free steps say the grammar is inactive and show no
mask, steps inside the call mark the automaton's state, the timeline shades free text."""

from __future__ import annotations

import json

import pytest

from app.presets import presets
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.decoding.trace import Trace
from viz.graph import graph_view
from viz.panels import caption, token_strip
from viz.plots import timeline
from viz.step_bundle import positions, step_bundle

pytestmark = pytest.mark.model


def preset_trace(engine, name: str, **kw) -> dict:
    p = presets()[name]
    fields = {
        k: p[k]
        for k in ("tool_choice", "tool_start", "tool_end", "reasoning", "think_budget")
        if k in p
    }
    c = None
    if p["kind"] == "tools":
        fields["tools"] = p["text"]
    else:
        c = Constraint(p["kind"], p["text"], p["whitespace"])
    req = GenerateRequest.from_inputs(
        p["prompt"], c, mode="jump", max_new_tokens=200, **fields, **kw
    )
    return engine.generate(req).to_json()


@pytest.fixture(scope="module")
def auto_trace(engine):
    return preset_trace(engine, "Tool calls, auto (tools)")


def test_the_auto_tools_preset_calls_a_tool_inside_free_text(auto_trace):
    tr = auto_trace
    assert tr["valid"] and tr["totals"]["finished"], tr["validation"]
    kinds = [s["kind"] for s in tr["segments"]]
    assert kinds[:3] == ["free", "constrained", "tag"], kinds
    call = json.loads(tr["segments"][1]["text"])
    assert call["name"] == "get_weather" and call["arguments"]["city"]


def test_the_strip_labels_segments_and_marks_the_trigger_token(auto_trace):
    import re

    html = token_strip(Trace.from_json(auto_trace))
    labels = re.findall(r'class="cfsm-seg-label seg-(\w+)"[^>]*>([^<]*)<', html)
    assert [k for k, _ in labels][:3] == ["free", "constrained", "tag"]
    assert labels[1][1] == "tool call \u2713"  # the call's own check
    first_free = auto_trace["segments"][0]
    chips = re.findall(r'<span class="(cfsm-chip[^"]*)"[^>]*title="([^"]*)"', html)
    assert len(chips) == len(auto_trace["tokens"])
    marked = [i for i, (cls, _) in enumerate(chips) if "trigger" in cls.split()]
    # one token is marked: the free segment's last, the one that completed the start tag
    assert marked == [first_free["end"] - 1]
    assert "trigger: the tool call starts after it" in chips[marked[0]][1]
    assert first_free["text"].endswith("```json\n")
    assert html.count("seg-free") >= first_free["end"] - first_free["start"]


def test_free_steps_say_the_grammar_is_inactive_and_call_steps_mark_their_state(auto_trace):
    tr = auto_trace
    b = step_bundle(Trace.from_json(tr))
    view = graph_view(tr["automaton"])
    where = positions(Trace.from_json(tr))
    kind = {g["index"]: g["kind"] for g in tr["segments"]}
    free = [k for k, s in enumerate(tr["steps"]) if kind[s["segment"]] == "free"]
    call = [k for k, s in enumerate(tr["steps"]) if s["segment"] == 1]
    assert free and call
    for k in free:
        e = b.steps[k]
        assert e.segment_note.startswith("No constraint here") and e.no_mask
        assert not e.element
        assert e.mask is None  # no mask recorded: nothing was masked
        assert "no constraint in this segment" in caption(Trace.from_json(tr), k)
    for k in call:
        e = b.steps[k]
        assert e.segment_note is None and e.mask in b.masks
        assert e.element == view.element(where[k][0]) and e.element
    # the call's jumps light up edges of the automaton; jumps outside it light nothing
    for j, edges in zip(tr["jumps"], b.jumps, strict=True):
        inside = tr["segments"][1]["char_start"] <= j["char_start"] < tr["segments"][1]["char_end"]
        assert bool(edges) == inside, j["string"]


def test_the_timeline_shades_free_text(auto_trace):
    fig = timeline(Trace.from_json(auto_trace))
    notes = [a.text for a in fig.layout.annotations if a.text and a.text.startswith("free")]
    shapes = [s for s in fig.layout.shapes if s.type == "rect"]
    assert notes == ["free: text"] * len(shapes) and len(shapes) >= 1
    free = [s["index"] for s in auto_trace["steps"] if s["segment"] == 0]
    assert shapes[0].x0 == min(free) - 0.5 and shapes[0].x1 == max(free) + 0.5


@pytest.mark.parametrize(
    "name", ["Reasoning, then JSON (thinking budget)", "Tool calls, required (tools)"]
)
def test_the_other_trigger_presets_finish_valid_with_the_embedded_model(engine, name):
    tr = preset_trace(engine, name)
    assert tr["valid"] and tr["totals"]["finished"], tr["validation"]
    kinds = {s["kind"] for s in tr["segments"]}
    assert "constrained" in kinds and all(
        s["valid"] for s in tr["segments"] if s["valid"] is not None
    )
    if name.startswith("Tool calls"):
        # the first jump writes the tag, then the call's first characters: those are drawn
        # as jumped (they were drawn as a path the model walked)
        first = tr["jumps"][0]
        call = next(s for s in tr["segments"] if s["kind"] == "constrained")
        assert first["char_start"] < call["char_start"] < first["char_start"] + len(first["string"])
        b = step_bundle(Trace.from_json(tr))
        assert b.jumps[0] and b.jumps[0][0] == b.trail[1]  # the drawn path's first edge


def test_a_jumped_reasoning_marker_is_captioned_as_its_tag_not_as_a_chain(engine):
    """Step 0 of the reasoning preset said "no constraint" and, in the same caption, that
    "the automaton had exactly one way forward" for the forced <think>. The jump is the
    tag; a later jump that writes the end tag then the answer's start names both."""
    from viz.panels import caption

    tr = preset_trace(engine, "Reasoning, then JSON (thinking budget)")
    start = next(j for j in tr["jumps"] if j["string"] == "<think>")
    first = caption(Trace.from_json(tr), max(start["step"], 0))
    assert "the tag \u201c&lt;think&gt;\u201d (thinking start)" in first
    assert "automaton" not in first.split("Before it")[-1]
    end = next(j for j in tr["jumps"] if j["string"].startswith("</think>"))
    then = caption(Trace.from_json(tr), end["step"])
    rest = len(end["string"]) - len("</think>")
    assert "the tag \u201c&lt;/think&gt;\u201d (thinking end)" in then
    assert rest == 0 or f"one way forward for {rest} characters" in then
