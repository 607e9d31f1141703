"""The llama.cpp runtime: a GGUF model decoded by llama.cpp's C API (through the CFFI
bindings of `llama-cpp-py-sync`), behind the same `Runner` contract as the PyTorch path.

One llama.cpp context serves every request: each request's cache is a sequence id in a
unified KV cache, a batched pass is one `llama_decode` with one sequence id per token,
crops are `llama_memory_seq_rm`, and logits are read only at the positions a feed keeps.
Flash attention is on: without it a k-token pass and k one-token steps differ by up to
0.6 in logits, and jump-forward would change outputs for numerical reasons only."""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import CfsmError
from ..lazy import lazy_module
from .base import Feed, Runner, logprob_diffs
from .host_threads import cpu_pass_thread, torch_ops_on_one_thread, usable_cpus
from .llamacpp_lib import LOG, bindings_version, load_lib
from .pass_threads import KIND_NAMES, PassThreads

np = lazy_module("numpy")
torch = lazy_module("torch")
# optional: the wheel exists for x86_64 Linux only (pyproject.toml); a read raises ImportError
llama_cpp = lazy_module("llama_cpp_py_sync")

SETTING_ERRORS: list[str] = []  # refused environment settings: loading a model says so


def _env_int(name: str, default: int, least: int) -> int:
    """An integer setting from the environment; one below `least` (or not a number) is
    recorded in SETTING_ERRORS, which `LlamaModel` raises, and the default stands in."""
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        value = least - 1
    if value < least:
        SETTING_ERRORS.append(f"{name}={raw!r}: give a whole number of at least {least}")
        return default
    return value


# KV cells shared by all requests. A request that does not fit waits for cells (see
# `LlamaCppRunner._plan`); only one that could not fit alone fails.
N_CTX = _env_int("CFSM_LLAMA_N_CTX", 8192, 256)
# sequence ids: two are the runner's own (PREFIX_SEQ, GRAVE_SEQ), the rest are requests
N_SEQ_MAX = _env_int("CFSM_LLAMA_N_SEQ", 64, 3)
N_BATCH = 2048  # tokens per llama_decode call (longer feeds are split)
# llama.cpp computes a call in micro-batches of at most this many tokens. From 64 tokens on,
# its CPU matrix products take another path whose logits differ by up to 0.58 from the
# one-token path (measured on the embedded model: a 64-token prefill against 63 + 1); with
# micro-batches of 32 every pass gives the same logits however the tokens are split (a
# prompt, a jump's prefill, one-token steps, a batch of requests), and long prefills were
# no slower here (200 tokens: 0.98 s against 1.11 s).
N_UBATCH = 32
# The last sequence id holds the latest request's prompt for later requests to share
# (`llama_memory_seq_cp`: the cells get a second sequence id, nothing is copied).
PREFIX_SEQ = N_SEQ_MAX - 1
# Cells a request gives up (a crop, its end) move to this id until no request is live:
# flash attention on the CPU sums a sequence's cells in cell order, and a freed cell before
# a live request's cells, filled by its next token, changed its logits by 0.53 (a batch
# would no longer decode as each request alone). Under steady load retired cells pile up:
# when a pass does not fit, every live request is evicted at once (the cache cleared) and
# each recomputes its tokens at its next pass, oldest first, with the logits it would have
# had (passes of any split agree, see N_UBATCH).
GRAVE_SEQ = N_SEQ_MAX - 2
REQUEST_SEQS = N_SEQ_MAX - 2
# Threads for each kind of pass (a step, a short or a long multi-token pass), chosen as the
# runtime runs from the passes' own times (`pass_threads`: load changes which is faster), the
# step's counts timed at load to start from (`tune_step_threads`). CFSM_STEP_THREADS pins the
# step's count, CFSM_ADAPT_THREADS=0 every kind (steps on the load-time choice, the rest on
# all cores). OpenMP's workers spin at barriers (PASSIVE: an 8-token pass 42-47 ms, not 22-29).
STEP_THREADS_SET = os.environ.get("CFSM_STEP_THREADS")
STEP_THREADS = max(1, int(STEP_THREADS_SET or "1"))
ADAPT_THREADS = os.environ.get("CFSM_ADAPT_THREADS", "1") != "0"
# A one-token pass over more than this many cells runs on one thread: llama.cpp's CPU flash
# attention splits its cells among the threads (from 257 on) and sums the parts, so on 2
# threads logits moved by up to 0.51 against 1 thread or a batch, and greedy output changed
# with the machine's load and other users (the tools preset: 87 tokens on 1 thread, 77 on 2).
EXACT_SPAN = 256
PREFIX_REUSE = os.environ.get("CFSM_PREFIX_REUSE", "1") != "0"


