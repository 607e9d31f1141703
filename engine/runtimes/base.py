"""What every runtime offers the schedulers: per-request KV caches, one batched forward
pass over many requests, cropping a cache back to a common prefix, and a cost model.

`Sequence` and the schedulers drive a `Runner` and nothing else, so every grammar backend,
jump-forward, the trace and the page work the same on each runtime.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..errors import CfsmError
from ..lazy import lazy_module

torch = lazy_module("torch")


class KVCache(Protocol):
    """A request's cache; only its length is read outside the runner."""

    def get_seq_length(self) -> int: ...


@dataclass
class Feed:
    """Tokens one request puts through the next forward pass, on top of its own cache;
    `keep` trailing positions' logits come back (more than one after a jump with
    candidates to re-decide)."""

    cache: Any
    tokens: list[int]
    keep: int = 1


@dataclass
class CostModel:
    """What a pass costs on this runtime, measured at load: a one-token step and a
    k-token prefill onto a short context. Jump-forward trades k one-token steps for one
    k-token prefill, so its time saved depends on `prefill_ms(k) / step_ms`, which differs
    per runtime (about 2 steps for 32 tokens on the PyTorch path, 12 on llama.cpp here)."""

    step_ms: float
    prefill_ms: dict[int, float]  # k -> ms for k new tokens in one pass
    # per pass size ("1" for the step): the lowest and highest of the rounds' medians
    spread: dict[str, list[float]] = field(default_factory=dict)
    remeasured: int = 0  # times a run's own steps disagreed and the model was measured again

    # a run whose median one-token pass differs from step_ms by more than this factor
    # (either way) has the model measured again
    DISAGREE = 2.0

    def disagrees(self, observed_step_ms: float) -> bool:
        if observed_step_ms <= 0 or self.step_ms <= 0:
            return False
        r = observed_step_ms / self.step_ms
        return r > self.DISAGREE or r < 1 / self.DISAGREE

    def __post_init__(self) -> None:
        # the measured points, once (pass_ms runs at every forward pass of every request)
        self._pts = sorted({1: self.step_ms, **self.prefill_ms}.items())

    def pass_ms(self, k: int) -> float:
        """Estimated ms of one pass of k new tokens (linear between measured points)."""
        if k <= 1:
            return self.step_ms
        pts = self._pts
        for (k0, t0), (k1, t1) in zip(pts, pts[1:], strict=False):
            if k <= k1:
                return t0 + (t1 - t0) * (k - k0) / (k1 - k0)
        (k0, t0), (k1, t1) = pts[-2], pts[-1]
        return t1 + (t1 - t0) / (k1 - k0) * (k - k1)

    def passes_ms(self, sizes: Mapping[int, int]) -> float:
        """Estimated ms of passes counted by size ({k: how many}), summed in order of k:
        two runs with the same passes get the same float to the last bit (a run that
        jumps nothing then costs exactly its masked twin, not one rounding unit off)."""
        return sum(self.pass_ms(k) * n for k, n in sorted(sizes.items()))

    def to_json(self) -> dict:
        d = asdict(self)  # the dataclass fields only (not _pts)
        d["prefill_ms"] = {str(k): v for k, v in self.prefill_ms.items()}
        d["prefill_32_in_steps"] = round(self.pass_ms(32) / max(self.step_ms, 1e-9), 2)
        return d

    @classmethod
    def from_json(cls, d: dict | None) -> CostModel | None:
        if not d:
            return None
        return cls(
            float(d["step_ms"]),
            {int(k): float(v) for k, v in d["prefill_ms"].items()},
            d.get("spread") or {},
            int(d.get("remeasured", 0)),
        )


def logprob_diffs(fresh, rows: dict, tol: float, why: str) -> dict[str, float]:
    """The largest log-probability gap between each named logits row and a fresh
    prefill's row, over the fresh row's top 20 tokens (what greedy and top-k sampling
    read); raises `unsupported_model` naming the first row past `tol`, with `why` (the
    runtime's words for what that means)."""
    ref = torch.log_softmax(fresh.float(), -1)
    top = torch.topk(ref, 20).indices
    diffs = {}
    for name, got in rows.items():
        diffs[name] = float((torch.log_softmax(got.float(), -1)[top] - ref[top]).abs().max())
        if diffs[name] > tol:
            raise CfsmError(
                "unsupported_model",
                f"{name} logits differ from a fresh prefill by {diffs[name]:.3g} "
                f"(limit {tol}){why}",
            )
    return diffs


