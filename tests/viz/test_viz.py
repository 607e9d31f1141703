"""viz/ is pure: given a trace, the pictures must show what the trace says."""

import json
import re

import pytest
from made_traces import trace as made_trace

from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.decoding.trace import TRACE_VERSION, StepRecord, Trace, encode_mask
from engine.regex.dfa import build_char_dfa
from engine.serving.service import automaton_json
from viz.cards import stat_cards
from viz.graph import FOCUS_NODES, dot_source, graph_view, mark_svg, plan_focus, render_svg, trail
from viz.panels import caption, chip_labels, jump_panel, output_panel, token_strip
from viz.plots import decode_mask, timeline
from viz.step_bundle import positions, step_bundle, step_view_html
from viz.text import visible

RX = r'\{"id": [0-9]+, "ok": (true|false)\}'


@pytest.fixture(scope="module")
def trace(engine):
    tr = engine.generate(
        GenerateRequest(
            prompt="Give a record as JSON.",
            constraint=Constraint("regex", RX),
            mode="jump",
            max_new_tokens=30,
        )
    )
    assert tr.jumps, "this regex starts with forced text"
    # loaded from exactly what a downloaded trace holds, as the page loads an upload
    return Trace.from_json(json.dumps(tr.to_json()))


def test_collapsed_graph_labels_chains_and_hides_inner_states():
    auto = automaton_json(build_char_dfa(RX))
    chain = next(c for c in auto["chains"] if c["string"] == '{"id": ')
    view = graph_view(auto)
    collapsed = render_svg(dot_source(view))
    inner = chain["states"][1:-1]
    assert inner
    assert f'id="s{inner[0]}"' not in collapsed
    assert "{&quot;id&quot;:\u2423" in collapsed  # the chain's string, spaces made visible
    expanded = render_svg(dot_source(graph_view(auto, collapse=False)))
    assert f'id="s{inner[0]}"' in expanded
    # accepting states are double circles
    final = auto["accepting"][0]
    block = expanded[expanded.index(f'id="s{final}"') :]
    assert (
        block.index("</g>") > block.index("<ellipse")
        and block.count("<ellipse", 0, block.index("</g>")) == 2
    )


def test_a_state_inside_a_chain_is_shown_as_that_chain_with_its_position():
    auto = automaton_json(build_char_dfa(RX))
    chain = next(c for c in auto["chains"] if c["string"] == '{"id": ')
    view = graph_view(auto)
    inner = chain["states"][3]
    el = view.element(inner)
    assert el.startswith("e") and view.edges[int(el[1:])]["label"] == '{"id": '
    # the chain's space shown as on the graph: a reader can count the 7 characters
    assert view.position(inner) == 'inside chain \u201c{"id":\u2423\u201d after 3 of 7 characters'
    svg = render_svg(dot_source(view))
    assert f'<g id="{el}" class="edge">' in svg
    marked = mark_svg(svg, {el: "current"})
    assert f'<g id="{el}" class="edge current">' in marked and "g.edge.current path" in marked
    # uncollapsed, the same state is a node of its own
    assert graph_view(auto, collapse=False).element(inner) == f"s{inner}"


def test_trail_lists_the_path_elements_in_order_with_chains_once():
    auto = automaton_json(build_char_dfa(RX))
    view = graph_view(auto)
    dfa = build_char_dfa(RX)
    text = '{"id": 42, "ok": true}'
    path = [dfa.initial]
    for ch in text:
        path.append(dfa.step(path[-1], ch))
    els, upto = trail(view, path)
    assert els[0] == f"s{dfa.initial}" and els[-1] == f"s{path[-1]}"
    assert len(els) == len(set(els)) and len(upto) == len(path)
    first_chain = view.element(path[3])
    assert els[1] == first_chain  # the opening chain comes right after the start state
    assert upto == sorted(upto) and upto[-1] == len(els)