@dataclass
class LlamaSeq:
    """One request's cache: a sequence id, taken at its first pass, its length and the
    tokens at its positions (what it computes again after an eviction)."""

    n: int = 0
    seq_id: int | None = None
    reused: int = 0  # positions of its first feed shared from the kept prompt
    freed: bool = field(default=False, repr=False)
    tokens: list[int] = field(default_factory=list, repr=False)
    resident: bool = True  # its cells are in the cache (False after an eviction)
    ticket: int = -1  # order of its first pass: under pressure the oldest runs first
    held: int = 0  # passes it was held back for cells
    ahead: int = 0  # at its last hold: live requests older than it (they run first)
    recomputed: int = 0  # tokens computed again after evictions
    shares: bool = True  # its first feed may share the kept prompt (False: `cold`)

    def get_seq_length(self) -> int:
        return self.n


class LlamaModel:
    """A GGUF file loaded once: the model, its context and a reusable batch."""

    def __init__(self, path: str, n_threads: int | None = None, n_ctx: int = N_CTX) -> None:
        if SETTING_ERRORS:
            raise CfsmError("invalid_input", "; ".join(SETTING_ERRORS))
        self.path = path  # the GGUF file (the peers benchmark starts llama-server on it)
        lib, ffi = self.lib, self.ffi = load_lib()
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(path.encode(), mp)
        if self.model == ffi.NULL:
            raise CfsmError(
                "unknown_model", f"llama.cpp could not load {path!r}: {' '.join(LOG[-2:])}"
            )
        self._refuse_recurrent(path)
        cp = lib.llama_context_default_params()
        threads = n_threads or int(os.environ.get("CFSM_THREADS", "0")) or usable_cpus()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, N_BATCH, N_UBATCH
        cp.n_seq_max, cp.kv_unified = N_SEQ_MAX, True
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = 1
        cp.embeddings, cp.no_perf = False, True
        self.ctx = lib.llama_init_from_model(self.model, cp)
        if self.ctx == ffi.NULL:
            lib.llama_model_free(self.model)
            raise CfsmError("unknown_model", f"llama.cpp could not create a context for {path!r}")
        self.threads = self.threads_now = threads
        self.placed = 0  # the span's bound: cells filled since a clear (see runner._settle)
        self.exact_passes = 0  # one-token passes put on one thread for their span
        pinned = {"step": min(STEP_THREADS, threads)} if STEP_THREADS_SET else {}
        if not ADAPT_THREADS:
            pinned |= {"short": threads, "long": threads}
        self.pass_threads = PassThreads((1, threads), pinned, explore=ADAPT_THREADS)
        self.on_own_thread = cpu_pass_thread()  # every pass: one OpenMP team
        self.n_ctx = int(lib.llama_n_ctx(self.ctx))  # llama.cpp may round the size up
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(N_BATCH, 0, 1)
        self.desc = self._str(lambda buf, n: lib.llama_model_desc(self.model, buf, n))

    def _refuse_recurrent(self, path: str) -> None:
        """A recurrent or hybrid model (Mamba, RWKV, Jamba...) keeps a state per sequence
        that cannot be cut back to a position, and jump-forward crops at every jump."""
        lib = self.lib
        kind = (
            "recurrent"
            if lib.llama_model_is_recurrent(self.model)
            else "hybrid"
            if lib.llama_model_is_hybrid(self.model)
            else None
        )
        if kind is not None:
            lib.llama_model_free(self.model)
            raise CfsmError(
                "unsupported_model",
                f"{path!r} is a {kind} model: its state cannot be cropped back to a position, "
                "which jump-forward and batching need (use an attention-only model)",
            )

    def _str(self, fill) -> str | None:
        buf = self.ffi.new("char[512]")
        n = fill(buf, 512)
        return self.ffi.string(buf).decode("utf-8", "replace") if n >= 0 else None

    def meta(self, key: str) -> str | None:
        return self._str(
            lambda buf, n: self.lib.llama_model_meta_val_str(self.model, key.encode(), buf, n)
        )

    @property
    def step_threads(self) -> int:
        """The count one-token steps run on now (see PassThreads)."""
        return self.pass_threads.best("step")

    def decode_timed(self, batch, n_tokens: int) -> int:
        """`llama_decode` on the thread count chosen for an `n_tokens` pass, its time recorded
        for the next choice; a one-token pass over a span past EXACT_SPAN on one thread
        whatever the choice (not recorded: it chose nothing). Returns llama.cpp's code."""
        self.placed += n_tokens  # an upper bound: cells below a filled one were filled once
        exact = n_tokens == 1 and self.placed > EXACT_SPAN
        self.exact_passes += exact
        threads = 1 if exact else self.pass_threads.choose(n_tokens)
        if threads != self.threads_now:
            self.lib.llama_set_n_threads(self.ctx, threads, threads)
            self.threads_now = threads
        t0 = time.perf_counter()
        rc = self.on_own_thread.call(self.lib.llama_decode, self.ctx, batch)
        if not exact:
            self.pass_threads.record(n_tokens, threads, time.perf_counter() - t0)
        return rc

    def clear(self) -> None:
        """Empty the KV cache: its span starts from nothing again."""
        self.lib.llama_memory_clear(self.mem, False)
        self.placed = 0

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenization (no BOS, special tokens parsed), for the check that
        it agrees with the tokenizer the grammar backends use."""
        raw = text.encode("utf-8")
        arr = self.ffi.new("llama_token[]", len(raw) + 8)
        n = self.lib.llama_tokenize(self.vocab, raw, len(raw), arr, len(raw) + 8, False, True)
        return [int(arr[i]) for i in range(max(n, 0))]


class LlamaCppRunner(Runner):
    """Runs a GGUF model on the CPU with llama.cpp; logits come back as CPU tensors."""

    name = "llamacpp"
    pads_feeds = False  # one llama_batch of every feed's tokens, nothing padded

    def __init__(self, lm: LlamaModel) -> None:
        self.lm = lm
        self.device = "cpu"
        self.n_ctx = getattr(lm, "n_ctx", N_CTX)
        self._free_ids = list(range(REQUEST_SEQS - 1, -1, -1))
        self._lock = threading.Lock()  # free() may come from a cancelling thread
        self._prefix: list[int] = []  # the tokens the kept prompt's sequence holds
        self._prefix_top = 0  # its cells lie below this one (`placed` when it was kept)
        self._reuse = False
        self._live: dict[int, LlamaSeq] = {}  # sequence id -> the request's cache
        self._grave = 0  # cells held under GRAVE_SEQ (an upper bound)
        self._tickets = itertools.count()
        self.evictions = 0  # times every live request was evicted to make room

    def new_cache(self) -> LlamaSeq:
        return LlamaSeq()

    @contextlib.contextmanager
    def decode_thread(self) -> Iterator[None]:
        """Sampling on one core: see `host_threads` (OpenMP's second thread spun after
        every step's torch ops, on the core the page needed)."""
        with torch_ops_on_one_thread():
            yield

    def _take_id(self, cache: LlamaSeq) -> int:
        if cache.seq_id is None:
            if cache.freed:
                raise RuntimeError("this request's llama.cpp sequence was already freed")
            if not self._free_ids:
                raise CfsmError(
                    "busy", f"llama.cpp is decoding {REQUEST_SEQS} requests already; retry later"
                )
            cache.seq_id = self._free_ids.pop()
            cache.ticket = next(self._tickets)
            self._live[cache.seq_id] = cache
        return cache.seq_id

    def crop(self, cache: LlamaSeq, keep_len: int) -> None:
        if cache.n <= keep_len:
            return
        with self._lock:
            if cache.seq_id is not None and cache.resident and not self._retire(cache, keep_len):
                raise RuntimeError("llama.cpp could not crop the KV cache")
        cache.n = keep_len
        del cache.tokens[keep_len:]

    def free(self, cache: LlamaSeq) -> None:
        with self._lock:
            if cache.seq_id is not None:
                if cache.resident:
                    self._retire(cache, 0)
                self._live.pop(cache.seq_id, None)
                self._free_ids.append(cache.seq_id)
                self._settle()
            cache.seq_id, cache.n, cache.freed = None, 0, True
            cache.tokens = []

    def release(self) -> None:
        with self._lock:
            self._settle()

    def recomputed_tokens(self, cache: LlamaSeq) -> int:
        return cache.recomputed

    def requests_ahead(self, cache: LlamaSeq) -> int:
        return cache.ahead

    def _retire(self, cache: LlamaSeq, p0: int) -> bool:
        """Move the cache's cells from position `p0` on to the retired id (see GRAVE_SEQ)."""
        lib, mem, sid = self.lm.lib, self.lm.mem, cache.seq_id
        lib.llama_memory_seq_cp(mem, sid, GRAVE_SEQ, p0, -1)
        self._grave += max(0, cache.n - p0)
        return bool(lib.llama_memory_seq_rm(mem, sid, p0, -1))

    def _settle(self) -> None:
        """No request is live: retired cells are freed and llama.cpp refills from the lowest
        free cell, so the span is the kept prompt's again and steps keep the faster thread
        count (one single-user run in three stepped on one thread). Past EXACT_SPAN, or
        with no kept prompt, the cache is emptied."""
        if self._live:
            return
        self.lm.lib.llama_memory_seq_rm(self.lm.mem, GRAVE_SEQ, -1, -1)
        self._grave = 0
        if self._prefix and self._prefix_top <= EXACT_SPAN:
            self.lm.placed = min(self.lm.placed, self._prefix_top)
        else:
            self.lm.clear()
            self._prefix = []

    def kv_cells_used(self) -> int:
        """Cells held now: live requests' resident positions, the kept prompt, the retired
        cells (a shared position counts twice); read without the lock (held by a pass)."""
        held = sum(c.n for c in list(self._live.values()) if c.resident)
        return held + len(self._prefix) + self._grave

    def _evict_all(self) -> None:
        """Clear the cache: every live request recomputes its tokens at its next pass."""
        for c in self._live.values():
            c.resident = False
        self.lm.clear()
        self._prefix, self._grave = [], 0
        self.evictions += 1

    @staticmethod
    def _need(f: Feed) -> int:
        return len(f.tokens) + (0 if f.cache.resident else f.cache.n)

    def _plan(self, feeds: list[Feed]) -> list:
        """Which feeds run in this pass: True (run), None (held back: the cache has no room
        for it now) or a CfsmError (it could not fit even alone). The oldest request may
        evict every other to make room, so it always runs; younger ones wait their turn."""
        plan: list = [True] * len(feeds)
        order = sorted(range(len(feeds)), key=lambda i: feeds[i].cache.ticket)
        for i in order:
            c = feeds[i].cache
            if c.n + len(feeds[i].tokens) > self.n_ctx:
                plan[i] = CfsmError(
                    "exceeds_capacity",
                    f"this request needs {c.n + len(feeds[i].tokens)} KV cells and llama.cpp's "
                    f"cache has {self.n_ctx} (set CFSM_LLAMA_N_CTX higher, or ask for fewer "
                    "tokens)",
                )
        runnable = [i for i in order if plan[i] is True]
        if not runnable:
            return plan
        room = self.n_ctx - self.kv_cells_used()
        oldest = min(c.ticket for c in self._live.values())
        head = feeds[runnable[0]]
        if self._need(head) > room and head.cache.ticket == oldest:
            self._evict_all()
            room = self.n_ctx
        for i in runnable:
            k = self._need(feeds[i])
            if k <= room:
                room -= k
            else:
                plan[i] = None
                c = feeds[i].cache
                c.held += 1
                c.ahead = sum(o.ticket < c.ticket for o in self._live.values())
        return plan

    def tune_step_threads(self, prompt_ids: list[int], rounds: int = 3) -> dict[int, float]:
        """Time one-token passes on one thread and on every core (interleaved rounds, the
        median of each), for the step's thread choice to start from (`measure_costs` seeds
        `PassThreads` with them; pinned to the faster when CFSM_ADAPT_THREADS=0).
        CFSM_STEP_THREADS, when set, decides instead. Returns the medians by thread count.
        Leaves no cache behind."""
        pt = self.lm.pass_threads
        if STEP_THREADS_SET or len(pt.counts) == 1:
            return {}
        ids = (list(prompt_ids) * 9)[:8]
        times: dict[int, list[float]] = {n: [] for n in pt.counts}
        try:
            for _ in range(rounds):
                for n in pt.counts:
                    pt.fixed["step"] = n
                    cache = self.new_cache()
                    try:
                        self.forward([Feed(cache, ids)])
                        for t in range(5):
                            times[n].append(self.forward([Feed(cache, [ids[t]])])[1] * 1e3)
                    finally:
                        self.free(cache)
        finally:
            del pt.fixed["step"]
        return {n: round(statistics.median(v), 3) for n, v in times.items()}

    def measure_costs(self, prompt_ids: list[int], ks=(8, 32), rounds: int = 3):
        self.step_ms_by_threads = self.tune_step_threads(prompt_ids)
        costs = super().measure_costs(prompt_ids, ks, rounds)
        # passes compare by the cost model from now on, the step started from the timing
        self.lm.pass_threads.restart(self._expected_ms)
        self.lm.pass_threads.seed("step", self.step_ms_by_threads)
        if not self.lm.pass_threads.explore and self.step_ms_by_threads:
            self.lm.pass_threads.fixed["step"] = self.lm.pass_threads.best("step")
        return costs

    def _expected_ms(self, n_tokens: int) -> float:
        """What a pass of `n_tokens` should take by the current cost model."""
        return self.costs.pass_ms(n_tokens) if self.costs is not None else float(n_tokens)

    def pass_threads(self) -> dict[str, int]:
        return {k: self.lm.pass_threads.best(k) for k in KIND_NAMES}

    @contextlib.contextmanager
    def cost_passes(self) -> Iterator[None]:
        """The cost model's passes on the counts it has always assumed: the step's current
        choice and every core for the rest (other counts are tried by the runs)."""
        pt = self.lm.pass_threads
        pinned = dict(pt.fixed)
        pt.fixed |= {"step": pt.best("step"), "short": self.lm.threads, "long": self.lm.threads}
        try:
            yield
        finally:
            pt.fixed = pinned

    def forward(self, feeds: list[Feed]) -> tuple[list, float]:
        """All feeds' tokens in one batch (split every N_BATCH tokens); logits are asked
        for at each feed's last `keep` positions only. A request's first feed starts from
        the kept prompt's positions where its tokens begin the same way. A feed the cache
        has no room for now comes back as None (held: nothing changed), one that could
        never fit as its CfsmError; an evicted request's pass computes its tokens first."""
        t0 = time.perf_counter()
        if any(len(f.tokens) < f.keep for f in feeds):
            raise ValueError("a feed must hold at least as many tokens as the logits it keeps")
        with self._lock:  # the ids too: free() gives them back from a cancelling thread
            for f in feeds:
                self._take_id(f.cache)
            plan = self._plan(feeds)
            run = [f for f, p in zip(feeds, plan, strict=True) if p is True]
            rows = {id(f): torch.empty(f.keep, self.lm.n_vocab) for f in run}
            items = self._items(run, rows)
            for start in range(0, len(items), N_BATCH):
                self._decode(items[start : start + N_BATCH])
            if self._first_alone(run):
                self._keep_prefix(run[0].cache.seq_id, [int(t) for t in run[0].tokens])
        for f in run:
            c = f.cache
            c.tokens += [int(t) for t in f.tokens]
            c.n += len(f.tokens)
            c.resident = True
        out = [rows[id(f)] if p is True else p for f, p in zip(feeds, plan, strict=True)]
        return out, time.perf_counter() - t0

    def _first_alone(self, run: list[Feed]) -> bool:
        """A first feed alone in its pass, with no other request live, becomes the kept
        prompt (every first feed shares it: `_share_prefix`)."""
        return self._reuse and len(run) == 1 and run[0].cache.n == 0 and len(self._live) == 1

    def _items(self, run: list[Feed], rows: dict) -> list[tuple]:
        """(logits tensor or None, its row, seq, pos, token) for every token of the pass:
        an evicted request's own tokens first (no logits), then its feed, less the kept
        prompt's positions a first feed shares."""
        items: list[tuple] = []
        for f in run:
            c, toks = f.cache, [int(t) for t in f.tokens]
            if not c.resident:
                c.recomputed += c.n
                items += [(None, -1, c.seq_id, p, t) for p, t in enumerate(c.tokens)]
            skip = 0
            if self._reuse and c.n == 0 and c.resident and c.shares:
                skip = c.reused = self._share_prefix(c.seq_id, toks, f.keep)
            for j, tok in enumerate(toks[skip:]):
                row = j - (len(toks) - skip - f.keep)
                out = rows[id(f)] if row >= 0 else None
                items.append((out, row, c.seq_id, c.n + skip + j, tok))
        return items

    def _share_prefix(self, sid: int, toks: list[int], keep: int) -> int:
        """A request's first feed: give it the kept prompt's first positions that `toks`
        starts with (but the `keep` whose logits are wanted), alone or beside others in a
        batch (concurrent users of one template compute it once); returns how many. The
        kept prompt is cut to what it shares; cut cells go to the retired id while another
        request is live (GRAVE_SEQ: a request's new cells follow its shared ones). Alone,
        sharing under a micro-batch while the span's bound lies beyond: the cache empties."""
        n, limit = 0, min(len(self._prefix), len(toks) - keep)
        while n < limit and self._prefix[n] == toks[n]:
            n += 1
        if len(self._live) == 1 and n < N_UBATCH < self.lm.placed - n:
            self.lm.clear()
            self._prefix = []
            return 0
        lib, mem = self.lm.lib, self.lm.mem
        if n < len(self._prefix):
            if len(self._live) > 1:
                lib.llama_memory_seq_cp(mem, PREFIX_SEQ, GRAVE_SEQ, n, -1)
                self._grave += len(self._prefix) - n
            lib.llama_memory_seq_rm(mem, PREFIX_SEQ, n, -1)
        if n:
            lib.llama_memory_seq_cp(mem, PREFIX_SEQ, sid, 0, n)
        self._prefix = self._prefix[:n]
        return n

    def _keep_prefix(self, sid: int, toks: list[int]) -> None:
        lib, mem = self.lm.lib, self.lm.mem
        lib.llama_memory_seq_cp(mem, sid, PREFIX_SEQ, len(self._prefix), len(toks))
        self._prefix, self._prefix_top = toks, self.lm.placed

    def cold(self, cache: LlamaSeq) -> None:
        cache.shares = False

    def enable_prefix_reuse(self) -> bool:
        self._reuse = PREFIX_REUSE
        return self._reuse

    def cached_prefix(self, cache: LlamaSeq) -> int:
        return cache.reused

    def _decode(self, chunk: list[tuple]) -> None:
        lib, b = self.lm.lib, self.lm.batch
        b.n_tokens = len(chunk)
        for i, (out, _, sid, pos, tok) in enumerate(chunk):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0] = sid
            b.logits[i] = 1 if out is not None else 0
        rc = self.lm.decode_timed(b, len(chunk))
        if rc != 0:  # _plan counted the cells: a full cache here is a bug, not a busy server
            raise CfsmError(
                "runtime_error",
                f"llama_decode failed with code {rc}"
                + (f" (no room in the KV cache of {self.n_ctx} cells)" if rc == 1 else ""),
            )
        n = self.lm.n_vocab
        from_numpy, frombuffer, f32 = torch.from_numpy, np.frombuffer, np.float32  # once a pass
        for i, (out, row, _, _, _) in enumerate(chunk):
            if out is not None:
                ptr = lib.llama_get_logits_ith(self.lm.ctx, i)
                buf = self.lm.ffi.buffer(ptr, 4 * n)
                out[row] = from_numpy(frombuffer(buf, dtype=f32))

    def _split_check(self, ids: list[int], n: int, why: str) -> dict[str, float]:
        """An `n`-token pass against `n - 1` tokens and a one-token step: a jump prefills
        in one pass what masked decoding steps through, so both must give the same logits
        (a GGUF of another quant type may take another kernel for long passes)."""
        ids = (ids * (1 + n // max(1, len(ids))))[:n]
        whole, split = self.new_cache(), self.new_cache()
        try:
            (a,), _ = self.forward([Feed(whole, ids)])
            self.free(whole)
            self.forward([Feed(split, ids[:-1])])
            (b,), _ = self.forward([Feed(split, ids[-1:])])
        finally:
            self.free(whole)
            self.free(split)
        return logprob_diffs(a[0], {f"{n}-token pass against {n - 1} + a step": b[0]}, 1e-2, why)

    def self_check(self, prompt_ids: list[int]) -> dict:
        """A cached step, a crop and re-evaluation, a two-request batch and a prompt that
        shares a kept one's first positions, each against a fresh prefill of the same
        tokens."""
        ids = list(prompt_ids)[:16]
        if len(ids) < 4:
            raise ValueError("self_check needs at least 4 prompt tokens")
        caches = [self.new_cache() for _ in range(6)]
        reuse, self._reuse = self._reuse, True
        try:
            fresh, _ = self.forward([Feed(caches[0], ids)])
            self.forward([Feed(caches[1], ids[:-1])])
            (step,), _ = self.forward([Feed(caches[1], ids[-1:])])
            self.crop(caches[1], len(ids) - 3)
            (recrop,), _ = self.forward([Feed(caches[1], ids[-3:], keep=3)])
            self.forward([Feed(caches[2], ids[:-2])])
            both, _ = self.forward([Feed(caches[2], ids[-2:], keep=2), Feed(caches[3], ids)])
            for c in caches[:4]:
                self.free(c)
            other = (ids[-3] + 1) % self.lm.n_vocab
            self.forward([Feed(caches[4], ids[:-3] + [other])])  # kept when it is alone
            self.free(caches[4])
            (shared,), _ = self.forward([Feed(caches[5], ids)])  # alone: shares it
            if caches[5].reused != len(ids) - 3:
                raise RuntimeError(f"shared {caches[5].reused} positions, not {len(ids) - 3}")
        finally:
            self._reuse = reuse
            for c in caches:
                self.free(c)
            self._evict_all()  # nothing is live: drops the kept prompt, counts no eviction
            self.evictions = 0
        rows = {
            "cached step": step[0],
            "crop and re-evaluate": recrop[-1],
            "batched": both[0][-1],
            "batched fresh": both[1][0],
            "shared prompt prefix": shared[0],
        }
        why = ": this model cannot be decoded with a reused KV cache on llama.cpp"
        diffs = logprob_diffs(fresh[0][0], rows, 1e-2, why)
        for n in (40, 64):  # past one micro-batch, and where the CPU products switch kernels
            diffs.update(self._split_check(list(prompt_ids), n, why))
        return {
            "runtime": "llamacpp",
            "bindings": bindings_version(),
            "threads": self.lm.threads,
            "step_threads": self.lm.step_threads,
            "max_logprob_diff": diffs,
        }
