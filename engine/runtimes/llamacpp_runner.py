"""The llama.cpp runtime: a GGUF model decoded by llama.cpp's C API (through the CFFI
bindings of `llama-cpp-py-sync`), behind the same `Runner` contract as the PyTorch path.

One llama.cpp context serves every request: each request's cache is a sequence id in a
unified KV cache, a batched pass is one `llama_decode` with one sequence id per token,
crops are `llama_memory_seq_rm`, and logits are read only at the positions a feed keeps.
Flash attention is on: without it a k-token pass and k one-token steps differ by up to
0.6 in logits, and jump-forward (which prefills what masked decoding steps through) would
change outputs for numerical reasons only.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from ..errors import CfsmError
from .base import Feed, Runner, logprob_diffs

N_CTX = int(os.environ.get("CFSM_LLAMA_N_CTX", "8192"))  # KV cells shared by all requests
N_SEQ_MAX = int(os.environ.get("CFSM_LLAMA_N_SEQ", "64"))  # requests decoding at once
N_BATCH = 2048  # tokens per llama_decode call (longer feeds are split)
# llama.cpp computes a call in micro-batches of at most this many tokens. From 64 tokens on,
# its CPU matrix products take another path whose logits differ by up to 0.58 from the
# one-token path (measured on the embedded model: a 64-token prefill against 63 + 1); with
# micro-batches of 32 every pass gives the same logits however the tokens are split (a
# prompt, a jump's prefill, one-token steps, a batch of requests), and long prefills were
# no slower here (200 tokens: 0.98 s against 1.11 s).
N_UBATCH = 32


_LOG: list[str] = []  # llama.cpp's last log lines, for error messages
_HOOKS: dict = {}  # the log callback, kept alive for as long as the library


def bindings_version() -> str:
    try:
        import llama_cpp_py_sync as m

        return f"{m.__version__} (llama.cpp {m.__llama_cpp_tag__})"
    except Exception:  # noqa: BLE001
        return "unavailable"


def available() -> bool:
    """Whether the bindings load (a wheel built for a newer glibc fails here until
    scripts/llama_glibc_compat.py has run)."""
    try:
        _lib()
    except CfsmError:
        return False
    return True


def _lib():
    """(lib, ffi), with llama.cpp's log kept out of stderr (the last lines are kept)."""
    if "lib" in _HOOKS:
        return _HOOKS["lib"], _HOOKS["ffi"]
    try:
        from llama_cpp_py_sync._cffi_bindings import get_ffi, get_lib

        lib, ffi = get_lib(), get_ffi()
    except Exception as exc:  # noqa: BLE001
        raise CfsmError(
            "unsupported_model",
            f"the llama.cpp runtime is not available ({str(exc).splitlines()[0][:200]}); "
            "run `make setup`, or use --runtime transformers",
        ) from exc

    @ffi.callback("void(enum ggml_log_level, const char *, void *)")
    def _log(level, text, _data):  # pragma: no cover - called from C
        _LOG.append(ffi.string(text).decode("utf-8", "replace"))
        del _LOG[:-20]

    lib.llama_log_set(_log, ffi.NULL)
    lib.llama_backend_init()
    _HOOKS.update(lib=lib, ffi=ffi, log=_log)
    return lib, ffi


@dataclass
class LlamaSeq:
    """One request's cache: a sequence id, taken at its first pass, and its length."""

    n: int = 0
    seq_id: int | None = None
    freed: bool = field(default=False, repr=False)

    def get_seq_length(self) -> int:
        return self.n