def test_focus_layouts_always_draw_the_current_element_and_stub_what_is_outside():
    """10,000 states: every position's layout holds its current element, each layout is
    small enough to read, and states with neighbours outside get a '+n' stub."""
    # hand-made: a line of states with a skip edge every 10 (compiling such a regex takes long)
    n = 10_000
    edges = [{"from": i, "to": i + 1, "label": "[a-z]"} for i in range(n - 1)]
    edges += [{"from": i, "to": i + 2, "label": "-"} for i in range(0, n - 2, 10)]
    auto = {
        "num_states": n,
        "initial": 0,
        "accepting": list(range(1, n)),
        "transitions": edges,
        "chains": [],
    }
    view = graph_view(auto)
    current = [view.element(s) for s in range(0, 10_000, 5)]
    keeps, which = plan_focus(view, current)
    assert len(which) == len(current) and len(keeps) < len(current)
    for el, k in zip(current, which, strict=True):
        assert all(n in keeps[k] for n in view.nodes_of(el))
        assert len(keeps[k]) <= FOCUS_NODES
    src = dot_source(view, keeps[which[5]])
    assert re.search(r'more\d+ \[id="more\d+", shape=box.*label="\+\d+ edges?"\]', src)
    assert len(re.findall(r"^s\d+ \[id=", src, re.M)) <= FOCUS_NODES


@pytest.mark.model
def test_every_position_of_a_real_run_has_its_current_element_drawn(trace):
    b = step_bundle(trace)
    assert len(b.steps) == len(trace.steps) + 1  # the end is a position too
    view = graph_view(trace.automaton)
    for k, (state, _off) in enumerate(positions(trace)):
        e = b.steps[k]
        assert e.element == view.element(state)
        assert f'<g id="{e.element}" class=' in b.layouts[e.layout]
    # step 0 starts where the automaton starts, or inside the chain the initial jump took
    assert b.steps[0].state == trace.steps[0].char_state
    assert b.steps[-1].state == trace.automaton["path"][-1]
    # the initial jump is marked at step 0
    assert b.steps[0].jumps_done >= 1 and b.jumps[0]


@pytest.mark.model
def test_allowed_tokens_are_listed_most_likely_first(trace):
    step = next(s for s in trace.steps if s.allowed > 5)
    probs = [row[3] for row in step.allowed_sample]
    assert probs == sorted(probs, reverse=True) and len(probs) >= 5
    assert step.allowed_sample[0][0] == step.top_masked[0][0]
    ids = {row[0] for row in step.allowed_sample}
    bits = decode_mask(trace.masks[step.mask_key], trace.model["vocab_size"])
    assert all(bits[i] for i in ids)


@pytest.mark.model
def test_token_strip_has_one_chip_per_token(trace):
    html = token_strip(trace, step=1)
    chips = re.findall(r'class="cfsm-chip[^"]*" data-origin="(\w+)" data-step="(-?\d+)"', html)
    assert [c[0] for c in chips] == [t["origin"] for t in trace.tokens]
    assert [int(c[1]) for c in chips] == [t["step"] for t in trace.tokens]
    assert "jump" in {c[0] for c in chips}
    assert "\u2423" in html  # spaces are shown as visible glyphs


def test_byte_tokens_read_as_hex_and_show_the_character_they_complete():
    b = "日".encode()
    tokens = [
        {"id": 1, "text": "<E6 97>", "hex": b[:2].hex(), "step": 0, "origin": "model"},
        {"id": 2, "text": "<A5>", "hex": b[2:].hex(), "step": 1, "origin": "model"},
        {"id": 3, "text": "x", "step": 2, "origin": "model"},
    ]
    labels = chip_labels(tokens)
    assert labels[0][0] == "<E6 97>" and "part of a character" in labels[0][1]
    assert labels[1][0] == "<A5> = 日" and labels[2][0] == "x"
    from engine.decoding.token_text import readable

    assert (
        readable(b[:2]) == "<E6 97>"
        and readable(b"a" + b[:2]) == "a<E6 97>"
        and readable(b"><") == "><"
    )


@pytest.mark.model
def test_jump_panel_and_caption_describe_the_jump(trace):
    j = trace.jumps[0]
    html = jump_panel(trace, 0)
    assert "Jump-forward" in html and f"reused KV prefix: {j.reused_output_tokens}" in html
    # and in plain words, with this jump's own figures
    told = re.search(r'id="what-happened">([^<]*)<', html).group(1)
    assert told.startswith("What just happened: the constraint left only one way to go on for ")
    assert f"{len(j.string)} characters" in told and f"{j.prefilled} new token" in told
    s0 = trace.steps[0]
    cap = caption(trace, 0)
    assert "Step 0" in cap and f"{len(j.string)} characters" in cap
    if s0.verifies is None and s0.origin == "model":
        assert f"{s0.allowed:,}" in cap


