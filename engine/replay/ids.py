"""The engine's tokens as this tokenizer's ids: the ids it returned where they name the
same bytes here, else each token's bytes (or text) looked up in the vocabulary, else the
whole text re-tokenized (the engine's per-token logprobs are then dropped: they belong to
tokens this tokenizer does not have)."""

from __future__ import annotations

from ..backends import TokenizerContext
from .tokens import TOKEN_ID, Alternative, EngineToken


def _bytes_to_id(ctx: TokenizerContext) -> dict[bytes, int]:
    def build():
        out: dict[bytes, int] = {}
        for i, b in enumerate(ctx.vocab.token_bytes):
            if b:
                out.setdefault(b, i)
        return out

    return ctx.view("replay-bytes-to-id", build)


class IdResolver:
    def __init__(self, ctx: TokenizerContext) -> None:
        self.ctx = ctx
        self.by_bytes = _bytes_to_id(ctx)

    def __call__(self, t: EngineToken | Alternative) -> int | None:
        """The id here: the engine's where it names the same bytes (or, without bytes, the
        same text; a vLLM `token_id:N` token has no text but its id), else by bytes."""
        tb = self.ctx.vocab.token_bytes
        raw = t.raw if t.raw is not None else t.text.encode("utf-8")
        if t.id is not None and 0 <= t.id < len(tb):
            here = tb[t.id] or b""
            if (
                here == raw
                or t.raw is None
                and (TOKEN_ID.fullmatch(t.text) or here.decode("utf-8", "replace") == t.text)
            ):
                return t.id
        return self.by_bytes.get(raw)

    def resolve(self, tokens: list[EngineToken], text: str):
        """(tokens, ids, text, how): `how` is "engine ids", "bytes" or "re-tokenized"
        (only where a token is not in this vocabulary). A
        last token of no bytes (the end-of-sequence token some engines list) is the stop,
        not output."""
        while tokens and tokens[-1].text == "" and not tokens[-1].raw:
            tokens = tokens[:-1]
        ids = [self(t) for t in tokens]
        tb = self.ctx.vocab.token_bytes
        if tokens and all(i is not None for i in ids):
            # the tokens are what the engine decoded, even where its message differs (a
            # chat parser that strips a code fence): they are walked, and the text is theirs
            joined = b"".join(tb[i] or b"" for i in ids).decode("utf-8", errors="replace")
            given = all(t.id == i for t, i in zip(tokens, ids, strict=True))
            return tokens, ids, joined, "engine ids" if given else "bytes"
        ids = self.ctx.continuation.encode(text)
        toks = [EngineToken((tb[i] or b"").decode("utf-8", errors="replace"), i) for i in ids]
        return toks, ids, text, "re-tokenized"
