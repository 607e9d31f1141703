"""Threads chosen per kind of pass while the runtime runs (issue #46: on a busy 2-core
machine a 32-token pass on both cores cost 64 steps and jump-forward lost to masked
decoding; one thread was faster there, every core when idle)."""

from __future__ import annotations

import pytest
from openmp_teams import native_threads_added_by, needs_teams

from engine.runtimes.pass_threads import (
    EXPLORE_EVERY,
    EXPLORE_MAX_TOKENS,
    MAX_BACKOFF,
    PassThreads,
    kind_of,
)


def _run(pt: PassThreads, n_tokens: int, ms_per_token: dict[int, float]) -> int:
    """One pass: the count chosen, timed as `ms_per_token` says that count costs now."""
    threads = pt.choose(n_tokens)
    pt.record(n_tokens, threads, ms_per_token[threads] * n_tokens / 1e3)
    return threads


def test_kinds_split_steps_short_and_long_passes():
    assert [kind_of(n) for n in (1, 2, 16, 17, 300)] == ["step", "short", "short", "long", "long"]


def test_each_count_is_tried_then_the_faster_one_is_used():
    pt = PassThreads((1, 2))
    first = [_run(pt, 8, {1: 4.0, 2: 2.0}) for _ in range(2)]
    assert sorted(first) == [1, 2]  # each count once, before any choice
    # the slower count (2x) comes round again 2 x EXPLORE_EVERY passes after its last try
    gap = 2 * EXPLORE_EVERY["short"]
    later = [_run(pt, 8, {1: 4.0, 2: 2.0}) for _ in range(gap - 1)]
    assert later == [2] * (gap - 2) + [1]
    assert pt.best("short") == 2 and pt.best("step") == 2  # unmeasured: every core


def test_the_slower_count_is_tried_again_and_a_busy_machine_turns_the_choice():
    """Idle, both cores win; then a busy machine makes two threads 3x slower than one: the
    slower count's turn comes within EXPLORE_EVERY passes and the choice follows it."""
    pt = PassThreads((1, 2))
    idle, busy = {1: 4.0, 2: 2.0}, {1: 4.5, 2: 12.0}
    for _ in range(20):
        _run(pt, 8, idle)
    assert pt.best("short") == 2
    used = [_run(pt, 8, busy) for _ in range(2 * EXPLORE_EVERY["short"])]
    assert pt.best("short") == 1
    assert used[-EXPLORE_EVERY["short"] :] == [1] * EXPLORE_EVERY["short"]
    # and back when the machine is idle again: one try of 2 (its busy passes forgotten)
    for _ in range(int(MAX_BACKOFF * EXPLORE_EVERY["short"]) + 1):
        _run(pt, 8, idle)
    assert pt.best("short") == 2


def test_a_stalled_pass_now_and_then_does_not_turn_the_choice():
    """A busy machine stalls one pass in a few for a scheduler slice: the median of the
    last passes keeps the faster count."""
    pt = PassThreads((1, 2))
    for i in range(200):
        stall = 40.0 if i % 4 == 0 else 0.0
        _run(pt, 1, {1: 6.0 + stall, 2: 4.0 + stall})
    assert pt.best("step") == 2


def test_passes_of_different_sizes_compare_through_the_cost_model():
    """A 2-token pass costs far more per token than a 16-token one: by the cost model's
    expected time, one thread's 2-token passes are not taken for slower than every core's
    16-token ones."""
    pt = PassThreads((1, 2), expected_ms=lambda k: 5.0 + 2.0 * k)
    pt.record(2, 1, 9.0 * 0.9 / 1e3)  # 0.9x what the model expects
    pt.record(16, 2, 37.0 * 1.2 / 1e3)  # 1.2x
    assert pt.best("short") == 1


def test_kinds_learn_apart():
    pt = PassThreads((1, 2))
    for _ in range(40):
        _run(pt, 1, {1: 5.0, 2: 7.0})
        _run(pt, 12, {1: 4.0, 2: 2.0})
    assert (pt.best("step"), pt.best("short")) == (1, 2)
    table = pt.table()
    assert table["step"]["1"] == pytest.approx(5.0) and table["short"]["2"] == pytest.approx(2.0)
    assert "long" not in table  # no long pass ran