@pytest.mark.model
def test_output_panel_shows_the_text_and_the_verdict(trace):
    html = output_panel(trace)
    import html as h

    text = re.search(
        r'<pre id="output-text"[^>]*><span class="done">(.*?)</span>', html, re.S
    ).group(1)
    assert h.unescape(text) == trace.text
    assert f'data-valid="{str(trace.valid).lower()}"' in html


def test_mask_codec_round_trip():
    import numpy as np

    ids = np.array([0, 5, 49151, 1234])
    bits = decode_mask(encode_mask(ids, 49152), 49152)
    assert set(np.flatnonzero(bits)) == {0, 5, 1234, 49151}


@pytest.mark.model
def test_timeline_and_stat_cards_have_the_run_figures(trace):
    assert len(timeline(trace, 1).data) == 4
    t = trace.totals
    cards = stat_cards(t)
    assert f"{t.tokens_per_s:.1f}" in cards and "compile" in cards
    saved = 1 - t.forward_passes / (t.output_tokens + (t.reason == "eos"))
    assert f"{100 * saved:.0f}%" in cards


def test_a_run_that_jumps_nothing_saves_nothing():
    """`(yes|no)`: one pass, one token, complete (only EOS allowed after it): masked decoding
    would spend the same single pass, so 0% saved, not 50%; a chosen stop costs a pass."""
    import re as _re

    def saved(**t) -> str:
        return _re.search(
            r'<div class="v">([^<]*)</div><div class="l">forward passes saved',
            stat_cards(made_trace(totals=t).totals),
        ).group(1)

    assert saved(output_tokens=1, forward_passes=1, reason="complete") == "0%"
    assert saved(output_tokens=10, forward_passes=10, reason="complete") == "0%"  # a date
    assert saved(output_tokens=3, forward_passes=4, reason="eos") == "0%"
    assert saved(output_tokens=30, forward_passes=10, reason="eos") == "68%"


def test_tokens_jumped_counts_no_token_a_step_decoded():
    """The enum preset, 2026-12-06: "Status: inter" jumped, the model chose " " and "v",
    "iew." jumped; re-tokenized, all 4 final tokens were marked jumped (" interview" holds
    the model's "v"), and the card read 100% beside "4 tokens in 2 forward passes"."""

    def jumped(**t) -> str:
        return re.search(
            r'<div class="v">([^<]*)</div><div class="l">output tokens jumped',
            stat_cards(made_trace(totals=t).totals),
        ).group(1)

    enum = dict(output_tokens=4, forward_passes=2, steps=2, jumped_tokens=4, reason="complete")
    assert jumped(**enum) == "50%"
    assert jumped(**dict(enum, jumped_tokens=1)) == "25%"  # fewer marked: that count
    assert jumped(output_tokens=10, forward_passes=10, steps=10, jumped_tokens=0) == "0%"


@pytest.mark.model
def test_step_view_html_carries_its_bundle(trace):
    html = step_view_html(trace)
    data = json.loads(
        re.search(r'<script type="application/json" class="cfsm-bundle">(.*)</script>', html, re.S)
        .group(1)
        .replace("<\\/", "</")
    )
    assert data["n"] == len(trace.steps) and data["text"] == trace.text
    assert 'id="step-view"' in html and f'data-steps="{len(trace.steps)}"' in html


def _as_v1(trace: Trace) -> dict:
    """What the first release wrote: no scheduler, no per-step batch size, no queue time."""
    old = json.loads(json.dumps(trace.to_json()))
    old["version"] = 1
    old.pop("scheduler")
    old.pop("valid")
    old.pop("validation")
    old.pop("jump_skips")
    old.pop("segments")
    old["totals"].pop("queue_s")
    old["totals"].pop("jumps_skipped")
    for s in old["steps"]:
        s.pop("batch_size")
        s["allowed_sample"] = [
            row[:3] for row in s.get("allowed_sample", [])
        ]  # by id, no probabilities
    return old


