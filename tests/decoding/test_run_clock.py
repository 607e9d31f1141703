"""Time saved from the run's own clock (issue: a card said -397% while Compare said 3x
faster): the measured forward passes against the same output decoded masked, timed with the
run's measured prefill and median one-token step; the load-time model only where the run
made no one-token pass, and measured again when a run disagrees with it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from made_traces import totals as made_totals

from engine.decoding.trace import Totals
from engine.runtimes.base import CostModel


def test_time_saved_comes_from_the_run_and_agrees_with_its_wall_time():
    # 10 one-token steps of 7 ms in the run, a 60 ms prefill, 40 output tokens, ended by EOS;
    # the load-time model had a 32-token prefill at 53x a step (the server)
    totals = made_totals(
        run_forward_ms=60 + 7 * 10 + 50,  # prefill, steps at their median, a jump pass
        run_masked_ms=60 + 7 * 40,
        est_forward_ms=2114.0,
        est_masked_ms=425.0,
    )
    assert totals.time_saved() == pytest.approx(1 - 180 / 340)
    assert totals.time_saved() > 0  # the jump run took fewer passes and less time
    old = made_totals(est_forward_ms=2114.0, est_masked_ms=425.0)
    assert old.time_saved() == pytest.approx(1 - 2114 / 425)  # older traces: the model's
    assert made_totals().time_saved() is None


def test_the_cost_model_is_measured_again_when_a_run_disagrees_by_more_than_its_factor():
    m = CostModel(7.0, {8: 12.0, 32: 371.0})
    assert not m.disagrees(7.5) and not m.disagrees(13.9) and not m.disagrees(3.6)
    assert m.disagrees(14.1) and m.disagrees(3.4) and not m.disagrees(0.0)
    back = CostModel.from_json(m.to_json())
    assert back.step_ms == 7.0 and back.prefill_ms == {8: 12.0, 32: 371.0}


@pytest.mark.model
def test_a_runs_cards_and_summary_give_the_one_figure_of_its_own_clock(engine):
    """The character preset, jump: the card and the summary show the same time saved, the
    one computed from this run's passes (the load-time model is not used where the run
    made one-token passes), and both word a loss as a loss. Whether the figures agree in
    sign with Compare's wall time and the Doctor on a quiet machine is measured per preset
    by `cfsm bench figures` (a wall-clock comparison, not a test)."""
    from app.presets import presets
    from engine.constraint import Constraint
    from engine.decoding.decoder import GenerateRequest
    from viz.cards import stat_cards
    from viz.summaries import time_saved_line

    p = presets()["SGLang character (regex)"]
    c = Constraint(p["kind"], p["text"], p["whitespace"])
    t = engine.generate(GenerateRequest(prompt=p["prompt"], constraint=c, mode="jump")).totals
    assert t.clock == "this run" and t.run_step_ms > 0 and t.jumps > 0
    one_token = t.forward_passes - 1 - t.jumps  # the prefill and the jumps aside
    # masked: the prompt's prefill (the initial jump that rode in it taken out) and a step
    # per token
    steps = t.run_step_ms * t.output_tokens
    assert steps <= t.run_masked_ms <= t.prefill_ms + steps * 1.02
    assert t.run_forward_ms >= t.prefill_ms + t.run_step_ms * one_token - 1
    pct = f"{100 * abs(t.time_saved()):.0f}%"
    label = "decodetimesaved" if t.time_saved() >= -0.005 else "moredecodetime"  # a loss: N% more
    assert f'>{pct}</div><divclass="l">{label}' in stat_cards(t).replace(" ", "")
    assert ">-" not in stat_cards(t)
    line = time_saved_line(t)
    assert pct in line and "this run's clock" in line
    assert ("of the time saved" in line) == (t.time_saved() >= 0)
    # the jumps' many-token passes (one may ride in the prefill, a one-token one counts as
    # a step), what each cost in steps
    n = t.run_jump_passes
    assert 0 < n <= t.jumps and t.model_jump_in_steps > 0
    steps_made = t.forward_passes - 1 - n
    expected = t.prefill_ms + t.run_step_ms * (steps_made + t.run_jump_in_steps * n)
    assert t.run_forward_ms == pytest.approx(expected, rel=0.02)
    lost = dataclasses.replace(t, run_forward_ms=2 * t.run_masked_ms)
    assert "100% more time than masked" in time_saved_line(lost)
    assert "Why: its " in time_saved_line(lost)


def test_the_model_card_shows_the_cost_model_with_its_spread():
    from viz.summaries import _costs_line

    line = _costs_line(
        {
            "step_ms": 11.349,
            "prefill_ms": {"8": 32.4, "32": 108.9},
            "spread": {"1": [11.331, 11.612], "32": [108.1, 109.0]},
            "remeasured": 1,
            "prefill_32_in_steps": 9.6,
        }
    )
    assert "step 11.3 ms (11.3-11.6)" in line and "108.9 ms (108.1-109.0)" in line
    assert "measured again 1x" in line


@pytest.mark.model
def test_the_model_card_says_which_thread_count_each_kind_of_pass_runs_on_now(engine):
    from viz.summaries import model_card

    info = engine.decoder.model_info()
    if info["runtime"] != "llamacpp":
        pytest.skip("thread counts are chosen on llama.cpp only")
    runner = engine.decoder.runner
    pt = runner.lm.pass_threads
    with runner._lock:  # one moment's records: passes record under this lock
        now = {k: pt.best(k) for k in ("step", "short", "long")}
        steps = pt.table().get("step")
    assert info["pass_threads"] == now
    assert "step" not in pt.fixed  # nothing before this test left a pin (peers gives it back)
    # the step's choice is the count with the lower recorded time
    if steps:
        assert now["step"] == int(min(steps, key=steps.get))
    assert f"threads now: {now['step']} for a step, {now['short']} for a short pass" in (
        model_card(info)
    )
    times = info.get("step_ms_by_threads")
    if times:  # the load-time timing it started from, one thread among the counts
        assert "1" in times and all(isinstance(k, str) for k in times)
    json.loads(json.dumps(info))  # the card travels as JSON: string keys only


def _lost_run(**over) -> Totals:
    """A jump run that took more time than masked: 40 output tokens ended by EOS, a 60 ms
    prefill, 5 ms steps, 3 jump passes of 10 tokens (30 tokens spared: 10 steps made)."""
    t = {
        "output_tokens": 40, "reason": "eos", "forward_passes": 1 + 10 + 3,
        "prefill_ms": 60.0, "run_step_ms": 5.0, "clock": "this run", "runtime": "llamacpp",
        "run_jump_passes": 3, "run_jump_tokens": 30, "run_jump_in_steps": 64.2,
        "model_jump_in_steps": 3.1,
    }  # fmt: skip
    t |= over
    t["run_forward_ms"] = 60 + 5 * 10 + 5 * t["run_jump_in_steps"] * 3
    t["run_masked_ms"] = 60 + 5 * 40
    return made_totals(**t)


def test_a_run_that_lost_time_says_why_in_the_cost_models_terms():
    """The issue's busy laptop: jump passes at 64x a step on the run, 3x in the load-time
    model. The line names the loss as a loss and gives the cause; never a negative saving."""
    from viz.summaries import time_saved_line

    line = time_saved_line(_lost_run())
    assert "more time than masked" in line and "-" not in line.split("masked:")[-1][:6]
    assert "3 jump passes (10 tokens each on average) cost 64.2x a one-token step" in line
    assert "against 3.1x in the cost model measured at load" in line
    assert "193 steps' time in all against the 30 steps they spared" in line
    assert "the machine was busy" in line
    # as dear as the model says, and dearer than the steps spared: too short to pay
    short = time_saved_line(_lost_run(run_jump_in_steps=14.0, model_jump_in_steps=12.5))
    assert "busy" not in short and "jumps this short do not pay" in short
    assert "42 steps' time in all against the 30 steps they spared" in short
    # a saving has no "why"
    won = _lost_run(run_jump_in_steps=2.0)
    assert "Why" not in time_saved_line(won) and "of the time saved" in time_saved_line(won)
