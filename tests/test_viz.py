"""viz/ is pure: given a trace, the pictures must show what the trace says."""

import json
import re

import pytest

from engine.constraint import Constraint
from engine.decode import GenerateRequest
from engine.regex_dfa import build_char_dfa
from engine.service import automaton_json
from engine.trace import encode_mask
from viz.graph import CURRENT, JUMP, fsm_svg
from viz.panels import caption, jump_panel, token_strip
from viz.plots import decode_mask, gauges, mask_heatmap, timeline, topk_bars
from viz.step_view import graph_state, render_step

RX = r'\{"id": [0-9]+, "ok": (true|false)\}'


@pytest.fixture(scope="module")
def trace(engine):
    tr = engine.generate(GenerateRequest(prompt="Give a record as JSON.", constraint=Constraint("regex", RX), mode="jump",
                                         max_new_tokens=30))
    assert tr["jumps"], "this regex starts with forced text"
    return json.loads(json.dumps(tr))  # exactly what a downloaded trace holds


def test_collapsed_graph_labels_chains_and_hides_inner_states():
    auto = automaton_json(build_char_dfa(RX))
    chain = next(c for c in auto["chains"] if c["string"] == '{"id": ')
    collapsed = fsm_svg(auto, current=0)
    inner = chain["states"][1:-1]
    assert inner
    assert f'id="s{inner[0]}"' not in collapsed
    assert "{&quot;id&quot;:\u2423" in collapsed  # the chain's string, spaces made visible
    expanded = fsm_svg(auto, current=0, collapse=False)
    assert f'id="s{inner[0]}"' in expanded
    # accepting states are double circles
    final = auto["accepting"][0]
    block = expanded[expanded.index(f'id="s{final}"'):]
    assert block.index("</g>") > block.index("<ellipse") and block.count("<ellipse", 0, block.index("</g>")) == 2


def test_current_state_and_jump_edges_are_highlighted(trace):
    current, path, pairs = graph_state(trace, 0)
    assert path[0] == trace["automaton"]["initial"]
    assert pairs, "the initial jump colours its chain"
    svg = fsm_svg(trace["automaton"], current=current, path=path, jump_pairs=pairs)
    assert f"#s{current} ellipse {{ fill: {CURRENT}" in svg
    assert JUMP in svg


def test_large_automaton_shows_a_neighbourhood():
    auto = automaton_json(build_char_dfa(r"[a-z0-9]{1,1200}"))
    assert auto["num_states"] > 1000
    svg = fsm_svg(auto, current=600)
    assert "more states hidden" in svg
    assert svg.count("<g id=\"s") < 60
    assert 'id="s600"' in svg


def test_token_strip_has_one_chip_per_token(trace):
    html = token_strip(trace, step=1)
    chips = re.findall(r'class="cfsm-chip[^"]*" data-origin="(\w+)"', html)
    assert chips == [t["origin"] for t in trace["tokens"]]
    assert "jump" in chips
    assert "\u2423" in html  # spaces are shown as visible glyphs


def test_jump_panel_and_caption_describe_the_jump(trace):
    j = trace["jumps"][0]
    html = jump_panel(trace, 0)
    assert "Jump-forward" in html and f"reused KV prefix: {j['reused_output_tokens']}" in html
    s0 = trace["steps"][0]
    cap = caption(trace, 0)
    assert "Step 0" in cap
    if "verifies" not in s0:
        assert f"{s0['allowed']:,}" in cap


def test_mask_heatmap_shows_the_allowed_set(trace, ctx):
    step = next(i for i, s in enumerate(trace["steps"]) if s["allowed"] > 1)
    s = trace["steps"][step]
    bits = decode_mask(trace["masks"][s["mask_key"]], ctx.vocab_size)
    assert int(bits.sum()) == s["allowed"] and bits[s["token_id"]]
    fig = mask_heatmap(trace, step)
    import numpy as np

    z = np.asarray(fig.data[0].z, dtype=float)
    assert int(np.nansum(z)) == s["allowed"]
    assert fig.data[1].x[0] == s["token_id"] % 256


def test_mask_codec_round_trip():
    import numpy as np

    ids = np.array([0, 5, 49151, 1234])
    bits = decode_mask(encode_mask(ids, 49152), 49152)
    assert set(np.flatnonzero(bits)) == {0, 5, 1234, 49151}


def test_plots_have_data(trace):
    assert len(topk_bars(trace, 0).data) == 2
    g = gauges(trace)
    assert len(g.data) == 5 and g.data[0].value == pytest.approx(trace["totals"]["tokens_per_s"], rel=0.01)
    assert len(timeline(trace, 1).data) == 4


def test_render_step_covers_every_panel(trace):
    v = render_step(trace, 1)
    assert set(v) == {"graph", "mask", "topk", "allowed", "strip", "jump", "caption"}
    assert "<svg" in v["graph"] and "Allowed tokens" in v["allowed"]


def _as_v1(trace: dict) -> dict:
    """What the first release wrote: no scheduler, no per-step batch size, no queue time."""
    old = json.loads(json.dumps(trace))
    old["version"] = 1
    old.pop("scheduler")
    old.pop("valid")
    old.pop("validation")
    old["totals"].pop("queue_s")
    for s in old["steps"]:
        s.pop("batch_size")
    return old


def test_version_1_traces_still_load_and_render(trace):
    from engine.trace import TRACE_VERSION, validate_trace

    assert trace["version"] == TRACE_VERSION == 2
    up = validate_trace(json.dumps(_as_v1(trace)))
    assert up["version"] == 2 and up["scheduler"]["kind"] == "single"
    assert all(s["batch_size"] == 1 for s in up["steps"]) and up["totals"]["queue_s"] == 0.0
    assert up["valid"] is None and "version 1" in up["validation"]
    # the upgraded trace is the current one, apart from the fields version 1 did not have
    assert up["steps"][1]["token_id"] == trace["steps"][1]["token_id"] and up["text"] == trace["text"]
    v = render_step(up, 1)
    assert v["graph"] == render_step(trace, 1)["graph"]


def test_traces_from_the_future_or_not_traces_are_refused(trace):
    from engine.errors import CfsmError
    from engine.trace import validate_trace

    for bad in ({**trace, "version": 3}, {**trace, "version": True}, {"version": 2}, "[1, 2]", "{not json"):
        with pytest.raises(CfsmError) as ei:
            validate_trace(bad)
        assert ei.value.kind == "invalid_input"


def test_synthetic_trace_has_the_engine_trace_shape(trace):
    from viz.bench_scrub import synthetic_trace

    syn = synthetic_trace(RX, steps=5)
    assert set(trace) - {"compile", "regex", "ideal"} <= set(syn)
    assert set(trace["steps"][0]) - {"verifies", "verified", "grammar_us"} <= set(syn["steps"][0])
    assert set(syn["totals"]) == set(trace["totals"])