def test_a_long_pass_is_never_the_one_that_tries_a_slower_count():
    pt = PassThreads((1, 2))
    for _ in range(3):
        _run(pt, 40, {1: 9.0, 2: 3.0})
    assert pt.best("long") == 2
    big = [pt.choose(EXPLORE_MAX_TOKENS + 200) for _ in range(50)]
    assert big == [2] * 50


def test_a_prompt_runs_on_every_core_until_every_core_is_measured_slower():
    """A long kind's first pass of at most EXPLORE_MAX_TOKENS tries one thread; such passes
    are rare (a prompt is longer, or shares its start with the last one), so every core
    could stay unmeasured, and the one measured count then took every prompt: on an idle
    machine the long passes of `cfsm bench busy` ran on one thread."""
    pt = PassThreads((1, 2))
    assert _run(pt, 40, {1: 9.0, 2: 3.0}) == 1  # the try of the count not yet run
    assert pt.best("long") == 2
    assert [_run(pt, 300, {1: 9.0, 2: 3.0}) for _ in range(3)] == [2, 2, 2]
    assert pt.table()["long"] == {"1": pytest.approx(9.0), "2": pytest.approx(3.0)}


def test_pinned_kinds_and_no_exploration_keep_their_counts():
    pt = PassThreads((1, 4), {"step": 1})
    assert [_run(pt, 1, {1: 9.0, 4: 1.0}) for _ in range(50)] == [1] * 50
    fixed = PassThreads((1, 4), explore=False)
    assert [_run(fixed, 8, {1: 1.0, 4: 9.0}) for _ in range(50)] == [4] * 50
    fixed.record(8, 3, 1.0)  # a count not offered changes nothing
    assert "3" not in fixed.table().get("short", {})


@pytest.mark.model
def test_thread_counts_change_no_logits_and_the_runner_times_each_kind(engine):
    """Trying a count costs time only: a step, a short and a long pass give the same logits
    bit for bit on one thread and on every core. And every pass lands in its kind's
    record, which the trace's model card reads."""
    import torch

    from engine.runtimes.base import Feed

    dec = engine.ensure_model("llamacpp")
    runner, lm = dec.runner, dec.runner.lm
    if lm.threads == 1:
        pytest.skip("one usable CPU: there is one thread count")
    ids = list(range(1000, 1080))
    pinned = dict(lm.pass_threads.fixed)

    def logits(threads: int) -> list:
        lm.pass_threads.fixed = dict.fromkeys(("step", "short", "long"), threads)
        cache = runner.new_cache()
        try:
            out = [runner.forward([Feed(cache, ids[:40], keep=1)])[0][0]]
            out.append(runner.forward([Feed(cache, ids[40:48], keep=8)])[0][0])
            out.append(runner.forward([Feed(cache, ids[48:49])])[0][0])
            return out
        finally:
            runner.free(cache)
            lm.pass_threads.fixed = pinned

    one, every = logits(1), logits(lm.threads)
    assert all(torch.equal(a, b) for a, b in zip(one, every, strict=True))
    table = lm.pass_threads.table()
    assert {"1", str(lm.threads)} <= set(table["short"]) and {"step", "long"} <= set(table)
    assert set(runner.pass_threads()) == {"step", "short", "long"}