class LlamaModel:
    """A GGUF file loaded once: the model, its context and a reusable batch."""

    def __init__(self, path: str, n_threads: int | None = None) -> None:
        lib, ffi = self.lib, self.ffi = _lib()
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(path.encode(), mp)
        if self.model == ffi.NULL:
            raise CfsmError(
                "unknown_model", f"llama.cpp could not load {path!r}: {' '.join(_LOG[-2:])}"
            )
        cp = lib.llama_context_default_params()
        threads = n_threads or int(os.environ.get("CFSM_THREADS", "0")) or os.cpu_count() or 2
        cp.n_ctx, cp.n_batch, cp.n_ubatch = N_CTX, N_BATCH, N_UBATCH
        cp.n_seq_max, cp.kv_unified = N_SEQ_MAX, True
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = 1
        cp.embeddings, cp.no_perf = False, True
        self.ctx = lib.llama_init_from_model(self.model, cp)
        if self.ctx == ffi.NULL:
            lib.llama_model_free(self.model)
            raise CfsmError("unknown_model", f"llama.cpp could not create a context for {path!r}")
        self.threads = threads
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.mem = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(N_BATCH, 0, 1)
        self.desc = self._str(lambda buf, n: lib.llama_model_desc(self.model, buf, n))

    def _str(self, fill) -> str | None:
        buf = self.ffi.new("char[512]")
        n = fill(buf, 512)
        return self.ffi.string(buf).decode("utf-8", "replace") if n >= 0 else None

    def meta(self, key: str) -> str | None:
        return self._str(
            lambda buf, n: self.lib.llama_model_meta_val_str(self.model, key.encode(), buf, n)
        )

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

    def __init__(self, lm: LlamaModel) -> None:
        self.lm = lm
        self.device = "cpu"
        self._free_ids = list(range(N_SEQ_MAX - 1, -1, -1))
        self._lock = threading.Lock()  # free() may come from a cancelling thread

    def new_cache(self) -> LlamaSeq:
        return LlamaSeq()

    def _take_id(self, cache: LlamaSeq) -> int:
        if cache.seq_id is None:
            if cache.freed:
                raise RuntimeError("this request's llama.cpp sequence was already freed")
            if not self._free_ids:
                raise CfsmError(
                    "busy", f"llama.cpp is decoding {N_SEQ_MAX} requests already; retry later"
                )
            cache.seq_id = self._free_ids.pop()
        return cache.seq_id

    def crop(self, cache: LlamaSeq, keep_len: int) -> None:
        if cache.n <= keep_len:
            return
        with self._lock:
            if cache.seq_id is not None and not self.lm.lib.llama_memory_seq_rm(
                self.lm.mem, cache.seq_id, keep_len, -1
            ):
                raise RuntimeError("llama.cpp could not crop the KV cache")
        cache.n = keep_len

    def free(self, cache: LlamaSeq) -> None:
        with self._lock:
            if cache.seq_id is not None:
                self.lm.lib.llama_memory_seq_rm(self.lm.mem, cache.seq_id, -1, -1)
                self._free_ids.append(cache.seq_id)
            cache.seq_id, cache.n, cache.freed = None, 0, True

    def forward(self, feeds: list[Feed]) -> tuple[list, float]:
        """All feeds' tokens in one batch (split every N_BATCH tokens); logits are asked
        for at each feed's last `keep` positions only."""
        import torch

        t0 = time.perf_counter()
        if any(len(f.tokens) < f.keep for f in feeds):
            raise ValueError("a feed must hold at least as many tokens as the logits it keeps")
        rows = [torch.empty(f.keep, self.lm.n_vocab) for f in feeds]
        with self._lock:  # the ids too: free() gives them back from a cancelling thread
            items = []  # (feed index, row within its kept rows or -1, seq, pos, token)
            for fi, f in enumerate(feeds):
                sid, m = self._take_id(f.cache), len(f.tokens)
                for j, tok in enumerate(f.tokens):
                    items.append((fi, j - (m - f.keep), sid, f.cache.n + j, int(tok)))
            for start in range(0, len(items), N_BATCH):
                self._decode(items[start : start + N_BATCH], rows)
        for f in feeds:
            f.cache.n += len(f.tokens)
        return rows, time.perf_counter() - t0

    def _decode(self, chunk: list[tuple], rows: list) -> None:
        import numpy as np
        import torch

        lib, b = self.lm.lib, self.lm.batch
        b.n_tokens = len(chunk)
        for i, (_, row, sid, pos, tok) in enumerate(chunk):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0] = sid
            b.logits[i] = 1 if row >= 0 else 0
        rc = lib.llama_decode(self.lm.ctx, b)
        if rc != 0:
            raise CfsmError(
                "busy" if rc == 1 else "runtime_error",
                "llama.cpp's KV cache is full (the running requests hold "
                f"{N_CTX} positions; retry, or set CFSM_LLAMA_N_CTX)"
                if rc == 1
                else f"llama_decode failed with code {rc}",
            )
        n = self.lm.n_vocab
        for i, (fi, row, _, _, _) in enumerate(chunk):
            if row >= 0:
                ptr = lib.llama_get_logits_ith(self.lm.ctx, i)
                buf = self.lm.ffi.buffer(ptr, 4 * n)
                rows[fi][row] = torch.from_numpy(np.frombuffer(buf, dtype=np.float32))

    def self_check(self, prompt_ids: list[int]) -> dict:
        """A cached step, a crop and re-evaluation, and a two-request batch, each against a
        fresh prefill of the same tokens."""
        ids = list(prompt_ids)[:16]
        if len(ids) < 4:
            raise ValueError("self_check needs at least 4 prompt tokens")
        caches = [self.new_cache() for _ in range(4)]
        try:
            fresh, _ = self.forward([Feed(caches[0], ids)])
            self.forward([Feed(caches[1], ids[:-1])])
            (step,), _ = self.forward([Feed(caches[1], ids[-1:])])
            self.crop(caches[1], len(ids) - 3)
            (recrop,), _ = self.forward([Feed(caches[1], ids[-3:], keep=3)])
            self.forward([Feed(caches[2], ids[:-2])])
            both, _ = self.forward([Feed(caches[2], ids[-2:], keep=2), Feed(caches[3], ids)])
        finally:
            for c in caches:
                self.free(c)
        rows = {
            "cached step": step[0],
            "crop and re-evaluate": recrop[-1],
            "batched": both[0][-1],
            "batched fresh": both[1][0],
        }
        diffs = logprob_diffs(
            fresh[0][0],
            rows,
            1e-2,
            ": this model cannot be decoded with a reused KV cache on llama.cpp",
        )
        return {
            "runtime": "llamacpp",
            "bindings": bindings_version(),
            "threads": self.lm.threads,
            "max_logprob_diff": diffs,
        }
