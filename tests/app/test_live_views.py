"""When the page's live step view is drawn (app.run.LiveViews), without weights: the first
step at once, then not before the interval, one snapshot in flight at a time; and a
snapshot or a drawing that fails ends the live views of that run, never the run."""

from __future__ import annotations

import logging

from app.run import LIVE_VIEW_EVERY_S, LiveViews
from engine.decoding.trace import StepEvent


def _event(snapshot) -> StepEvent:
    return StepEvent(step=None, tokens=[], forward_passes=1, jumps=0, elapsed_s=0.0,
                     snapshot=snapshot)  # fmt: skip


def test_the_first_step_is_taken_then_one_at_a_time_and_not_before_the_interval():
    views, taken = LiveViews(), []
    ev = _event(lambda: taken.append(1) or {"steps": []})
    assert views.take(ev) == {"steps": []}
    assert views.take(ev) is None  # its view is not drawn yet: nothing more in flight
    views.shown(0.001)
    assert views.take(ev) is None  # drawn just now: the next one waits the interval
    views.next_at -= LIVE_VIEW_EVERY_S
    assert views.take(ev) is not None and len(taken) == 2


def test_a_costly_view_spaces_the_next_ones_out():
    views = LiveViews()
    views.take(_event(lambda: {}))
    views.shown(1.0)  # a large automaton: a second to draw
    import time

    assert views.next_at - time.perf_counter() > 3.5  # at most a quarter of the time


def test_a_failing_snapshot_or_drawing_ends_the_live_views_not_the_run(caplog):
    def broken():
        raise ValueError("a bug in the snapshot")

    views = LiveViews()
    with caplog.at_level(logging.ERROR, logger="app.run"):
        assert views.take(_event(broken)) is None
    assert "snapshot failed" in caplog.text
    assert views.take(_event(lambda: {})) is None  # no more this run

    views = LiveViews()
    trace = views.take(_event(lambda: {"automaton": {"states": 3}, "steps": [{"token_id": 1}]}))
    with caplog.at_level(logging.ERROR, logger="app.run"):
        assert views.draw(trace) is None  # an automaton without its transitions
    assert "drawing failed" in caplog.text
    assert views.take(_event(lambda: {})) is None
