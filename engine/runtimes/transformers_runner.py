"""Forward passes over per-request KV caches, whatever transformers version is installed.

transformers renamed the KV-cache argument of `forward` (`past_key_values` up to 5.2x,
`cache` from 5.24) and swallows an unknown name into `**kwargs`: the cache is then never
filled and decoding silently produces garbage. The runner reads the name from the loaded
model's signature once, and `self_check` proves at load that a cached step gives the same
logits as a fresh prefill, so a mismatch becomes an `unsupported_model` error, not bad text.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from typing import Any

from ..errors import CfsmError
from ..lazy import lazy_module
from .base import Feed, Runner, logprob_diffs
from .host_threads import cpu_pass_thread, torch_ops_on_one_thread

torch = lazy_module("torch")
transformers = lazy_module("transformers")
cache_utils = lazy_module("transformers.cache_utils")

CACHE_ARG_NAMES = ("cache", "past_key_values")


def transformers_version() -> str:
    try:
        return transformers.__version__
    except Exception:  # noqa: BLE001
        return "unknown"


def cache_arg_name(model: Any) -> str:
    """The keyword under which this model's `forward` takes its KV cache."""
    params = inspect.signature(model.forward).parameters
    for name in CACHE_ARG_NAMES:
        if name in params:
            return name
    raise CfsmError(
        "unsupported_model",
        f"{type(model).__name__}.forward takes no KV cache argument "
        f"({' or '.join(CACHE_ARG_NAMES)}) "
        f"with transformers {transformers_version()}",
    )


class _Stacked:
    """The stacked cache of the last batched pass, and how to tell it is still current:
    the same caches in the same rows, each still holding exactly the views it was given."""

    def __init__(self, feeds: list[Feed], batched, lens: list[int]) -> None:
        self.caches = [f.cache for f in feeds]
        self.views = [f.cache.layers[0].keys for f in feeds]
        self.batched = batched
        self.lens = lens

    def fits(self, feeds: list[Feed]) -> bool:
        return (
            len(feeds) == len(self.caches)
            and all(len(f.tokens) == 1 for f in feeds)
            and all(
                f.cache is c and f.cache.layers[0].keys is v
                for f, c, v in zip(feeds, self.caches, self.views, strict=True)
            )
        )