@pytest.mark.model
def test_version_1_traces_still_load_and_render(trace):
    from engine.decoding.trace import TRACE_VERSION, validate_trace

    assert trace.version == TRACE_VERSION == 6
    up = validate_trace(json.dumps(_as_v1(trace)))
    assert up["version"] == 6 and up["segments"] == [] and up["scheduler"]["kind"] == "single"
    assert up["backend_why"] == ""  # the backend asked for was the one used
    assert up["jump_skips"] == [] and up["totals"]["jumps_skipped"] == 0
    assert all(s["batch_size"] == 1 for s in up["steps"]) and up["totals"]["queue_s"] == 0.0
    assert up["valid"] is None and "version 1" in up["validation"]
    # the upgraded trace is the current one, apart from the fields version 1 did not have
    assert up["steps"][1]["token_id"] == trace.steps[1].token_id and up["text"] == trace.text
    old, new = step_bundle(Trace.from_json(up)), step_bundle(trace)
    assert old.layouts == new.layouts
    for a, b in zip(old.steps, new.steps, strict=True):
        assert (a.element, a.layout, a.trail_index, a.jumps_done, a.caption) == (
            b.element,
            b.layout,
            b.trail_index,
            b.jumps_done,
            b.caption,
        )
        assert [r[0] for r in a.allowed_sample or []] == [
            r[0] for r in b.allowed_sample or []
        ] and all(r[2] is None for r in a.allowed_sample or [])


@pytest.mark.model
def test_version_2_traces_load_with_no_skipped_jumps(trace):
    from engine.decoding.trace import validate_trace

    now = trace.to_json()
    v2 = {k: v for k, v in now.items() if k != "jump_skips"}
    v2["totals"] = {k: v for k, v in now["totals"].items() if k != "jumps_skipped"}
    up = validate_trace(json.dumps({**v2, "version": 2}))
    assert (
        up["version"] == TRACE_VERSION
        and up["jump_skips"] == []
        and up["totals"]["jumps_skipped"] == 0
    )
    assert step_bundle(Trace.from_json(up)).steps == step_bundle(trace).steps


@pytest.mark.model
def test_version_3_traces_load_as_one_segment(trace):
    from engine.decoding.trace import validate_trace

    v3 = {k: v for k, v in trace.to_json().items() if k != "segments"}
    up = validate_trace(json.dumps({**v3, "version": 3}))
    assert up["version"] == TRACE_VERSION and up["segments"] == []
    assert step_bundle(Trace.from_json(up)).steps == step_bundle(trace).steps


@pytest.mark.model
def test_traces_from_the_future_or_not_traces_are_refused(trace):
    from engine.decoding.trace import TRACE_VERSION, validate_trace
    from engine.errors import CfsmError

    now = trace.to_json()
    for bad in (
        {**now, "version": TRACE_VERSION + 1},
        {**now, "version": True},
        {"version": 2},
        "[1, 2]",
        "{not json",
    ):
        with pytest.raises(CfsmError) as ei:
            validate_trace(bad)
        assert ei.value.kind == "invalid_input"


@pytest.mark.model
def test_synthetic_trace_has_the_engine_trace_shape(trace):
    from cfsm.bench.scrub import synthetic_trace

    syn, real = synthetic_trace(RX, steps=5).to_json(), trace.to_json()
    assert set(real) - {"compile", "regex", "ideal"} <= set(syn)
    assert set(real["steps"][0]) - {"verifies", "verified", "grammar_us"} <= set(syn["steps"][0])
    assert set(syn["totals"]) == set(real["totals"])


