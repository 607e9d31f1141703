"""Token ids as the trace shows them: text (bytes that are not whole UTF-8 characters read
`<E5 9F>`), hex for byte-fallback tokens, and each token's JSON; shared by every sequence
of one tokenizer and by replays."""

from __future__ import annotations

import re

from ..backends import TokenizerContext


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


_ESCAPED_RUN = re.compile("[\udc80-\udcff]+")


def readable(b: bytes) -> str:
    """Token bytes as text; bytes that are not whole UTF-8 characters read `<E5 9F>`
    (a U+FFFD would hide which bytes they are)."""
    s = b.decode("utf-8", errors="surrogateescape")
    return _ESCAPED_RUN.sub(
        lambda m: "<" + " ".join(f"{ord(c) - 0xDC00:02X}" for c in m.group()) + ">", s
    )


def token_json(texts: TokenText, tid: int, origin: str, step: int) -> dict:
    d = {"id": tid, "text": texts.text(tid), "origin": origin, "step": step}
    if texts.token_bytes[tid] is None:
        d["special"] = True  # no bytes in the output's text: its text is the token's name
    h = texts.hex(tid)
    if h is not None:
        d["hex"] = h
    return d


class TokenText:
    """Token ids -> bytes/text for traces, shared by all sequences of one tokenizer."""

    def __init__(self, ctx: TokenizerContext) -> None:
        self.ctx = ctx
        self.token_bytes = ctx.vocab.token_bytes

    def text(self, tid: int) -> str:
        b = self.token_bytes[tid] if 0 <= tid < len(self.token_bytes) else None
        if b is None:
            if tid == self.ctx.eos_token_id:
                return "<eos>"
            return self.ctx.tokenizer.convert_ids_to_tokens(tid) or f"<{tid}>"
        return readable(b)

    def hex(self, tid: int) -> str | None:
        """The token's bytes in hex when they are not whole UTF-8 characters on their own
        (byte-fallback tokens), so a viewer can merge them into the character they make."""
        b = self.token_bytes[tid] if 0 <= tid < len(self.token_bytes) else None
        if b is None:
            return None
        try:
            b.decode("utf-8")
            return None
        except UnicodeDecodeError:
            return b.hex()

    def hexes(self, ids) -> dict[str, str] | None:
        """{id: hex} of the ids whose bytes `hex` spells (None when there are none)."""
        found = {str(i): h for i in ids if (h := self.hex(i)) is not None}
        return found or None

    def bytes(self, ids: list[int]) -> bytes:
        tb = self.token_bytes
        return b"".join(tb[t] or b"" for t in ids)

    def pairs(self, ids: list[int]) -> list[list]:
        return [[t, self.text(t)] for t in ids]