class ModelRunner(Runner):
    """Runs one PyTorch model (CPU or CUDA); every forward pass of the engine goes through
    `forward`."""

    name = "transformers"

    def __init__(self, model: Any, device: str, pad_id: int = 0) -> None:
        self.model = model
        self.device = device
        self.pad_id = pad_id
        self.cache_arg = cache_arg_name(model)
        self._memo: _Stacked | None = None
        self.stacks_built = 0  # stacked caches assembled (a reused one is not counted)
        # stacking assumes plain layers (keys hold every position); other layer kinds
        # (linear attention, convolution states) get one pass per request instead
        self.can_stack = all(
            type(layer).__name__ == "DynamicLayer" for layer in self.new_cache().layers
        )
        # on a CPU every pass runs on the process's pass thread: one OpenMP team, whichever
        # threads ask (the batcher, a benchmark's loop, a cost re-measure); see OwnThread
        self._own = cpu_pass_thread() if str(device).startswith("cpu") else None

    def new_cache(self):
        """A cache as the model's config asks for, with sliding-window layers kept whole:
        a sliding layer drops positions past the window and cannot be cropped once full
        (jump-forward crops), while the model masks its window itself, so a full layer
        gives the same logits (tested past the window), crops and stacks."""
        cache = transformers.DynamicCache(config=self.model.config)
        for i, layer in enumerate(cache.layers):
            if type(layer) is cache_utils.DynamicSlidingWindowLayer:
                cache.layers[i] = cache_utils.DynamicLayer()
        return cache

    def crop(self, cache, keep_len: int) -> None:
        """Keep only the first `keep_len` positions of `cache` (transformers 5.x takes
        the number of positions to drop, negated)."""
        before = cache.get_seq_length()
        if before <= keep_len:
            return
        cache.crop(keep_len - before)
        if cache.get_seq_length() != keep_len:
            raise RuntimeError("KV cache crop did not keep the expected number of positions")

    def _call(self, **kw):
        cache = kw.pop("kv")
        kw[self.cache_arg] = cache
        return self.model(use_cache=True, **kw)

    def forward(self, feeds: list[Feed]) -> tuple[list, float]:
        """One forward pass for all `feeds` (each on its own cache, which it extends).
        Returns each feed's last `keep` logits rows (on the device) and the pass time."""
        t0 = time.perf_counter()
        rows = self._own.call(self._pass, feeds) if self._own else self._pass(feeds)
        return rows, time.perf_counter() - t0

    @contextlib.contextmanager
    def decode_thread(self) -> Iterator[None]:
        """On a CPU the loop's own torch ops (sampling, masks) run on its thread alone, so
        that the passes' thread keeps the only OpenMP team (see OwnThread). A loop that
        runs on the pass thread itself (a caller that hands it a whole decode) keeps every
        core: its passes run inside it, and on one thread they took 49 s against 36."""
        if self._own is None or self._own.is_current():
            yield
            return
        with torch_ops_on_one_thread():
            yield

    def _pass(self, feeds: list[Feed]) -> list:
        # grad mode is per thread: a scheduler thread would otherwise record autograd graphs
        with torch.inference_mode():
            if len(feeds) == 1 or not self.can_stack:
                self._memo = None  # these caches change outside the stacked layout
                rows = [self._forward_one(f) for f in feeds]
            else:
                try:
                    rows = self._forward_stacked(feeds)
                except BaseException:
                    self._memo = (
                        None  # a pass that failed half-way leaves the stacked cache unusable
                    )
                    raise
        return rows

    def _forward_one(self, f: Feed):
        x = torch.tensor([f.tokens], dtype=torch.long, device=self.device)
        out = self._call(input_ids=x, kv=f.cache, logits_to_keep=f.keep)
        return out.logits[0, -f.keep :]  # the last rows, even if a model ignores logits_to_keep

    def release(self) -> None:
        """Forget the last stacked cache (the decode loop calls this when it goes idle)."""
        self._memo = None

    def _forward_stacked(self, feeds: list[Feed]) -> list:
        """Caches stacked left-padded, new tokens right-padded (a padded query still sees
        real keys, so no row is fully masked); logits taken at each feed's last real tokens.
        Afterwards each request's cache holds views into the stacked cache (no copy back),
        and when the next pass feeds one token to the very same requests whose caches are
        untouched since, the stacked cache is reused as it is (`_Stacked`)."""
        news = [len(f.tokens) for f in feeds]
        if any(m < f.keep for f, m in zip(feeds, news, strict=True)):
            raise ValueError("a feed must hold at least as many tokens as the logits it keeps")
        memo = self._memo
        if memo is not None and memo.fits(feeds):
            batched, lens = memo.batched, memo.lens
        else:
            self._memo = None
            lens = [f.cache.get_seq_length() for f in feeds]
            batched = self._stack(feeds, lens)
            self.stacks_built += 1
        L, M, B = max(lens), max(news), len(feeds)
        attn = torch.zeros(B, L + M, dtype=torch.long)
        ids = torch.full((B, M), self.pad_id, dtype=torch.long)
        pos = torch.zeros(B, M, dtype=torch.long)
        for i, (f, n, m) in enumerate(zip(feeds, lens, news, strict=True)):
            attn[i, L - n : L + m] = 1
            ids[i, :m] = torch.tensor(f.tokens)
            pos[i] = torch.arange(n, n + M)
        # logits only at the positions some row needs (a prefill of 40 tokens needs one)
        need = sorted({p for f, m in zip(feeds, news, strict=True) for p in range(m - f.keep, m)})
        at = {p: j for j, p in enumerate(need)}
        dev = self.device  # built on the host, moved in one go
        out = self._call(
            input_ids=ids.to(dev),
            attention_mask=attn.to(dev),
            position_ids=pos.to(dev),
            kv=batched,
            logits_to_keep=torch.tensor(need, device=dev),
        )
        if out.logits.shape[1] == M:  # a model that ignores logits_to_keep returns every position
            at = {p: p for p in need}
        elif out.logits.shape[1] != len(need):
            raise CfsmError(
                "unsupported_model",
                f"the model returned logits for {out.logits.shape[1]} positions, "
                f"expected {len(need)}",
            )
        rows = []
        for i, (f, n, m) in enumerate(zip(feeds, lens, news, strict=True)):
            for li, layer in enumerate(batched.layers):
                own = f.cache.layers[li]
                k, v = (
                    layer.keys[i : i + 1, :, L - n : L + m, :],
                    layer.values[i : i + 1, :, L - n : L + m, :],
                )
                if not own.is_initialized:
                    own.update(k[:, :, :0], v[:, :, :0])  # typed, empty: then it takes the views
                own.keys, own.values = k, v
            rows.append(out.logits[i, [at[p] for p in range(m - f.keep, m)]])
        if all(m == M for m in news):  # every row ends at L + M: the layout stays reusable
            self._memo = _Stacked(feeds, batched, [n + M for n in lens])
        return rows

    def _stack(self, feeds: list[Feed], lens: list[int]):
        """A new cache holding every feed's cache as one row, left-padded to the longest."""

        batched = self.new_cache()
        L, B = max(lens), len(feeds)
        if L == 0:
            return batched
        template = next(f.cache for f, n in zip(feeds, lens, strict=True) if n > 0)
        for li, layer in enumerate(template.layers):
            k0, v0 = layer.keys, layer.values
            K = k0.new_zeros(B, k0.shape[1], L, k0.shape[3])
            V = v0.new_zeros(B, v0.shape[1], L, v0.shape[3])
            for i, (f, n) in enumerate(zip(feeds, lens, strict=True)):
                if n > 0:
                    K[i, :, L - n :] = f.cache.layers[li].keys[0]
                    V[i, :, L - n :] = f.cache.layers[li].values[0]
            batched.update(K, V, li)
        return batched

    def self_check(self, prompt_ids: list[int]) -> dict:
        """Prefill, then one cached step, against a fresh prefill of the same tokens (and
        the same through a stacked batch of two). Raises `unsupported_model` when the
        cache is not filled or the logits differ: the model cannot be decoded correctly."""
        ids = list(prompt_ids)[:16]
        if len(ids) < 3:
            raise ValueError("self_check needs at least 3 prompt tokens")
        half = self.model.dtype in (torch.float16, torch.bfloat16)
        tol = 0.25 if half else 1e-2
        ver = transformers_version()
        cache = self.new_cache()
        self.forward([Feed(cache, ids[:-1])])
        filled = cache.get_seq_length()
        if filled != len(ids) - 1:
            raise CfsmError(
                "unsupported_model",
                f"the model did not fill its KV cache ({filled} of {len(ids) - 1} "
                f"positions) through `{self.cache_arg}=` with transformers {ver}",
            )
        (step,), _ = self.forward([Feed(cache, ids[-1:])])
        (fresh,), _ = self.forward([Feed(self.new_cache(), ids)])
        other = self.new_cache()
        self.forward([Feed(other, ids[:-2])])
        stacked, _ = self.forward([Feed(other, ids[-2:], keep=2), Feed(self.new_cache(), ids)])
        if step.shape[0] != 1 or stacked[0].shape[0] != 2:
            raise CfsmError(
                "unsupported_model",
                f"the model returned logits for the wrong positions with transformers {ver}",
            )
        # rows read the way Sequence.receive reads them: the last `keep` positions, in order
        rows = {
            "cached step": step[0],
            "stacked batch": stacked[0][1],
            "stacked fresh": stacked[1][0],
        }
        diffs = logprob_diffs(
            fresh[0],
            rows,
            tol,
            f" with transformers {ver}: this model/transformers pair cannot be decoded with a "
            "reused KV cache",
        )
        return {"cache_arg": self.cache_arg, "transformers": ver, "max_logprob_diff": diffs}