@pytest.mark.parametrize(
    "rx,prompt,steps",
    [
        ("hello world", "Say hello.", 0),
        ("(red|green|blue)", "What colour is grass?", 1),
        ("(yes|no)", "Answer.", 2),
    ],
)
@pytest.mark.model
def test_runs_of_zero_one_and_two_steps_have_every_view(engine, rx, prompt, steps):
    """The first things a beginner types: a constant (all one jump), a one-step choice that
    ends on a jump, a two-step choice. Every position, the end included, is drawn."""
    tr = engine.generate(
        GenerateRequest(
            prompt=prompt, constraint=Constraint("regex", rx), mode="jump", max_new_tokens=20
        )
    )
    assert len(tr.steps) == steps
    b = step_bundle(Trace.from_json(json.dumps(tr.to_json())))
    assert len(b.steps) == steps + 1
    end = b.steps[-1]
    assert "Decoding ended" in end.caption and end.state == tr.automaton["path"][-1]
    assert end.jumps_done == len(tr.jumps) and end.trail_index == len(b.trail)
    for e in b.steps:
        assert f'<g id="{e.element}" class=' in b.layouts[e.layout]
    if steps == 0:
        assert "forced the whole output" in end.caption and visible(tr.text) in end.caption


@pytest.mark.model
def test_a_cancelled_run_has_a_view(engine):
    calls = []
    tr = engine.generate(
        GenerateRequest(
            prompt="Describe a wizard.",
            constraint=Constraint("regex", RX),
            mode="jump",
            max_new_tokens=30,
        ),
        should_stop=lambda: calls.append(1) or len(calls) > 3,
    )
    assert tr.totals.reason == "cancelled"
    b = step_bundle(Trace.from_json(json.dumps(tr.to_json())))
    assert len(b.steps) == len(tr.steps) + 1 and "cancelled" in b.steps[-1].caption


def _preset_run(engine, name: str, max_new_tokens: int) -> Trace:
    """A regex preset decoded with jump-forward, as the page runs it."""
    from app.presets import presets

    p = presets()[name]
    req = GenerateRequest(
        prompt=p["prompt"],
        constraint=Constraint("regex", p["text"]),
        mode="jump",
        max_new_tokens=max_new_tokens,
    )
    return engine.generate(req)


@pytest.mark.model
def test_a_cjk_run_shows_its_text_and_byte_tokens(engine):
    tr = _preset_run(engine, "CJK (regex)", 60)
    hexed = [t for t in tr.tokens if "hex" in t]
    assert hexed, "the embedded tokenizer splits these characters into byte tokens"
    assert all("\ufffd" not in t["text"] for t in tr.tokens)
    assert all(t["text"].startswith("<") or "<" in t["text"] for t in hexed)
    labels = [lab for lab, _ in chip_labels(tr.tokens)]
    completed = "".join(lab.split(" = ")[1] for lab in labels if " = " in lab)
    assert completed and all(ch in tr.text for ch in completed)
    html = output_panel(tr)
    assert tr.text in html.replace("&quot;", '"')
    # the allowed list and the top-k spell a byte token as the strip does: `<E6 97>`
    from viz.step_bundle import step_bundle

    listed = [row[0] for st in step_bundle(tr).steps for row in st.top or []] + [
        row[1] for st in step_bundle(tr).steps for row in st.allowed_sample or []
    ]
    byte_runs = [t for t in listed if t.startswith("<") and t.endswith(">")]
    assert byte_runs and all("\u2423" not in t for t in byte_runs), byte_runs[:5]


def test_whole_automaton_is_drawn_when_small_and_refused_with_a_reason_when_large():
    from cfsm.bench.scrub import synthetic_trace
    from viz.graph import WHOLE_LIMIT

    small = synthetic_trace(r"[a-z]{1,80}", steps=5)  # 81 states: focus views unless whole is asked
    focus = step_bundle(small)
    assert all(layout.count('class="node"') < 40 for layout in focus.layouts) and focus.note == ""
    whole = step_bundle(small, whole=True)
    assert len(whole.layouts) == 1 and whole.note == ""
    assert whole.layouts[0].count('class="node"') >= 81
    big = synthetic_trace(r"[a-z]{1,600}", steps=5)
    b = step_bundle(big, whole=True)
    assert f"the limit is {WHOLE_LIMIT}" in b.note and "601 states" in b.note
    assert all(layout.count('class="node"') < 80 for layout in b.layouts)


