"""Forward passes over per-request KV caches, whatever transformers version is installed.

transformers renamed the KV-cache argument of `forward` (`past_key_values` up to 5.2x,
`cache` from 5.24) and swallows an unknown name into `**kwargs`: the cache is then never
filled and decoding silently produces garbage. The runner reads the name from the loaded
model's signature once, and `self_check` proves at load that a cached step gives the same
logits as a fresh prefill, so a mismatch becomes an `unsupported_model` error, not bad text.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Any

from .errors import CfsmError

CACHE_ARG_NAMES = ("cache", "past_key_values")


def transformers_version() -> str:
    try:
        import transformers

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
        f"{type(model).__name__}.forward takes no KV cache argument ({' or '.join(CACHE_ARG_NAMES)}) "
        f"with transformers {transformers_version()}",
    )


@dataclass
class Feed:
    """Tokens one request puts through the next forward pass, on top of its own cache;
    `keep` trailing positions' logits come back (more than one after a jump with
    candidates to re-decide)."""

    cache: Any
    tokens: list[int]
    keep: int = 1


class ModelRunner:
    """Runs one model; every forward pass of the engine goes through `forward`."""

    def __init__(self, model: Any, device: str, pad_id: int = 0) -> None:
        self.model = model
        self.device = device
        self.pad_id = pad_id
        self.cache_arg = cache_arg_name(model)

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @staticmethod
    def crop(cache, keep_len: int) -> None:
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
        import torch

        t0 = time.perf_counter()
        # grad mode is per thread: a scheduler thread would otherwise record autograd graphs
        with torch.inference_mode():
            if len(feeds) == 1:
                f = feeds[0]
                x = torch.tensor([f.tokens], dtype=torch.long, device=self.device)
                out = self._call(input_ids=x, kv=f.cache, logits_to_keep=f.keep)
                rows = [out.logits[0]]
            else:
                rows = self._forward_stacked(feeds)
        return rows, time.perf_counter() - t0

    def _forward_stacked(self, feeds: list[Feed]) -> list:
        """Caches stacked left-padded, new tokens right-padded (a padded query still sees
        real keys, so no row is fully masked); each feed's new keys/values are appended
        back to its own cache and its logits taken at its last real tokens."""
        import torch

        lens = [f.cache.get_seq_length() for f in feeds]
        news = [len(f.tokens) for f in feeds]
        L, M, B = max(lens), max(news), len(feeds)
        batched = self.new_cache()
        if L > 0:
            template = next(f.cache for f, n in zip(feeds, lens, strict=True) if n > 0)
            for li, layer in enumerate(template.layers):
                ks, vs = [], []
                for f, n in zip(feeds, lens, strict=True):
                    if n > 0:
                        k, v = f.cache.layers[li].keys, f.cache.layers[li].values
                    else:
                        k = layer.keys.new_zeros(1, layer.keys.shape[1], 0, layer.keys.shape[3])
                        v = layer.values.new_zeros(1, layer.values.shape[1], 0, layer.values.shape[3])
                    if n < L:
                        pad = k.new_zeros(k.shape[0], k.shape[1], L - n, k.shape[3])
                        k, v = torch.cat([pad, k], dim=-2), torch.cat([pad, v], dim=-2)
                    ks.append(k)
                    vs.append(v)
                batched.update(torch.cat(ks), torch.cat(vs), li)
        attn = torch.zeros(B, L + M, dtype=torch.long)
        ids = torch.full((B, M), self.pad_id, dtype=torch.long)
        pos = torch.zeros(B, M, dtype=torch.long)
        for i, (f, n, m) in enumerate(zip(feeds, lens, news, strict=True)):
            attn[i, L - n : L + m] = 1
            ids[i, :m] = torch.tensor(f.tokens)
            pos[i] = torch.arange(n, n + M)
        dev = self.device  # built on the host, moved in one go
        out = self._call(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev), kv=batched,
                         logits_to_keep=M)
        rows = []
        for i, (f, m) in enumerate(zip(feeds, news, strict=True)):
            for li, layer in enumerate(batched.layers):
                f.cache.update(layer.keys[i : i + 1, :, L : L + m, :], layer.values[i : i + 1, :, L : L + m, :], li)
            rows.append(out.logits[i, m - f.keep : m])
        return rows

    def self_check(self, prompt_ids: list[int]) -> dict:
        """Prefill, then one cached step, against a fresh prefill of the same tokens (and
        the same through a stacked batch of two). Raises `unsupported_model` when the
        cache is not filled or the logits differ: the model cannot be decoded correctly."""
        import torch

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
            raise CfsmError("unsupported_model", f"the model did not fill its KV cache ({filled} of {len(ids) - 1} "
                            f"positions) through `{self.cache_arg}=` with transformers {ver}")
        (step,), _ = self.forward([Feed(cache, ids[-1:])])
        (fresh,), _ = self.forward([Feed(self.new_cache(), ids)])
        other = self.new_cache()
        self.forward([Feed(other, ids[:-2])])
        stacked, _ = self.forward([Feed(other, ids[-2:]), Feed(self.new_cache(), ids)])
        diffs = {}
        for name, got in (("cached step", step[-1]), ("stacked batch", stacked[0][-1]), ("stacked fresh", stacked[1][-1])):
            a = torch.log_softmax(got.float(), -1)
            b = torch.log_softmax(fresh[-1].float(), -1)
            top = torch.topk(b, 20).indices
            diffs[name] = float((a[top] - b[top]).abs().max())
            if diffs[name] > tol:
                raise CfsmError("unsupported_model", f"{name} logits differ from a fresh prefill by {diffs[name]:.3g} "
                                f"(limit {tol}) with transformers {ver}: this model/transformers pair cannot be "
                                "decoded with a reused KV cache")
        return {"cache_arg": self.cache_arg, "transformers": ver, "max_logprob_diff": diffs}
