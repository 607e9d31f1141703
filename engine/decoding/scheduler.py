"""Schedulers over `Sequence`s: one step function, used by the single decoder (a batch of
one), batched decoding (a fixed batch) and the continuous batcher (requests join and leave
a running batch, the serving path of the page and the API).

A step: every sequence with logits waiting stages its bitmask row; the batch's rows and
logits are stacked and sampled together on the device (`select_batch`: one unpack of the
`[B, ceil(V/32)]` bitmask, one softmax, one top-k); the numbers of all of them come back
in one host transfer; each accepts its token. Then the forward passes: sequences that
jumped (or just joined) prefill their new tokens on their own prefixes, together in one
pass, and rejoin the batch at the next step (the SGLang design); sequences that feed one
token share a batched pass, the same one as the prefills on a runtime that pads nothing
(llama.cpp) or while the padded pass stays small (`plan_passes`).
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from ..lazy import lazy_module
from ..runtimes.base import Runner
from ..tokens.bitmask import full_row
from .sampling import SamplePack, select_batch
from .sequence import Sequence, Staged

torch = lazy_module("torch")

MERGE_PADDED_TOKENS = 64


@dataclass
class PassCounts:
    decode_passes: int = 0  # batched passes of one token per request
    prefill_passes: int = 0  # passes with a new request's prompt (and its initial jump)
    jump_passes: int = 0  # passes with jumped tails, each on its own prefix
    max_batch: int = 0
    forward_s: float = 0.0  # the passes' own time, what a batch's throughput is bounded by
    # where that time goes: passes of one-token feeds only, and passes holding a prompt or
    # a jump's tokens (with the one-token feeds that share them), each with the tokens fed
    decode_s: float = 0.0
    decode_tokens: int = 0
    prefill_s: float = 0.0
    prefill_tokens: int = 0

    def add(self, kind: str, seconds: float, tokens: int, size: int) -> None:
        """Count one pass of `kind` (a field name above) of `size` requests."""
        setattr(self, kind, getattr(self, kind) + 1)
        self.max_batch = max(self.max_batch, size)
        self.forward_s += seconds
        if kind == "decode_passes":
            self.decode_s += seconds
            self.decode_tokens += tokens
        else:
            self.prefill_s += seconds
            self.prefill_tokens += tokens


def _run_group(runner: Runner, seqs: list[Sequence]) -> float:
    """One forward pass for `seqs`; returns its seconds (0 when it failed)."""
    try:
        rows, dt = runner.forward([s.feed_for_runner() for s in seqs])
    except Exception as exc:  # noqa: BLE001 - fails the requests of this pass, not the server
        for s in seqs:
            s.fail(exc)
        return 0.0
    ran = sum(1 for r in rows if r is not None and not isinstance(r, BaseException))
    for s, r in zip(seqs, rows, strict=True):
        try:
            if r is None:
                s.hold()  # no room in the cache now: the same feed goes again next step
            elif isinstance(r, BaseException):
                s.fail(r)
            else:
                s.receive(r, dt, ran)
        except Exception as exc:  # noqa: BLE001
            s.fail(exc)
    return dt


def step(runner: Runner, seqs: list[Sequence], counts: PassCounts) -> None:
    """Advance every live sequence by one sampling decision or one forward pass."""
    staged = []
    for s in seqs:
        if s.done or not s.queue:
            continue
        try:
            st = s.stage()
            if st is not None:
                staged.append((s, st))
        except Exception as exc:  # noqa: BLE001 - a failing grammar ends its own request only
            s.fail(exc)
    if staged:
        _sample(runner, staged)
    feeding = [s for s in seqs if not s.done and s.feed is not None]
    for group in plan_passes(feeding, runner.pads_feeds):
        kind = (
            "decode_passes"
            if all(len(s.feed.tokens) == 1 for s in group)
            else "prefill_passes"
            if any(s.cache.get_seq_length() == 0 for s in group)
            else "jump_passes"
        )
        tokens = sum(len(s.feed.tokens) for s in group)
        counts.add(kind, _run_group(runner, group), tokens, len(group))


def _sample(runner: Runner, staged: list[tuple[Sequence, Staged]]) -> None:
    """The batch's step on the device: its logits rows and bitmask rows stacked (a row of
    ones where nothing is masked), one `select_batch`, one host transfer of the packs;
    then each sequence accepts its token. A failure here fails this step's requests."""
    seqs = [s for s, _ in staged]
    try:
        t = time.perf_counter()
        vocab = seqs[0].ctx.vocab_size
        rows = [full_row(vocab, runner.device) if st.bits is None else st.bits for _, st in staged]
        sizes = [s.pack_sizes(st) for s, st in staged]
        logits = torch.stack([st.pending.logits for _, st in staged])
        picked = select_batch(
            logits, torch.stack(rows), [s.req for s in seqs], [s.gen for s in seqs], sizes
        )
        share = (time.perf_counter() - t) / len(staged)  # on a GPU: launch time
        values = picked.tolist()  # the one host transfer of this step
    except Exception as exc:  # noqa: BLE001 - these requests fail, the batcher goes on
        for s in seqs:
            s.fail(exc)
        return
    for (s, st), vals, (r, k) in zip(staged, values, sizes, strict=True):
        st.sample_s = share
        try:
            s.accept(st, SamplePack.read(vals, r, k))
        except Exception as exc:  # noqa: BLE001
            s.fail(exc)