def test_focus_views_of_a_branching_automaton_draw_every_position_once_each():
    """The character regex: enum branches whose exits are chains. Every position's current
    element is in its layout's SVG, and no layout is laid out twice."""
    from app.presets import presets
    from cfsm.bench.scrub import synthetic_trace

    tr = synthetic_trace(presets()["SGLang character (regex)"]["text"], steps=120)
    b = step_bundle(tr)
    assert len(b.layouts) > 1 and len(set(b.layouts)) == len(b.layouts)
    assert len(b.layouts) < len(b.steps) / 2
    for e in b.steps:
        assert f'<g id="{e.element}" class=' in b.layouts[e.layout]


@pytest.mark.model
def test_output_offsets_come_from_the_tokens_when_there_is_no_automaton(engine):
    tr = engine.generate(GenerateRequest(prompt="Say something.", mode="free", max_new_tokens=12))
    pos = positions(Trace.from_json(json.dumps(tr.to_json())))
    offs = [o for _s, o in pos]
    assert all(s is None for s, _o in pos)
    assert offs == sorted(offs) and offs[0] == 0 and offs[-1] == len(tr.text)
    assert len(set(offs)) > len(offs) // 2  # they move with the text, not stuck at 0


def test_a_one_step_timeline_draws_its_point_on_axes_that_start_at_zero():
    """A one-step run: its lines show a marker (a line of one point draws nothing), the
    mask axis starts at 0 (not 8,589-8,590.5 around its one value), steps are whole
    numbers, and the axes say what they measure."""
    step = StepRecord(
        index=0, char_state=0, token_state=0, allowed=2, token_id=1, token_text="a",
        origin="model", prob=0.5, raw_prob=0.4, feasible_mass=0.6, top_raw=[], top_masked=[],
        forward_ms=40.0, mask_us=8590.0, sample_us=10.0, output_len=0,
    )  # fmt: skip
    fig = timeline(made_trace(steps=[step]))
    assert all("markers" in tr.mode for tr in fig.data if tr.type == "scatter")
    lay = fig.layout
    mask_axis = next(a for a in (lay.yaxis2, lay.yaxis3) if a.title.text == "mask \u00b5s")
    assert mask_axis.rangemode == "tozero"
    assert lay.xaxis.tickformat == "d" and lay.xaxis2.title.text == "decoding step"
    titles = {lay[k].title.text for k in ("yaxis", "yaxis2", "yaxis3", "yaxis4")}
    assert titles == {"forward ms", "mask \u00b5s", "allowed tokens", "feasible mass"}
    allowed = next(lay[k] for k in ("yaxis3", "yaxis4") if lay[k].title.text == "allowed tokens")
    assert allowed.type == "log" and allowed.dtick == 1  # 1, 10, 100: not "5, 2, 10, 5, 2, 1"


def test_small_shares_and_long_durations_read_as_a_person_would_write_them():
    from viz.panels import duration_us, share

    assert share(0.003) == "0.3%" and share(0.62) == "62%" and share(0.0) == "0%"
    assert share(0.0004) == "<0.1%"
    assert share(0.997) == "99.7%" and share(0.9996) == ">99.9%" and share(1.0) == "100%"
    assert duration_us(45.23) == "45.2 \u00b5s"
    assert duration_us(182630.3) == "182.6 ms"
    assert duration_us(1_830_000) == "1.83 s"


def test_edges_read_in_words_with_the_exact_class_on_hover_and_in_raw_mode():
    """The character preset's name edges read 'letter, digit, whitespace or underscore' (not
    the
    partition's '[\\t\\x0b-\\rBCEF…]'; an underscore vanished into a link's underline),
    merged parallel edges read as one set ('digit' for [0-24-9]|3), a negated class reads
    'any character except ...' (control characters named, not escaped and cut), and the
    exact class is the hover text, or the label in raw mode."""
    from engine.regex.dfa import build_char_dfa
    from engine.serving.service import automaton_json
    from viz.graph import dot_source, graph_view

    v = graph_view(automaton_json(build_char_dfa(r'"[\w\d\s]{1,16}"')))
    labels = {e["label"] for e in v.edges if not e["chain"]}
    assert "letter, digit, whitespace or underscore" in labels
    assert not any(lb.startswith("[") for lb in labels)
    v = graph_view(automaton_json(build_char_dfa(r'"[^"\\]*"|[0-24-9]|3')))
    pairs = {(e["label"], e["raw"]) for e in v.edges if not e["chain"]}
    assert ("digit", "[0-9]") in pairs
    assert ('any character except " and \\', '[^"\\\\]') in pairs
    json_string = graph_view(automaton_json(build_char_dfa(r'"[^"\\\x00-\x1f]*"')))
    words = {e["label"] for e in json_string.edges if not e["chain"]}
    assert 'any character except control characters, " and \\' in words, words
    dot = dot_source(v)
    assert 'label="digit", tooltip="[0-9]"' in dot
    assert 'label="[0-9]"' in dot_source(v, raw=True)


