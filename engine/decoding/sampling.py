"""Sampling on the device: mask, pick, and the numbers the trace keeps, packed into one
flat tensor per request so a whole batch comes back in one host transfer. `SamplePack`
names the layout on the host side."""

from __future__ import annotations

from dataclasses import dataclass

from ..lazy import lazy_module
from .request import GenerateRequest

torch = lazy_module("torch")

ALLOWED_SAMPLE = 48  # allowed tokens the trace lists per step, most likely first


def select_pack(logits, mask, req: GenerateRequest, gen):
    """Mask, pick a token and gather the trace's numbers, all on the device; returns one
    flat tensor in `SamplePack`'s layout so a whole batch is read back in one host
    transfer. The masked distribution is the raw one renormalized over the allowed tokens
    (one softmax, not two: on a CPU a vocabulary-wide op costs 50-100 us, a fair share of a
    llama.cpp step), and greedy decoding takes the masked top-k's first entry."""
    logits = logits.float()
    probs_raw = torch.softmax(logits, dim=-1)
    k = min(max(req.top_k, ALLOWED_SAMPLE) if req.trace_detail else req.top_k, logits.shape[-1])
    if mask is not None and mask.dtype != torch.bool:
        return _select_banned(logits, probs_raw, mask, k, req, gen)
    # the unmasked top-k is for the step view only (one vocabulary-wide pass less without it)
    rv, ri = torch.topk(probs_raw, k if req.trace_detail or mask is None else 0)
    if mask is not None:
        # disallowed tokens below every allowed one, even where an allowed token's
        # probability underflows to 0 (then the masked probabilities read 0, not NaN)
        kept = torch.where(mask, probs_raw, -1.0)
        feasible = (probs_raw * mask).sum()
        mv, mi = torch.topk(kept, k)
        mv = mv.clamp_min(0) / feasible.clamp_min(1e-38)
    else:
        kept, feasible, mv, mi = probs_raw, probs_raw.sum(), rv, ri
    if req.temperature <= 0:
        choice = mi[0]
    else:
        masked = logits if mask is None else logits.masked_fill(~mask, float("-inf"))
        p = torch.softmax(masked / req.temperature, dim=-1)
        if req.top_p < 1.0:
            sp, si = torch.sort(p, descending=True)
            keep = (torch.cumsum(sp, dim=-1) - sp) < req.top_p
            sp = sp * keep
            choice = si[torch.multinomial(sp / sp.sum(), 1, generator=gen)[0]]
        else:
            choice = torch.multinomial(p, 1, generator=gen)[0]
    p_masked = kept[choice].clamp_min(0) / feasible.clamp_min(1e-38)
    return _pack(choice, feasible, p_masked, probs_raw, rv, ri, mv, mi)


def _select_banned(logits, probs_raw, banned, k: int, req: GenerateRequest, gen):
    """`select_pack` where a few ids are excluded and every other is allowed (free text of a
    triggered constraint): the masked top-k is the raw top-k without them, so no pass over
    the vocabulary is added to the one the raw top-k takes."""
    n = min(k + banned.numel(), probs_raw.shape[-1])
    av, ai = torch.topk(probs_raw, n)
    keep = ~torch.isin(ai, banned)
    mv, mi = av[keep][:k], ai[keep][:k]
    feasible = (1.0 - probs_raw[banned].sum()).clamp_min(1e-38)
    rv, ri = (av[:k], ai[:k]) if req.trace_detail else (av[:0], ai[:0])
    if req.temperature <= 0:
        choice = mi[0]
    else:
        masked = logits.index_fill(0, banned, float("-inf"))
        p = torch.softmax(masked / req.temperature, dim=-1)
        if req.top_p < 1.0:
            sp, si = torch.sort(p, descending=True)
            sp = sp * ((torch.cumsum(sp, dim=-1) - sp) < req.top_p)
            choice = si[torch.multinomial(sp / sp.sum(), 1, generator=gen)[0]]
        else:
            choice = torch.multinomial(p, 1, generator=gen)[0]
    return _pack(
        choice, feasible, probs_raw[choice] / feasible, probs_raw, rv, ri, mv / feasible, mi
    )


def _pack(choice, feasible, p_masked, probs_raw, rv, ri, mv, mi):
    return torch.cat(
        [
            choice.float().view(1),
            feasible.view(1),
            p_masked.view(1),
            probs_raw[choice].view(1),
            torch.tensor([float(rv.numel())], device=probs_raw.device),
            rv,
            ri.float(),
            mv,
            mi.float(),
        ]
    )


@dataclass(frozen=True)
class SamplePack:
    """One request's sampling numbers, read back from the host copy of `select_pack`'s
    tensor: [choice, feasible mass, p(choice) masked, p(choice) raw, r, then r raw top-k
    values, their ids, k masked top-k values, their ids] (r is 0 when the step view's
    details are off)."""

    token_id: int
    feasible_mass: float
    prob: float  # p(choice) after the mask
    raw_prob: float  # p(choice) before it
    raw_top: list[tuple[int, float]]  # (id, p) most likely first, before the mask
    masked_top: list[tuple[int, float]]  # the same after the mask

    HEAD = 5

    @classmethod
    def from_values(cls, vals: list[float]) -> SamplePack:
        h = cls.HEAD
        r = int(vals[h - 1]) if len(vals) >= h else -1
        k = (len(vals) - h - 2 * r) // 2
        if r < 0 or k < 0 or len(vals) != h + 2 * r + 2 * k:
            raise ValueError(f"a sample pack of {len(vals)} values does not fit the layout")
        raw_v, raw_i = vals[h : h + r], vals[h + r : h + 2 * r]
        m_v, m_i = vals[h + 2 * r : h + 2 * r + k], vals[h + 2 * r + k :]
        return cls(
            int(vals[0]),
            vals[1],
            vals[2],
            vals[3],
            [(int(i), v) for v, i in zip(raw_v, raw_i, strict=True)],
            [(int(i), v) for v, i in zip(m_v, m_i, strict=True)],
        )
