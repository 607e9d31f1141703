"""Batched decoding (the SGLang design): requests decode together, one token each per
batched forward pass, each with its own grammar state. A request whose forced text is long
enough leaves the batch, prefills its new tokens on its own cached prefix in one pass, and
rejoins the next batched step with the logits of that prefill.

Each request keeps its own KV cache; a batched step stacks them left-padded (transformers'
DynamicCache copies the whole cache on every append anyway) and splits the new position
back. Requests that jump in the same step prefill together in one pass (each on its own
prefix), so jumps do not serialize. Boundary back-off is off here (healing_tokens=0, as in
SGLang)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .backends import CompiledConstraint
from .decode import Decoder, _crop, _lcp


@dataclass
class _Req:
    prompt_ids: list[int]
    matcher: object
    cache: object
    out_ids: list[int] = field(default_factory=list)
    logits: object = None
    done: bool = False
    finished: bool = False
    reason: str = ""
    t_done: float = 0.0
    own_passes: int = 0


def _only_eos(m, eos: int) -> bool:
    ids = m.allowed_ids()
    return len(ids) == 1 and int(ids[0]) == eos


def run_batch(dec: Decoder, prompts: list[str], compiled: CompiledConstraint, mode: str = "jump",
              max_new_tokens: int = 256, jump_threshold: int = 1) -> dict:
    """Decode all prompts together (greedy). Returns texts, per-request latency and totals."""
    import torch
    from transformers import DynamicCache

    lm = dec.lm
    cfg = lm.model.config
    eos = dec.ctx.eos_token_id
    dev = lm.device
    t0 = time.perf_counter()
    batched_passes = 0
    jump_passes = 0
    reqs: list[_Req] = []

    def prefill(r: _Req, ids: list[int]) -> None:
        out = lm.model(input_ids=torch.tensor([ids], device=dev), cache=r.cache, use_cache=True, logits_to_keep=1)
        r.logits = out.logits[0, -1]
        r.own_passes += 1

    def try_jump(r: _Req) -> list[int] | None:
        """Apply a jump; returns the tokens to prefill on the request's own prefix ([] when
        the match is complete), or None when there is no jump."""
        js = r.matcher.jump_forward()
        if mode != "jump" or len(js) <= jump_threshold:
            return None
        res = dec._jump(r.matcher, r.out_ids, js, healing=0)
        if res is None:
            return None
        new_ids, _cands, _info = res
        if _only_eos(r.matcher, eos):
            r.out_ids = new_ids
            return []
        in_cache = r.cache.get_seq_length() - len(r.prompt_ids)
        reuse = min(_lcp(r.out_ids, new_ids), in_cache)
        drop = r.cache.get_seq_length() - (len(r.prompt_ids) + reuse)
        if drop > 0:
            _crop(r.cache, drop)
        r.out_ids = new_ids
        return new_ids[reuse:]

    def forward_group(group: list[tuple[_Req, list[int]]]) -> None:
        """One forward for several requests, each on its own cache: caches stacked
        left-padded, new tokens right-padded (a padded query still sees real keys, so no
        fully masked row), logits taken at each request's last real token."""
        lens = [r.cache.get_seq_length() for r, _ in group]
        news = [len(t) for _, t in group]
        L, M, B = max(lens), max(news), len(group)
        n_layers = len(group[0][0].cache.layers)
        batched = DynamicCache(config=cfg)
        for li in range(n_layers):
            ks, vs = [], []
            for (r, _), n in zip(group, lens, strict=True):
                k, v = r.cache.layers[li].keys, r.cache.layers[li].values
                if n < L:
                    pad = k.new_zeros(k.shape[0], k.shape[1], L - n, k.shape[3])
                    k, v = torch.cat([pad, k], dim=-2), torch.cat([pad, v], dim=-2)
                ks.append(k)
                vs.append(v)
            batched.update(torch.cat(ks), torch.cat(vs), li)
        attn = torch.zeros(B, L + M, dtype=torch.long, device=dev)
        ids = torch.full((B, M), eos, dtype=torch.long, device=dev)
        pos = torch.zeros(B, M, dtype=torch.long, device=dev)
        for i, ((_r, toks), n, m) in enumerate(zip(group, lens, news, strict=True)):
            attn[i, L - n : L] = 1
            attn[i, L : L + m] = 1
            ids[i, :m] = torch.tensor(toks, device=dev)
            pos[i] = torch.arange(n, n + M, device=dev)
        out = lm.model(input_ids=ids, attention_mask=attn, position_ids=pos, cache=batched, use_cache=True,
                       logits_to_keep=M)
        layers = out.cache.layers if getattr(out, "cache", None) is not None else batched.layers
        for i, ((r, _toks), m) in enumerate(zip(group, news, strict=True)):
            for li in range(n_layers):
                r.cache.update(layers[li].keys[i : i + 1, :, L : L + m, :], layers[li].values[i : i + 1, :, L : L + m, :], li)
            r.logits = out.logits[i, m - 1]

    for p in prompts:
        r = _Req(dec.prompt_ids(p, raw=False), compiled.matcher(), DynamicCache(config=cfg))
        if mode == "jump":
            js = r.matcher.jump_forward()
            if len(js) > jump_threshold:
                res = dec._jump(r.matcher, [], js, healing=0)
                if res is not None:
                    r.out_ids = res[0]
        prefill(r, r.prompt_ids + r.out_ids)
        reqs.append(r)

    while True:
        active = [r for r in reqs if not r.done]
        if not active:
            break
        # choose one token per request from its logits, masked on the device, one transfer
        logits = torch.stack([r.logits for r in active]).float()
        masks = torch.stack([r.matcher.mask(dev) for r in active])
        chosen = torch.argmax(logits.masked_fill(~masks, float("-inf")), dim=-1).tolist()
        feed: list[tuple[_Req, list[int]]] = []  # one token each: the batched decode step
        jumpers: list[tuple[_Req, list[int]]] = []  # left the batch: prefill on their own prefix
        for r, tid in zip(active, chosen, strict=True):
            if len(r.matcher.allowed_ids()) == 0:
                r.done, r.reason, r.t_done = True, "dead_end", time.perf_counter()
                continue
            if tid == eos and r.matcher.is_final():
                r.done, r.finished, r.reason, r.t_done = True, True, "eos", time.perf_counter()
                continue
            r.matcher.accept_token(tid)
            r.out_ids.append(tid)
            new = try_jump(r)
            if _only_eos(r.matcher, eos):
                r.done, r.finished, r.reason, r.t_done = True, True, "complete", time.perf_counter()
            elif len(r.out_ids) >= max_new_tokens:
                r.done, r.reason, r.t_done = True, "max_new_tokens", time.perf_counter()
            elif new is not None:
                jumpers.append((r, new))
            else:
                feed.append((r, [tid]))
        # the jumpers prefill together (their own prefixes, stacked), then they rejoin
        for group in (jumpers, feed):
            if group:
                forward_group(group)
                if group is feed:
                    batched_passes += 1
                else:
                    jump_passes += 1
    wall = time.perf_counter() - t0
    for r in reqs:
        if len(r.out_ids) > max_new_tokens:  # a jump can carry a request past the limit
            del r.out_ids[max_new_tokens:]
            r.finished, r.reason = False, "max_new_tokens"
    lat = [r.t_done - t0 for r in reqs]
    texts = [dec._bytes(r.out_ids).decode("utf-8", errors="replace") for r in reqs]
    out_tokens = sum(len(r.out_ids) for r in reqs)
    return {
        "mode": mode,
        "batch_size": len(prompts),
        "texts": texts,
        "finished": [r.finished for r in reqs],
        "latency_s": [round(x, 3) for x in lat],
        "wall_s": round(wall, 3),
        "output_tokens": out_tokens,
        "tokens_per_s": round(out_tokens / wall, 2),
        "batched_passes": batched_passes,
        "jump_prefill_passes": jump_passes,
        "own_passes": sum(r.own_passes for r in reqs),
    }
