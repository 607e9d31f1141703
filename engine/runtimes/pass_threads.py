"""Threads for each kind of forward pass, chosen while the runtime runs.

How many threads make a llama.cpp pass fastest depends on what else the machine is doing,
and differs between a one-token step and a multi-token pass (a prompt, a jump's prefill,
a batch of requests). Measured on a 2-core machine (ms a pass, 1 thread / 2 threads):
idle, a 32-token pass 119 / 62 and a step 7.6 / 5.1; with three processes each busy half
the time (a browser, a video call), 140 / 230 and 12 / 25.5: every thread of a pass waits
at each operation's barrier for the one the scheduler took away, so a multi-token pass,
many operations long, collapses; jump-forward then lost to masked decoding on the page
("a 32-token prefill 64x a step"). A count measured once at load cannot follow that.

So each pass's time is recorded under its kind and thread count (over the pass the cost
model says it should take: a 2-token and a 16-token jump compare), the count with the lower
median of its last few passes is used, and every other count is tried again after a few
passes of its kind (a few steps in a row, one multi-token pass; later the slower it was),
so a change in the machine's load is seen within a fraction of a second of steps or a few
jumps. Medians, not averages: on a busy machine one pass in a few stalls for a whole
scheduler slice, and an average would chase those. Thread counts change no logits on
llama.cpp's CPU kernels (each output row is computed by one thread) except in one case the
runtime keeps off this choice: a one-token pass over more than 256 cells, whose attention
llama.cpp splits among the threads (`EXACT_SPAN` in llamacpp_runner.py runs it on one
thread). So trying a count costs time only (checked in tests/runtimes/test_pass_threads.py).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

# pass kinds by tokens: a step, a short multi-token pass (jumps, small batches), a long one
KINDS: tuple[tuple[int, str], ...] = ((1, "step"), (16, "short"))
LONG = "long"
KIND_NAMES = (*(name for _, name in KINDS), LONG)
# passes of a kind between tries of a count that is not the fastest (times how much slower
# it was, up to MAX_BACKOFF): steps are many and cheap, multi-token passes few (a run makes
# a handful of jumps) and dearer to try
EXPLORE_EVERY = {"step": 32, "short": 6, LONG: 6}
MAX_BACKOFF = 4.0
TRY_PASSES = {"step": 3, "short": 1, LONG: 1}  # passes in a row a try lasts
# a long pass is tried on another count only while it is this short (a 300-token prompt
# on the slower count would cost a user a visible delay)
EXPLORE_MAX_TOKENS = 64
WINDOW = 5  # a count's cost: the median of its last WINDOW passes of the kind


def kind_of(n_tokens: int) -> str:
    """The kind of a pass of `n_tokens` tokens: 'step', 'short' or 'long'."""
    for most, name in KINDS:
        if n_tokens <= most:
            return name
    return LONG


@dataclass
class _Arm:
    """One thread count's record for one kind of pass."""

    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    last_pass: int = -1  # the kind's pass count when this count last ran

    @property
    def cost(self) -> float | None:
        return statistics.median(self.recent) if self.recent else None


