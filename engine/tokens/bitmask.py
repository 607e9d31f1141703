"""Token masks as int32 bitmasks, the layout xgrammar, llguidance, vLLM and SGLang share:
row r of a `[B, ceil(V/32)]` int32 tensor holds request r's allowed tokens, token t at
bit `t % 32` (little-endian) of word `t // 32`. A batch's rows go to the device as one
tensor and are unpacked there in one vectorised operation, so no per-request host work
grows with the vocabulary: a cached row is 1/8 of a boolean mask, and a library fills
its row directly."""

from __future__ import annotations

import functools

import numpy as np

from ..lazy import lazy_module

torch = lazy_module("torch")


def words(vocab_size: int) -> int:
    """int32 words per row."""
    return (vocab_size + 31) // 32


def pack_ids(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """Sorted or unsorted token ids -> one int32 row (host). Pure."""
    dense = np.zeros(vocab_size, dtype=bool)
    dense[np.asarray(ids, dtype=np.int64)] = True
    return pack_bool(dense)


def pack_bool(mask: np.ndarray) -> np.ndarray:
    """A boolean vocabulary mask (host) -> one int32 row. Pure."""
    bits = np.zeros(words(len(mask)) * 32, dtype=bool)
    bits[: len(mask)] = mask
    return np.packbits(bits, bitorder="little").view(np.int32)


def unpack_bitmask(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """One int32 row (host; a library's own bitmask) -> a boolean vocabulary mask."""
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def popcount(row: np.ndarray) -> int:
    """Allowed tokens in a host row, without unpacking it to the vocabulary."""
    return int(np.bitwise_count(np.ascontiguousarray(row).view(np.uint32)).sum())


@functools.lru_cache(maxsize=8)
def full_row(vocab_size: int, device: str):
    """Every token allowed (bits past the vocabulary stay 0); one per vocabulary and device,
    shared: callers must not write into it."""
    return pack_tensor(torch.ones(vocab_size, dtype=torch.bool, device=device))


def mask_row(mask, vocab_size: int):
    """A `Matcher.mask` answer as a row on its device: None (nothing masked) stays None, a
    ban list (int64 ids, everything else allowed) and a boolean mask are packed."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        ban, mask = mask, torch.ones(vocab_size, dtype=torch.bool, device=mask.device)
        mask[ban] = False
    return pack_tensor(mask)


def pack_tensor(mask):
    """A boolean `[..., V]` tensor -> int32 `[..., ceil(V/32)]` on its own device, in one
    vectorised operation (a backend whose masks are boolean; a ban list made a row)."""
    v = mask.shape[-1]
    pad = words(v) * 32 - v
    if pad:
        mask = torch.nn.functional.pad(mask, (0, pad))
    shifts = torch.arange(32, device=mask.device, dtype=torch.int64)
    word = (mask.reshape(*mask.shape[:-1], -1, 32).to(torch.int64) << shifts).sum(-1)
    return torch.where(word >= 1 << 31, word - (1 << 32), word).to(torch.int32)


def unpack(bits, vocab_size: int):
    """int32 `[..., W]` on any device -> boolean `[..., V]` there: one broadcast shift and
    test for the whole batch, over bytes (little-endian words: token t is bit t % 8 of
    byte t // 8), so the intermediate is one byte a token (what xgrammar's
    `apply_token_bitmask_inplace` reads, kept as a mask because the trace also needs the
    allowed probability mass)."""
    by = bits.contiguous().view(torch.uint8)
    shifts = torch.arange(8, device=bits.device, dtype=torch.uint8)
    flat = ((by.unsqueeze(-1) >> shifts) & 1).view(torch.bool)
    return flat.reshape(*bits.shape[:-1], -1)[..., :vocab_size]
