"""Schedulers over `Sequence`s: one step function, used by the single decoder (a batch of
one), batched decoding (a fixed batch) and the continuous batcher (requests join and leave
a running batch, the serving path of the page and the API).

A step: every sequence with logits waiting stages its mask and samples on the device; the
numbers of all of them come back in one host transfer; each commits its token. Then the
forward passes: sequences that feed one token go through one batched pass; sequences that
jumped (or just joined) prefill their new tokens on their own prefixes, together in one
pass, and rejoin the batch at the next step (the SGLang design).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from .runner import ModelRunner
from .sequence import Sequence


@dataclass
class PassCounts:
    decode_passes: int = 0  # batched passes of one token per request
    prefill_passes: int = 0  # passes of a new request's prompt (and its initial jump)
    jump_passes: int = 0  # passes of jumped tails, each on its own prefix
    max_batch: int = 0


def _run_group(runner: ModelRunner, seqs: list[Sequence]) -> None:
    try:
        rows, dt = runner.forward([s.feed_for_runner() for s in seqs])
    except Exception as exc:  # noqa: BLE001 - fails the requests of this pass, not the server
        for s in seqs:
            s.fail(exc)
        return
    for s, r in zip(seqs, rows, strict=True):
        s.receive(r, dt, len(seqs))


def step(runner: ModelRunner, seqs: list[Sequence], counts: PassCounts) -> None:
    """Advance every live sequence by one sampling decision or one forward pass."""
    import torch

    staged = []
    for s in seqs:
        if s.done or not s.queue:
            continue
        try:
            st = s.stage()
            if st is not None:
                staged.append((s, st, s.select(st)))
        except Exception as exc:  # noqa: BLE001 - a failing grammar ends its own request only
            s.fail(exc)
    if staged:
        packs = [p for _, _, p in staged]
        flat = torch.cat(packs).tolist()  # the one host transfer of this step
        at = 0
        for s, st, p in staged:
            vals, at = flat[at : at + p.numel()], at + p.numel()
            try:
                s.commit(st, vals)
            except Exception as exc:  # noqa: BLE001
                s.fail(exc)
    fresh = [s for s in seqs if not s.done and s.feed is not None and s.cache.get_seq_length() == 0]
    tails = [s for s in seqs if not s.done and s.feed is not None and s not in fresh]
    decode = [s for s in tails if len(s.feed.tokens) == 1 and s.feed.keep == 1]
    jumped = [s for s in tails if s not in decode]
    for group, attr in ((fresh, "prefill_passes"), (jumped, "jump_passes"), (decode, "decode_passes")):
        if group:
            _run_group(runner, group)
            setattr(counts, attr, getattr(counts, attr) + 1)
            counts.max_batch = max(counts.max_batch, len(group))


def run_to_completion(runner: ModelRunner, seqs: list[Sequence], counts: PassCounts | None = None) -> PassCounts:
    """Decode a fixed set of sequences until every one is done."""
    counts = counts or PassCounts()
    for s in seqs:
        s.start()
    while any(not s.done for s in seqs):
        step(runner, seqs, counts)
    return counts


class ContinuousBatcher:
    """A decode thread that runs one batch forever: submitted requests join at the next
    step, finished or cancelled ones leave; each request's future gets its sequence.
    `lock` is held around each step so other users of the model interleave safely."""

    def __init__(self, runner: ModelRunner, lock: threading.Lock, max_batch: int = 16) -> None:
        self.runner = runner
        self.lock = lock
        self.max_batch = max_batch
        self.counts = PassCounts()
        self._inbox: queue.Queue[tuple[Sequence, Future]] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cfsm-batcher")
        self._thread.start()

    def submit(self, seq: Sequence) -> Future:
        fut: Future = Future()
        if self._closed:
            fut.set_exception(RuntimeError("the decoder is shut down"))
        else:
            self._inbox.put((seq, fut))
        return fut

    def close(self) -> None:
        self._closed = True
        self._inbox.put((None, None))

    def _admit(self, active: dict, block: bool) -> None:
        while len(active) < self.max_batch:
            try:
                seq, fut = self._inbox.get(block=block and not active, timeout=None)
            except queue.Empty:
                return
            if seq is None:
                return
            try:
                seq.start()
            except Exception as exc:  # noqa: BLE001
                seq.fail(exc)
            active[seq] = fut

    def _loop(self) -> None:
        active: dict[Sequence, Future] = {}
        while not self._closed:
            self._admit(active, block=True)
            if not active:
                continue
            with self.lock:
                step(self.runner, list(active), self.counts)
            for s in [s for s in active if s.done]:
                active.pop(s).set_result(s)
        for s, fut in active.items():
            s.fail(RuntimeError("the decoder shut down"))
            fut.set_result(s)

