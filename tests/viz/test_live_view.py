"""The step view while a run decodes (#46.6): a step's snapshot is the finished trace cut
at that step, and the live view drawn from it shows what the finished run's view shows at
that step (the state marked, the token, the mask), so following a run and scrubbing it
later agree."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.decoding.trace import Trace
from viz.step_bundle import live_view_html, step_bundle

TAKE_AT = (0, 7, 30)


def _run_with_snapshots(engine, mode: str, preset: str = "SGLang character (regex)"):
    from app.presets import presets
    from engine.constraint import Constraint
    from engine.decoding.decoder import GenerateRequest

    p = presets()[preset]
    c = Constraint(p["kind"], p["text"], p["whitespace"])
    snaps: dict[int, dict] = {}

    def listen(kind, ev):
        if kind == "step" and ev.step.index in TAKE_AT:
            snaps[ev.step.index] = ev.snapshot()

    trace = engine.generate(
        GenerateRequest(prompt=p["prompt"], constraint=c, mode=mode, backend="fsm"),
        on_event=listen,
    )
    return trace, snaps


@pytest.mark.model
@pytest.mark.parametrize("mode", ["masked", "jump"])
def test_a_snapshot_is_the_finished_trace_cut_at_its_step(engine, mode):
    trace, snaps = _run_with_snapshots(engine, mode)
    assert len(trace.steps) > max(TAKE_AT) and set(snaps) == set(TAKE_AT)
    for k, snap in snaps.items():
        assert isinstance(snap, Trace)  # the page thread draws it as it draws a finished run
        # a copy of its own: nothing of it is shared with the run that went on decoding
        assert not {id(s) for s in snap.steps} & {id(s) for s in trace.steps}
        assert snap.tokens is not trace.tokens and snap.masks is not trace.masks
        assert len(snap.steps) == k + 1
        assert snap.steps == trace.steps[: k + 1]
        assert trace.text.startswith(snap.text)
        assert snap.tokens == trace.tokens[: len(snap.tokens)]
        # the automaton drawn as the finished trace's, walked over the text so far
        path = trace.automaton["path"]
        assert snap.automaton["path"] == path[: len(snap.automaton["path"])]
        assert len(snap.automaton["path"]) == len(snap.text) + 1
        assert snap.valid is None and "decoding" in snap.validation
        assert set(snap.masks) <= set(trace.masks)
        json.dumps(snap.to_json())  # and it writes as a trace file


@pytest.mark.model
def test_the_live_view_shows_what_the_finished_view_shows_at_that_step(engine):
    trace, snaps = _run_with_snapshots(engine, "masked")
    done = step_bundle(trace)
    for k, snap in snaps.items():
        live = step_bundle(snap, live=True)
        assert live.live and live.n == k + 1
        (e,) = live.steps
        f = done.steps[k]
        for key in ("element", "state", "pointer", "mask", "token_id", "allowed", "offset"):
            assert getattr(e, key) == getattr(f, key), (k, key)
        assert e.caption == f.caption  # the same caption
        # one layout drawn (the one this step needs) and only this step's mask sent
        assert live.layouts[e.layout] is not None
        assert set(live.masks) == {e.mask}
        html = live_view_html(snap)
        assert "data-live" in html and "data-tour-start" not in html
        assert 'id="strip-html"' not in html  # the page streams the tokens above it


def test_a_live_view_without_its_automaton_says_when_it_comes_not_that_it_was_not_built():
    """A run with triggers finds its constrained stretch at its end, so its live view has
    no automaton yet; the finished view draws it (a walkthrough read "the automaton was
    not built" beside allowed tokens naming states)."""
    from cfsm.bench.scrub import synthetic_trace
    from viz.step_bundle import step_view_html

    trace = synthetic_trace("(yes|no) [0-9]{1,3}", steps=4)
    trace = dataclasses.replace(trace, automaton=None)
    assert "drawn when the run ends" in live_view_html(trace)
    assert "was not built" in step_view_html(trace)  # a finished run without one: said so
    grammar = dataclasses.replace(
        trace, request={**trace.request, "constraint": {"kind": "grammar"}}
    )
    assert "context-free" in live_view_html(grammar)