@pytest.mark.model
def test_a_step_past_the_split_span_gives_one_answer_on_any_count_alone_or_batched(engine):
    """llama.cpp splits a one-token pass over more than 256 cells among its threads and
    sums the parts, so a greedy run changed with the count chosen (by timing: the machine's
    load) and with other users' requests beside it (the tools preset wrote 87 tokens on
    one thread, 77 on two). Such a step runs on one thread: the same logits whichever
    count the step is given, alone or beside another request; a short one keeps its
    count."""
    import torch

    from engine.runtimes.base import Feed
    from engine.runtimes.pass_threads import KIND_NAMES

    dec = engine.ensure_model("llamacpp")
    runner, lm = dec.runner, dec.runner.lm
    if lm.threads == 1:
        pytest.skip("one usable CPU: there is one thread count")
    ids, pinned = list(range(1000, 1400)), dict(lm.pass_threads.fixed)

    def step(threads: int, n: int = 300, beside: bool = False):
        lm.pass_threads.fixed = dict.fromkeys(KIND_NAMES, threads)
        a, b = runner.new_cache(), runner.new_cache()
        try:
            runner.forward([Feed(a, ids[:n], keep=1)])
            if beside:
                runner.forward([Feed(b, ids[:20], keep=1)])
            feeds = [Feed(a, ids[n : n + 1])] + ([Feed(b, ids[20:21])] if beside else [])
            return runner.forward(feeds)[0][0], lm.threads_now
        finally:
            runner.free(a)
            runner.free(b)
            lm.pass_threads.fixed = pinned

    one = step(1)[0]
    assert torch.equal(one, step(lm.threads)[0])
    assert torch.equal(one, step(lm.threads, beside=True)[0])
    assert step(lm.threads, n=100)[1] == lm.threads  # a short span keeps the chosen count


@pytest.mark.model
def test_one_user_after_another_keeps_the_span_short_and_the_steps_on_every_core(engine):
    """Runs one after another on one prompt (a page's single user): each run's cells are
    freed at its end and the next run's fill them again, so no run's steps pass the split
    span. Before, the span's bound only grew until the cache was emptied, and one run in
    three stepped on one thread (its steps 50% slower: Compare's and the benchmarks' wall
    times jumped with it). The third run's steps give the first run's logits bit for bit:
    its cells are where the first run's were, not past the span on every core."""
    import torch

    from engine.runtimes.base import Feed

    dec = engine.ensure_model("llamacpp")
    runner, lm = dec.runner, dec.runner.lm
    if lm.threads == 1 or not runner._reuse:
        pytest.skip("one usable CPU, or no kept prompt to share")
    ids = list(range(1000, 1400))

    def run(prompt: list[int], steps: int) -> list:
        cache = runner.new_cache()
        try:
            out = [runner.forward([Feed(cache, prompt, keep=1)])[0][0]]
            for t in ids[len(prompt) : len(prompt) + steps]:
                out.append(runner.forward([Feed(cache, [t])])[0][0])
            return out
        finally:
            runner.free(cache)

    run(ids[:300], 1)  # a long run first: its end empties the cache (a span past 256)
    assert lm.placed == 0
    before = lm.exact_passes
    first, _, third = (run(ids[:50], 90) for _ in range(3))
    assert lm.exact_passes == before and lm.placed <= 256
    assert all(torch.equal(a, b) for a, b in zip(first[1:], third[1:], strict=True))


