"""Token id -> raw bytes for any Hugging Face tokenizer (byte-level BPE, SentencePiece
with byte fallback, or plain), so automata can walk tokens as the model emits them."""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..lazy import lazy_module

np = lazy_module("numpy")  # `cfsm check` reads vocabularies without it


@lru_cache(maxsize=1)
def gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's printable byte alphabet (bytes_to_unicode)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@dataclass
class TokenVocab:
    """Bytes of every token id; None for special/control tokens that never carry text."""

    token_bytes: list[bytes | None]
    eos_token_id: int
    special_ids: frozenset[int]
    fingerprint: str
    tokenizer_vocab_size: int
    # what is wrong with this vocabulary for constrained decoding, in words (shown with
    # every compile report and trace)
    warnings: tuple[str, ...] = ()
    _sorted: tuple | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return len(self.token_bytes)

    def text_tokens(self) -> list[tuple[int, bytes]]:
        return [(i, b) for i, b in enumerate(self.token_bytes) if b]

    def _sorted_view(self):
        if self._sorted is None:
            pairs = sorted((b, i) for i, b in enumerate(self.token_bytes) if b)
            self._sorted = ([b for b, _ in pairs], np.array([i for _, i in pairs], dtype=np.int64))
        return self._sorted

    def ids_extending(self, prefix: bytes):
        """Token ids whose bytes start with `prefix` and are strictly longer (a numpy
        slice found by two binary searches: used at every jump boundary)."""

        keys, ids = self._sorted_view()
        lo = bisect.bisect_right(keys, prefix)
        stripped = prefix.rstrip(b"\xff")
        if not stripped:
            return ids[lo:]
        upper = stripped[:-1] + bytes([stripped[-1] + 1])
        hi = bisect.bisect_left(keys, upper, lo)
        return ids[lo:hi]


def build_vocab(
    tokenizer, model_vocab_size: int | None = None, eos_token_id: int | None = None
) -> TokenVocab:
    """Read token bytes from the tokenizer's own model description (no decode() per id,
    which would strip spaces or merge bytes)."""
    n_tok = len(tokenizer)
    size = max(n_tok, model_vocab_size or 0)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder_type = ""
    if backend is not None:
        try:
            dj = json.loads(backend.to_str()).get("decoder") or {}
            decoder_type = json.dumps(dj)
        except Exception:  # noqa: BLE001
            decoder_type = ""
    byte_level = '"ByteLevel"' in decoder_type
    byte_dec = gpt2_byte_decoder()
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    for tid, at in added.items():
        if getattr(at, "special", False):
            special.add(int(tid))
    pieces = tokenizer.convert_ids_to_tokens(list(range(n_tok)))
    special_bytes = sum(
        1 for t in special if t < n_tok and pieces[t] and _BYTE_TOKEN.match(pieces[t])
    )
    warnings = ()
    if special_bytes >= 128:
        warnings = (
            f"{special_bytes} byte-fallback tokens (<0x00>..<0xFF>) are registered as special "
            f"tokens, "
            "which never carry text: characters outside the learned merges cannot be written "
            "(register "
            "them as ordinary tokens, as Llama tokenizers do)",
        )
    out: list[bytes | None] = [None] * size
    for tid, piece in enumerate(pieces):
        if piece is None or tid in special:
            continue
        if tid in added and not byte_level:
            out[tid] = piece.encode("utf-8")
            continue
        m = _BYTE_TOKEN.match(piece)
        if m:
            out[tid] = bytes([int(m.group(1), 16)])
        elif byte_level and all(ch in byte_dec for ch in piece):
            out[tid] = bytes(byte_dec[ch] for ch in piece)
        else:
            out[tid] = piece.replace("\u2581", " ").encode("utf-8")
        if out[tid] == b"":
            out[tid] = None
    eos = tokenizer.eos_token_id if eos_token_id is None else eos_token_id
    return TokenVocab(
        token_bytes=out,
        eos_token_id=int(eos),
        special_ids=frozenset(special),
        fingerprint=_fingerprint(out, eos),
        tokenizer_vocab_size=n_tok,
        warnings=warnings,
    )


def vocab_from_bytes(token_bytes: list[bytes | None], eos_token_id: int) -> TokenVocab:
    """A vocabulary from token bytes alone (what a compile worker is sent)."""
    return TokenVocab(
        token_bytes=list(token_bytes),
        eos_token_id=int(eos_token_id),
        special_ids=frozenset(i for i, b in enumerate(token_bytes) if b is None),
        fingerprint=_fingerprint(token_bytes, eos_token_id),
        tokenizer_vocab_size=len(token_bytes),
    )


def _fingerprint(token_bytes, eos) -> str:
    h = hashlib.sha256()
    h.update(f"{len(token_bytes)}:{eos}:".encode())
    for b in token_bytes:
        h.update(b"\x00" if b is None else b"\x01" + len(b).to_bytes(2, "little") + b)
    return h.hexdigest()[:16]