class Runner(ABC):
    """One loaded model's forward passes. Not thread-safe: the decoder's lock serializes
    every call (one scheduler step at a time)."""

    name: str  # "transformers" or "llamacpp"
    device: str
    costs: CostModel | None = None
    # A batched pass pads every feed to the longest one (a stacked tensor), so a one-token
    # feed riding with a long prefill pays for the prefill's length; False for a runtime
    # that lays a pass's tokens out flat (llama.cpp's batch): there every feed can share
    # one pass at the cost of its own tokens only.
    pads_feeds: bool = True

    @abstractmethod
    def new_cache(self) -> KVCache:
        """An empty cache for one request. Allocates nothing on the device until the
        request's first pass; never fails."""

    @abstractmethod
    def forward(self, feeds: list[Feed]) -> tuple[list, float]:
        """One pass for all `feeds`, each extending its own cache by its tokens. Returns,
        per feed, its last `keep` logits rows (a float tensor, `keep` x vocab, on `device`),
        or None where the runtime held that feed back because its cache has no room now
        (nothing changed for it: offer the same feed again at a later pass), or a CfsmError
        for a feed that could never run (that request fails, the others go on); and the
        pass time in seconds. On failure raises and the caches of this pass are unusable
        (their requests are failed by the scheduler); other caches are intact."""

    @abstractmethod
    def crop(self, cache: KVCache, keep_len: int) -> None:
        """Keep the first `keep_len` positions of `cache`; a no-op when it holds no more.
        Raises RuntimeError if the runtime could not crop (the request fails)."""

    def free(self, cache: KVCache) -> None:
        """The request is over: give back what its cache holds (idempotent)."""
        return None

    def release(self) -> None:
        """The decode loop went idle: drop anything kept between passes (a prompt prefix
        kept for later requests stays)."""
        return None

    @contextlib.contextmanager
    def decode_thread(self) -> Iterator[None]:
        """The calling thread drives this runtime's passes and samples their logits for as
        long as the context lasts (a decode loop): a runtime may set the thread up for
        that, and puts it back as it was on exit. Changes no cache; never fails."""
        yield

    def enable_prefix_reuse(self) -> bool:
        """From now on keep the latest request's first feed (its prompt) cached, and let a
        later request whose prompt starts the same way share those positions instead of
        computing them again. Returns whether this runtime does; never fails."""
        return False

    def cold(self, cache: KVCache) -> None:
        """`cache`'s request computes its whole first feed: it shares no kept prompt (two
        runs compared from the same cache state). Call before its first pass; changes only
        that request's plan; never fails. A runtime that keeps no prompt has nothing to do."""
        return None

    def recomputed_tokens(self, cache: KVCache) -> int:
        """Tokens of `cache` computed again because the runtime evicted them to make room
        for others (0 on a runtime that never evicts). Changes nothing."""
        return 0

    def requests_ahead(self, cache: KVCache) -> int:
        """While `cache`'s request waits for room: how many requests run before it (older
        ones go first); 0 on a runtime that never holds a request back. Changes nothing."""
        return 0

    def cached_prefix(self, cache: KVCache) -> int:
        """How many tokens of `cache`'s first feed were shared from a kept prompt, not
        computed (0 on a runtime that keeps none). Changes nothing."""
        return 0

    def kv_cells_used(self) -> int:
        """KV cache cells held now, by every request and any kept prompt, for a server's
        metrics (0 on a runtime that does not count them). Any thread; never waits for a
        pass, so it may be one pass behind. Changes nothing."""
        return 0

    @abstractmethod
    def self_check(self, prompt_ids: list[int]) -> dict:
        """Prove at load that cached steps, crops and batched passes give a fresh
        prefill's logits; raises CfsmError('unsupported_model') otherwise. Leaves no
        cache behind."""

    def pass_threads(self) -> dict[str, int]:
        """The thread count each kind of pass ('step', 'short', 'long') runs on now, for a
        runtime that chooses them as it runs; {} otherwise. Changes nothing."""
        return {}

    @contextlib.contextmanager
    def cost_passes(self) -> Iterator[None]:
        """While it lasts, passes run as the cost model assumes they do (a runtime that
        tunes its passes as it goes holds them still); changes nothing by default."""
        yield

    def measure_costs(
        self, prompt_ids: list[int], ks: tuple[int, ...] = (8, 32), rounds: int = 3
    ) -> CostModel:
        """Time a one-token step and k-token prefills on top of a short prompt, in
        `rounds` interleaved rounds of a few runs each, and keep the median of the rounds'
        medians as `costs`, with their spread: one busy moment of the machine moves one
        round, not the model."""
        ids = (list(prompt_ids) * (1 + max(ks) // max(1, len(prompt_ids))))[: max(ks) + 8]
        base = ids[:8]

        def timed(n_new: int, reps: int) -> float:
            out = []
            for _ in range(reps):
                cache = self.new_cache()
                try:
                    self.forward([Feed(cache, base)])
                    t0 = time.perf_counter()
                    self.forward([Feed(cache, ids[8 : 8 + n_new])])
                    out.append((time.perf_counter() - t0) * 1e3)
                finally:
                    self.free(cache)
            return round(statistics.median(out), 3)

        sizes = (1, *ks)
        with self.cost_passes():
            timed(1, 1)  # warm-up
            runs = [[timed(k, 5 if k == 1 else 3) for k in sizes] for _ in range(rounds)]
        per = {k: sorted(r[i] for r in runs) for i, k in enumerate(sizes)}
        mid = {k: round(statistics.median(v), 3) for k, v in per.items()}
        before = self.costs.remeasured + 1 if self.costs is not None else 0
        self.costs = CostModel(
            mid[1],
            {k: mid[k] for k in ks},
            {str(k): [v[0], v[-1]] for k, v in per.items()},
            before,
        )
        return self.costs
