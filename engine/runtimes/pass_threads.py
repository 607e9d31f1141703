"""Threads for each kind of forward pass, chosen while the runtime runs.

How many threads make a llama.cpp pass fastest depends on what else the machine is doing,
and differs between a one-token step and a multi-token pass (a prompt, a jump's prefill,
a batch of requests). Measured on a 2-core machine (ms a pass, 1 thread / 2 threads):
idle, a 32-token pass 119 / 62 and a step 7.6 / 5.1; with three processes each busy half
the time (a browser, a video call), 140 / 230 and 12 / 25.5: every thread of a pass waits
at each operation's barrier for the one the scheduler took away, so a multi-token pass,
many operations long, collapses; jump-forward then lost to masked decoding on the page
("a 32-token prefill 64x a step"). A count measured once at load cannot follow that.

So each pass's time per token is recorded under its kind and thread count (an average
that follows the last few passes), the faster count is used, and every other count is
tried again after a few passes of its kind, so a change in the machine's load is seen
within a fraction of a second of steps or a few jumps. Thread counts never change logits
on llama.cpp's CPU kernels (each output row is computed by one thread; checked in
tests/runtimes/test_pass_threads.py), so trying a count costs time only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# pass kinds by tokens: a step, a short multi-token pass (jumps, small batches), a long one
KINDS: tuple[tuple[int, str], ...] = ((1, "step"), (16, "short"))
LONG = "long"
KIND_NAMES = (*(name for _, name in KINDS), LONG)
# passes of a kind between tries of a count that is not the fastest: steps are many and
# cheap, multi-token passes few (a run makes a handful of jumps) and costlier to try
EXPLORE_EVERY = {"step": 32, "short": 6, LONG: 6}
# a long pass is tried on another count only while it is this short (a 300-token prompt
# on the slower count would cost a user a visible delay)
EXPLORE_MAX_TOKENS = 64
ALPHA = 0.35  # weight of the latest pass in a count's average time per token


def kind_of(n_tokens: int) -> str:
    """The kind of a pass of `n_tokens` tokens: 'step', 'short' or 'long'."""
    for most, name in KINDS:
        if n_tokens <= most:
            return name
    return LONG


@dataclass
class _Arm:
    """One thread count's record for one kind of pass."""

    ms_per_token: float | None = None
    passes: int = 0
    last_pass: int = -1  # the kind's pass count when this count last ran


@dataclass
class PassThreads:
    """The thread count for each kind of pass, learnt from the passes themselves.

    `choose` names the count for the next pass; `record` gives its time back. Counts are
    those the runtime may use (1 and every usable core); `fixed` pins a kind to a count
    (CFSM_STEP_THREADS pins the step). Not thread-safe: the runtime calls it under its
    pass lock."""

    counts: tuple[int, ...]
    fixed: dict[str, int] = field(default_factory=dict)
    explore: bool = True
    _arms: dict[str, dict[int, _Arm]] = field(default_factory=dict, repr=False)
    _passes: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.counts = tuple(sorted(set(self.counts)))
        self._arms = {k: {c: _Arm() for c in self.counts} for k in KIND_NAMES}
        self._passes = dict.fromkeys(KIND_NAMES, 0)

    def choose(self, n_tokens: int) -> int:
        """The thread count for a pass of `n_tokens` tokens: a pinned count; else a count
        this kind has not run yet, or one not run for EXPLORE_EVERY passes of the kind (a
        long pass only up to EXPLORE_MAX_TOKENS); else the fastest. Changes nothing."""
        kind = kind_of(n_tokens)
        if kind in self.fixed:
            return self.fixed[kind]
        arms = self._arms[kind]
        best = self.best(kind)
        if not self.explore or len(arms) == 1:
            return best
        if kind == LONG and n_tokens > EXPLORE_MAX_TOKENS:
            return best
        due = [
            c
            for c, a in arms.items()
            if a.ms_per_token is None or self._passes[kind] - a.last_pass >= EXPLORE_EVERY[kind]
        ]
        return min(due, key=lambda c: arms[c].last_pass) if due else best

    def best(self, kind: str) -> int:
        """The count with the lowest average time per token for `kind` (the most threads
        while none has been measured). Changes nothing."""
        if kind in self.fixed:
            return self.fixed[kind]
        known = {c: a.ms_per_token for c, a in self._arms[kind].items() if a.ms_per_token}
        return min(known, key=known.get) if known else max(self.counts)

    def record(self, n_tokens: int, threads: int, seconds: float) -> None:
        """A pass of `n_tokens` tokens on `threads` threads took `seconds`: folded into
        that count's average for the pass's kind. A count not offered is ignored."""
        kind = kind_of(n_tokens)
        arm = self._arms[kind].get(threads)
        if arm is None or n_tokens < 1:
            return
        ms = 1e3 * seconds / n_tokens
        old = arm.ms_per_token
        arm.ms_per_token = ms if old is None else ALPHA * ms + (1 - ALPHA) * old
        arm.passes += 1
        arm.last_pass = self._passes[kind]
        self._passes[kind] += 1

    def seed(self, kind: str, ms_per_token: dict[int, float]) -> None:
        """Start `kind`'s averages from a measurement made elsewhere (the load-time step
        timing), so the first passes do not each try every count."""
        for c, ms in ms_per_token.items():
            if c in self._arms[kind]:
                self._arms[kind][c].ms_per_token = ms

    def table(self) -> dict[str, dict[str, float]]:
        """Average ms per token by kind and thread count, as the model card shows it
        (counts not run yet left out)."""
        return {
            kind: {str(c): round(a.ms_per_token, 3) for c, a in arms.items() if a.ms_per_token}
            for kind, arms in self._arms.items()
            if any(a.ms_per_token for a in arms.values())
        }
