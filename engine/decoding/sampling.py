"""Sampling on the device: a batch's bitmask applied, its picks, and the numbers the trace
keeps, packed into one tensor so a whole step comes back in one host transfer.
`SamplePack` names the layout on the host side."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..lazy import lazy_module
from ..tokens.bitmask import unpack
from .request import GenerateRequest

torch = lazy_module("torch")

ALLOWED_SAMPLE = 48  # allowed tokens the trace lists per step, most likely first


def pack_sizes(req: GenerateRequest, masked: bool, vocab_size: int) -> tuple[int, int]:
    """(raw top-k, masked top-k) a request's pack keeps: the step view's details list
    `ALLOWED_SAMPLE` allowed tokens; the unmasked top-k is kept for the step view, or
    where nothing is masked (then it is the same list)."""
    k = min(max(req.top_k, ALLOWED_SAMPLE) if req.trace_detail else req.top_k, vocab_size)
    return (k if req.trace_detail or not masked else 0), k


def select_batch(logits, bits, reqs: list[GenerateRequest], gens: list, sizes: list):
    """One step's sampling for a whole batch, on the model's device: `logits` `[B, V]`,
    `bits` the batch's `[B, ceil(V/32)]` int32 bitmask (engine.tokens.bitmask; None rows
    are stacked as full ones by the caller). The bitmask is unpacked in one operation
    (the raw top-k, a whole pass over the batch, only where a row keeps one),
    the masked distribution is the raw one renormalized over the allowed tokens (one
    softmax, not two), top-k and greedy picks are one call each for the batch; a row with
    a temperature draws from its own generator (a seed gives the same text alone or in a
    batch). `sizes`: each row's `pack_sizes`. Returns `[B, L]` in `SamplePack`'s layout
    with the batch's widest top-k: read back in one host transfer, each row cut to its
    sizes by `SamplePack.read`."""
    logits = logits.float()
    b, v = logits.shape
    probs = torch.softmax(logits, dim=-1)
    allowed = unpack(bits, v)
    kept = torch.where(allowed, probs, -1.0)  # disallowed below every allowed token
    feasible = kept.clamp_min(0).sum(-1).clamp_min(1e-38)
    r_max, k_max = max(r for r, _ in sizes), max(k for _, k in sizes)
    mv, mi = torch.topk(kept, k_max, dim=-1)
    mv = mv.clamp_min(0) / feasible.unsqueeze(-1)
    rv, ri = torch.topk(probs, r_max, dim=-1) if r_max else (mv[:, :0], mi[:, :0])
    choice = mi[:, 0].clone()
    for i, req in enumerate(reqs):
        if req.temperature > 0:
            choice[i] = _draw(logits[i], allowed[i], req, gens[i])
    at = choice.unsqueeze(-1)
    p_masked = kept.gather(1, at).squeeze(1).clamp_min(0) / feasible
    head = [choice.float(), feasible, p_masked, probs.gather(1, at).squeeze(1)]
    width = torch.full((b,), float(r_max), device=logits.device)
    return torch.cat([torch.stack([*head, width], 1), rv, ri.float(), mv, mi.float()], 1)


def _draw(logits, allowed, req: GenerateRequest, gen):
    """A sampled pick for one row (temperature, then top-p) from its own generator."""
    p = torch.softmax(logits.masked_fill(~allowed, float("-inf")) / req.temperature, dim=-1)
    if req.top_p < 1.0:
        sp, si = torch.sort(p, descending=True)
        sp = sp * ((torch.cumsum(sp, dim=-1) - sp) < req.top_p)
        return si[torch.multinomial(sp / sp.sum(), 1, generator=gen)[0]]
    return torch.multinomial(p, 1, generator=gen)[0]


@dataclass(frozen=True)
class SamplePack:
    """One request's sampling numbers, read back from the host copy of a `select_batch` row's
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
    def read(cls, vals: list[float], raw: int, masked: int) -> SamplePack:
        """A row of `select_batch`, cut to the request's own top-k sizes (`pack_sizes`)."""
        p = cls.from_values(vals)
        return replace(p, raw_top=p.raw_top[:raw], masked_top=p.masked_top[:masked])

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
