"""Counting OpenMP teams: libgomp keeps a team of native workers for every thread that
ran a parallel region while that thread lives, and two teams on a 2-core machine slow every
pass (engine/runtimes/host_threads.py). Work that leaves a native thread behind on a live
thread of its own has started such a team."""

from __future__ import annotations

import pytest


def _native_only_threads() -> set[int]:
    """Threads of this process that Python did not start (OpenMP's workers among them)."""
    import os
    import threading

    ours = {t.native_id for t in threading.enumerate()}
    return {int(t) for t in os.listdir("/proc/self/task")} - ours


def needs_teams(runner) -> None:
    """Skip where no second team could show: one usable CPU, or no /proc to count in."""
    import os

    import torch

    lm = getattr(runner, "lm", None)
    if (lm.threads if lm else torch.get_num_threads()) == 1 or not os.path.isdir("/proc"):
        pytest.skip("one usable CPU (no team), or no /proc to count threads in")


def native_threads_added_by(work, wait_s: float = 120) -> set[int]:
    """The native threads that `work` leaves behind when it runs on a thread that lives on
    after it (as a server's batcher or the command line's main thread does)."""
    import threading

    done, hold, errors = threading.Event(), threading.Event(), []

    def body() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - raised again on the test's thread
            errors.append(exc)
        done.set()
        hold.wait(wait_s)

    other = threading.Thread(target=body)
    before = _native_only_threads()
    try:
        other.start()
        assert done.wait(wait_s), "the work on the other thread did not end"
        if errors:
            raise errors[0]
        return _native_only_threads() - before
    finally:
        hold.set()
        other.join()