@dataclass
class PassThreads:
    """The thread count for each kind of pass, learnt from the passes themselves.

    `choose` names the count for the next pass; `record` gives its time back. Counts are
    those the runtime may use (1 and every usable core); `fixed` pins a kind to a count
    (CFSM_STEP_THREADS pins the step); `expected_ms(k)`, when set (the runtime's cost
    model), is what a k-token pass should take, so passes of different sizes compare (else
    time per token). Not thread-safe: the runtime calls it under its pass lock."""

    counts: tuple[int, ...]
    fixed: dict[str, int] = field(default_factory=dict)
    explore: bool = True
    expected_ms: Callable[[int], float] | None = None
    _arms: dict[str, dict[int, _Arm]] = field(default_factory=dict, repr=False)
    _passes: dict[str, int] = field(default_factory=dict, repr=False)
    _trying: dict[str, list[int]] = field(default_factory=dict, repr=False)  # [count, left]

    def __post_init__(self) -> None:
        self.counts = tuple(sorted(set(self.counts)))
        self._arms = {k: {c: _Arm() for c in self.counts} for k in KIND_NAMES}
        self._passes = dict.fromkeys(KIND_NAMES, 0)

    def choose(self, n_tokens: int) -> int:
        """The thread count for a pass of `n_tokens` tokens: a pinned count; a try under way;
        else a count this kind has not run yet, or one whose turn to be tried again has
        come (a long pass only up to EXPLORE_MAX_TOKENS), which starts a try of
        TRY_PASSES passes (the count's older passes forgotten); else the fastest. Only a
        try's start changes state."""
        kind = kind_of(n_tokens)
        if kind in self.fixed:
            return self.fixed[kind]
        best = self.best(kind)
        if not self.explore or len(self.counts) == 1:
            return best
        if kind in self._trying:
            return self._trying[kind][0]
        if kind == LONG and n_tokens > EXPLORE_MAX_TOKENS:
            return best
        due = [c for c in self.counts if c != best and self._due(kind, c, best)]
        if not due:
            return best
        count = min(due, key=lambda c: self._arms[kind][c].last_pass)
        self._trying[kind] = [count, TRY_PASSES[kind]]
        self._arms[kind][count].recent.clear()  # passes from before the try are stale
        return count

    def _due(self, kind: str, count: int, best: int) -> bool:
        arm, top = self._arms[kind][count], self._arms[kind][best]
        if arm.cost is None:
            return True
        slower = min(MAX_BACKOFF, arm.cost / top.cost) if top.cost else 1.0
        return self._passes[kind] - arm.last_pass >= EXPLORE_EVERY[kind] * max(1.0, slower)

    def best(self, kind: str) -> int:
        """The count with the lowest cost for `kind`; the most threads while that count has
        not been measured (a long kind that had tried one thread on a 40-token pass ran
        every later prompt on it, at half speed on an idle machine: a prompt longer than
        EXPLORE_MAX_TOKENS never tries a count, so every core was never measured).
        Changes nothing."""
        if kind in self.fixed:
            return self.fixed[kind]
        arms = self._arms[kind]
        if arms[max(self.counts)].cost is None:
            return max(self.counts)
        known = {c: a.cost for c, a in arms.items() if a.cost is not None}
        return min(known, key=known.get)

    def record(self, n_tokens: int, threads: int, seconds: float) -> None:
        """A pass of `n_tokens` tokens on `threads` threads took `seconds`: kept among that
        count's last passes of the kind, a try under way counted down. A count not offered
        is ignored."""
        kind = kind_of(n_tokens)
        arm = self._arms[kind].get(threads)
        if arm is None or n_tokens < 1:
            return
        expected = self.expected_ms(n_tokens) if self.expected_ms else float(n_tokens)
        arm.recent.append(1e3 * seconds / max(expected, 1e-9))
        arm.last_pass = self._passes[kind]
        self._passes[kind] += 1
        trying = self._trying.get(kind)
        if trying and trying[0] == threads:
            trying[1] -= 1
            if trying[1] <= 0:
                del self._trying[kind]

    def restart(self, expected_ms: Callable[[int], float] | None) -> None:
        """Forget every record and compare passes by `expected_ms` from now on (records
        made on another scale would not compare)."""
        self.expected_ms = expected_ms
        self.__post_init__()
        self._trying.clear()

    def seed(self, kind: str, ms_by_count: dict[int, float], n_tokens: int = 1) -> None:
        """Start `kind`'s records from passes of `n_tokens` timed elsewhere (the load-time
        step timing), so the first passes do not each try every count."""
        expected = self.expected_ms(n_tokens) if self.expected_ms else float(n_tokens)
        for c, ms in ms_by_count.items():
            if c in self._arms[kind]:
                self._arms[kind][c].recent.append(ms / max(expected, 1e-9))

    def table(self) -> dict[str, dict[str, float]]:
        """Each kind's cost by thread count (ms per token, or times the cost model's pass
        once `expected_ms` is set); counts not run yet left out."""
        return {
            kind: {str(c): round(a.cost, 3) for c, a in arms.items() if a.cost is not None}
            for kind, arms in self._arms.items()
            if any(a.cost is not None for a in arms.values())
        }