def plan_passes(feeding: list[Sequence], pads: bool = True) -> list[list[Sequence]]:
    """Group the planned feeds into forward passes. On a runtime that lays a pass out flat
    (`pads` False) every feed shares one pass: the weights are read once for all of them
    and no feed pays for another's length. A stacked pass pads every row to the longest
    feed, so one-token decodes ride along with prefills only while the padded pass stays
    small (a pass that small costs about one token's pass); otherwise prefills (new
    prompts, jumped tails) share one pass and decodes another."""
    if not pads:
        return [feeding] if feeding else []
    multi = [s for s in feeding if len(s.feed.tokens) > 1 or s.feed.keep > 1]
    single = [s for s in feeding if s not in multi]
    if not multi or not single:
        return [g for g in (multi, single) if g]
    longest = max(len(s.feed.tokens) for s in multi)
    if longest * len(feeding) <= MERGE_PADDED_TOKENS:
        return [multi + single]
    return [multi, single]


def run_to_completion(
    runner: Runner, seqs: list[Sequence], counts: PassCounts | None = None
) -> PassCounts:
    """Decode a fixed set of sequences until every one is done."""
    counts = counts or PassCounts()
    try:
        with runner.decode_thread():
            for s in seqs:
                s.start()
            while any(not s.done for s in seqs):
                step(runner, seqs, counts)
    finally:
        runner.release()
    return counts


class ContinuousBatcher:
    """A decode thread that runs one batch forever: submitted requests join at the next
    step, finished or cancelled ones leave; each request's future gets its sequence.
    `lock` is held around each step so other users of the model interleave safely."""

    def __init__(self, runner: Runner, lock: threading.Lock, max_batch: int = 16) -> None:
        self.runner = runner
        self.lock = lock
        self.max_batch = max_batch
        self.counts = PassCounts()
        self._inbox: queue.Queue[tuple[Sequence, Future]] = queue.Queue()
        self._closed = False
        self._gate = threading.Lock()  # submit vs close: nothing slips in after the last item
        self._abort = False
        self.n_active = 0  # requests decoding after the last step (read without the lock)
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cfsm-batcher")
        self._thread.start()
        atexit.register(self.shutdown)

    def idle(self) -> bool:
        """Nothing decoding and nothing waiting (a moment's answer, without the lock)."""
        return not self.n_active and self._inbox.empty()

    def load(self) -> tuple[int, int]:
        """(requests decoding, requests waiting for a place in the batch): a moment's
        answer, without the lock (a server's metrics; the close marker may count once)."""
        return self.n_active, self._inbox.qsize()

    def submit(self, seq: Sequence) -> Future:
        fut: Future = Future()
        with self._gate:
            if self._closed:
                fut.set_exception(RuntimeError("the decoder is shut down"))
            else:
                self._inbox.put((seq, fut))
        return fut

    def close(self) -> None:
        """Take no new requests; those already submitted are decoded to the end, then the
        thread exits."""
        with self._gate:
            self._closed = True
            self._inbox.put((None, None))

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Cancel every request and wait for the thread. Registered at exit: a daemon thread
        still inside a forward pass when the interpreter finalizes aborts the process."""
        self._abort = True
        self.close()
        self._thread.join(timeout_s)

    def _cancel_all(self, active: dict) -> None:
        while True:
            try:
                seq, fut = self._inbox.get_nowait()
            except queue.Empty:
                break
            if seq is not None:
                seq.cancel()
                fut.set_result(seq)
        for s, fut in active.items():
            s.cancel()
            fut.set_result(s)
        active.clear()

    def _drop_stopped_waiting(self) -> None:
        """Requests still waiting for a place in a full batch whose caller pressed Stop (or
        went away) end now, not when they would have been admitted."""
        waiting = []
        while True:
            try:
                waiting.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for seq, fut in waiting:
            if seq is not None and seq.should_stop is not None and seq.should_stop():
                seq.cancel()
                fut.set_result(seq)
            else:
                self._inbox.put((seq, fut))

    def _admit(self, active: dict, block: bool) -> None:
        while len(active) < self.max_batch:
            try:
                seq, fut = self._inbox.get(block=block and not active, timeout=None)
            except queue.Empty:
                return
            if seq is None:
                return  # the close marker: the loop sees `_closed`; what is queued is still served
            try:
                seq.start()
            except Exception as exc:  # noqa: BLE001
                seq.fail(exc)
            active[seq] = fut

    def _loop(self) -> None:
        with self.runner.decode_thread():
            self._serve()

    def _serve(self) -> None:
        active: dict[Sequence, Future] = {}
        while True:
            if self._abort:
                self._cancel_all(active)
                break
            if self._closed and not active and self._inbox.empty():
                break
            self._admit(active, block=not self._closed)
            if len(active) >= self.max_batch:
                self._drop_stopped_waiting()
            if not active:
                continue
            try:
                with self.lock:
                    step(self.runner, list(active), self.counts)
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any bug in a step
                for s in active:
                    s.fail(exc)
            done = [(s, active.pop(s)) for s in [s for s in active if s.done]]
            self.n_active = len(active)  # before the results: a waking caller reads it
            for s, fut in done:
                fut.set_result(s)
            if not active:
                with self.lock:
                    self.runner.release()  # idle: the last stacked cache is not kept