def test_an_automaton_without_class_contents_keeps_its_labels():
    """Traces written before the automaton carried its classes still draw."""
    auto = {
        "num_states": 2,
        "initial": 0,
        "accepting": [1],
        "transitions": [
            {"from": 0, "to": 1, "label": "a", "class": 0},
            {"from": 0, "to": 1, "label": "[b-c]", "class": 1},
        ],
    }
    (e,) = graph_view(auto, collapse=False).edges
    assert e["label"] == e["raw"] == "a|[b-c]"


@pytest.mark.model
def test_a_grammar_run_says_why_there_is_no_graph_and_its_jump_names_no_chain(engine):
    """A grammar has no finite automaton: the step view says so in a short note (not an
    empty graph box), and a jump's caption speaks of the grammar, not of a chain to look
    for in a graph that is not there."""
    tr = engine.generate(
        GenerateRequest(
            prompt="Is water wet?",
            constraint=Constraint("grammar", 'root ::= "The answer is " ("yes" | "no")'),
            backend="xgrammar",
            mode="jump",
            max_new_tokens=8,
        )
    )
    assert tr.jumps and tr.automaton is None
    cap = caption(tr, 0)
    assert "the grammar allowed exactly one continuation for 14 characters" in cap
    assert "chain" not in cap
    html = step_view_html(tr)
    assert 'class="cfsm-muted cfsm-nograph">No finite automaton to draw: a grammar' in html
    assert 'data-z="fit"' not in html  # no graph tools around nothing


@pytest.mark.model
def test_a_kept_token_outside_the_models_top_k_has_no_raw_share_not_zero(trace):
    """Top-k raw vs masked: a token the mask keeps that the model's own top-k does not
    hold has no recorded raw probability; it must not read '0%' beside a large masked
    share (IPv4 showed '0% -> 71%')."""
    for k, st in enumerate(step_bundle(trace).steps[: len(trace.steps)]):
        raw_ids = {i for i, _t, _p in trace.steps[k].top_raw}
        for _text, tid, raw, _masked in st.top or []:
            assert (raw is None) == (tid not in raw_ids), (k, tid, raw)


@pytest.mark.model
def test_step_0_shows_both_the_initial_jump_and_the_one_after_its_token(engine):
    """The enum preset jumps 'Status: ' before the first step and 'inter' after it: the
    caption and the jump panel at step 0 show both (the panel showed only the second
    while the caption spoke of the first)."""
    tr = _preset_run(engine, "Enum with shared prefixes (regex)", 16)
    at0 = [j for j in tr.jumps if j.step in (-1, 0)]
    assert [j.step for j in at0] == [-1, 0], tr.jumps
    cap, html = caption(tr, 0), jump_panel(tr, 0)
    assert "Before it" in cap and "After it" in cap
    for j in at0:
        assert f"<code>{visible(j.string)}</code>" in html
    assert 'id="jump-panel"' in html and 'id="jump-panel-2"' in html


def test_a_loss_is_never_shown_as_a_negative_saving():
    """Issue 46: "-104% decode time saved" on a busy machine, and a "-0%" card."""

    def cards(**t) -> str:
        base = dict(output_tokens=20, forward_passes=10, reason="length", tokens_per_s=5)
        return stat_cards(made_trace(totals={**base, **t}).totals)

    lost = cards(run_forward_ms=2040.0, run_masked_ms=1000.0)
    assert re.search(r'class="v">104%</div><div class="l">more decode time vs masked', lost)
    assert 'more</div><div class="l">more' not in lost  # "more" said once
    tiny = cards(run_forward_ms=1001.0, run_masked_ms=1000.0)
    assert re.search(r'class="v">0%</div><div class="l">decode time saved vs masked', tiny)
    more_passes = cards(forward_passes=25)
    assert '25%</div><div class="l">more forward passes vs masked' in more_passes
    for cards in (lost, tiny, more_passes):
        assert not re.search(r'class="v">-', cards)