def test_the_pass_thread_runs_calls_in_turn_raises_their_errors_and_takes_its_own():
    """Calls from many threads run on the one thread, one at a time; a failing call's
    exception reaches its caller; a call made from the thread itself runs at once instead
    of waiting forever for its own turn."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from engine.runtimes.host_threads import OwnThread

    own, seen, inside = OwnThread("test-pass"), [], [0]

    def work(i: int) -> int:
        inside[0] += 1
        assert inside[0] == 1, "two calls ran at once"
        seen.append(threading.get_ident())
        inside[0] -= 1
        return i * i

    with ThreadPoolExecutor(4) as callers:
        assert list(callers.map(lambda i: own.call(work, i), range(40))) == [
            i * i for i in range(40)
        ]
    assert len(set(seen)) == 1 and threading.get_ident() not in seen
    with pytest.raises(ZeroDivisionError):
        own.call(lambda: 1 / 0)
    nested: list[int] = []  # on the old code this call never returned: bounded, not timed
    t = threading.Thread(
        target=lambda: nested.append(own.call(lambda: own.call(work, 3))), daemon=True
    )
    t.start()
    t.join(60)
    assert nested == [9], "a call made on the pass thread waited for its own turn"


@pytest.mark.model
@pytest.mark.parametrize("runtime", ["llamacpp", "transformers"])
def test_passes_asked_from_two_live_threads_share_one_openmp_team(engine, runtime):
    """libgomp keeps a team of workers for each thread that ran a parallel region, while
    that thread lives, and past one managed thread per CPU it sleeps at barriers instead of
    spinning. A pass asked from the server's batcher and another from a benchmark's loop
    (or the page's) made two teams, and every 2-thread pass then slowed down (one request
    at a time in `cfsm bench batch`: 22 against 14 ms a token on llama.cpp, 69 against 52
    on PyTorch). Every CPU pass runs on the process's one pass thread: a second live thread
    that asks for passes, as a scheduler does, adds no worker."""
    from engine.runtimes.base import Feed

    runner = engine.ensure_model(runtime).runner
    needs_teams(runner)
    lm = getattr(runner, "lm", None)
    ids = list(range(1000, 1040))
    pinned = dict(lm.pass_threads.fixed) if lm else {}

    def passes() -> None:  # as a scheduler asks: its own torch ops on its own thread
        cache = runner.new_cache()
        try:
            with runner.decode_thread():
                runner.forward([Feed(cache, ids[:32], keep=1)])
                runner.forward([Feed(cache, ids[32:33])])
        finally:
            runner.free(cache)

    if lm:
        lm.pass_threads.fixed = dict.fromkeys(("step", "short", "long"), lm.threads)
    try:
        passes()
        added = native_threads_added_by(passes, 60)
    finally:
        if lm:
            lm.pass_threads.fixed = pinned
    assert added == set(), f"{len(added)} more native threads: a second OpenMP team"


@pytest.mark.model
@pytest.mark.parametrize("runtime", ["llamacpp", "transformers"])
def test_the_load_checks_on_a_thread_that_lives_on_add_no_openmp_team(engine, runtime):
    """A model loaded on a thread that lives on (the command line's, a benchmark's) ran its
    self-check there, whose logit comparisons are torch ops: on a CPU they started that
    thread's own OpenMP team beside the pass thread's, and from then on a 2-thread step
    took 28.8 ms against 18.2 on one thread (10.9 without the second team), so every step
    ran on one thread. The load checks now run as a decode loop does (`decode_thread`)."""
    from engine.decoding.model import load_checks

    runner = engine.ensure_model(runtime).runner
    needs_teams(runner)
    got: dict = {}
    added = native_threads_added_by(
        lambda: got.update(load_checks(runner, list(range(1000, 1040))))
    )
    assert got["costs"]["step_ms"] > 0 and got["max_logprob_diff"], got
    assert added == set(), f"{len(added)} more native threads: a second OpenMP team"


@pytest.mark.model
def test_a_transformers_decode_loop_on_the_pass_thread_keeps_every_core_for_its_passes(engine):
    """A decode loop narrows its own torch ops to one thread, its passes going to the pass
    thread; a loop that runs on the pass thread itself (a caller that hands it a whole decode,
    as a first form of `cfsm bench peers` did) ran its passes inside that narrowing, on one
    thread: cfsm masked on PyTorch took 49 s against 36. Its passes get every core from
    either thread."""
    import torch

    from engine.decoding.decoder import GenerateRequest
    from engine.runtimes.host_threads import cpu_pass_thread

    runner = engine.ensure_model("transformers").runner
    needs_teams(runner)
    cores, seen = torch.get_num_threads(), []
    hook = runner.model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    req = GenerateRequest(
        prompt="Hi", mode="free", max_new_tokens=3, trace_detail=False, runtime="transformers"
    )
    try:
        engine.generate(req)
        from_here = list(seen)
        seen.clear()
        cpu_pass_thread().call(engine.generate, req)
    finally:
        hook.remove()
    assert from_here and set(from_here) == {cores}
    assert seen and set(seen) == {cores}, f"passes on {set(seen)} threads of {cores}"