def test_an_ideal_of_about_one_pass_per_token_is_not_called_fewer():
    from viz.summaries import per_token_line

    assert per_token_line(0.995) == "about one per token: no pass to save"
    assert per_token_line(2.5) == "2.5x fewer than one per token"


def test_the_end_of_a_run_is_not_called_a_choice_in_the_jump_panel():
    from cfsm.bench.scrub import synthetic_trace

    steps = synthetic_trace("[a-z]{3}", steps=3).steps  # three steps
    t = made_trace(steps=steps, totals={"reason": "eos"})
    assert "the run has ended (eos: the model wrote its end token)" in jump_panel(t, 3)
    limit = made_trace(steps=steps, totals={"reason": "max_new_tokens"})
    assert "ended (max_new_tokens: it reached the Max new tokens limit)" in jump_panel(limit, 3)
    assert "the next character is a choice" in jump_panel(t, 1)
    assert "jump-forward is off" in jump_panel(made_trace(steps=steps, mode="masked"), 3)


def test_a_long_class_repeated_along_a_counted_string_reads_as_a_key_written_once():
    """A string of maxLength 20 is a run of states whose edges all read 'any character
    except control characters, " and \\': written on every edge, a focus view was about
    2,900 pt wide. Keyed (\u2460), the class is written once above the drawing, each edge
    keeps its exact class on hover, and the same view is far narrower."""
    from engine.regex.dfa import build_char_dfa
    from engine.serving.service import automaton_json
    from viz.graph import KEY_WRAP, KEYS

    dfa = build_char_dfa(r'\{"name":"([^"\\\x00-\x1f]|\\["\\/bfnrt]){0,20}","age":[0-9]{1,3}\}')
    auto = automaton_json(dfa)
    auto["path"] = dfa.path('{"name":"abcdefghijklmnopq","age":12}')
    view = graph_view(auto)
    keeps, _ = plan_focus(view, [view.element(s) for s in auto["path"]])
    k = max(keeps, key=len)
    cls = 'any character except control characters, \\" and \\\\'  # as DOT spells it
    keyed, plain = dot_source(view, k), dot_source(view, k, keyed=False)
    assert plain.count(f'label="{cls}"') >= 3
    assert f'label="{KEYS[0]}"' in keyed and f'label="{cls}"' not in keyed
    # the key, written once above the drawing, in lines a phone's panel holds
    box = re.search(r'label="((?:[^"\\]|\\.)*)"; labelloc=t', keyed).group(1)
    lines = [x.strip() for x in box.split("\\l") if x.strip()]
    assert " ".join(lines).count(f"{KEYS[0]} {cls}") == 1, lines
    assert max(len(x.replace('\\"', '"')) for x in lines) <= KEY_WRAP + 2, lines
    assert keyed.count('tooltip="[^\\\\x00-\\\\x1f\\"\\\\\\\\]"') == plain.count(
        'tooltip="[^\\\\x00-\\\\x1f\\"\\\\\\\\]"'
    )  # every edge keeps its exact class on hover

    def width(dot: str) -> float:
        return float(re.search(r'<svg width="([\d.]+)pt"', render_svg(dot)).group(1))

    assert width(keyed) < 0.7 * width(plain), (width(keyed), width(plain))


def test_a_class_that_is_a_known_group_less_a_few_reads_as_that_group_except_them():
    """A JSON string's `\\u` escape after `\\uD8`-style splits: the edge read "digit, A-C,
    E, F, a-c or e, f"."""
    import string

    from viz.charclass import describe_chars

    assert describe_chars(frozenset(string.hexdigits) - frozenset("Dd")) == (
        "hex digit except D or d"
    )
    assert describe_chars(frozenset(string.hexdigits)) == "hex digit"
    assert describe_chars(frozenset(string.ascii_lowercase) - {"q"}) == "lowercase letter except q"
    assert describe_chars(frozenset("0123456789abc")) == "digit, a, b or c"  # not near a group
