"""Per-tokenizer tables for triggered constraints, built once and kept in the tokenizer
context: which free-text tokens would run past a trigger (masked, so that every trigger
ends on a token boundary and the constraint after it starts at a token), and which tokens
spell a prefix of a tag."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..lazy import lazy_module

if TYPE_CHECKING:  # the context holds these tables: a type only, no import at run time
    from ..backends.base import TokenizerContext

torch = lazy_module("torch")


def special_ids(ctx: TokenizerContext, texts: list[str]) -> dict[str, int]:
    """The tags that are one special token of this tokenizer (e.g. Qwen's `<think>`)."""
    tok = ctx.tokenizer
    added = {}
    if tok is not None and hasattr(tok, "get_added_vocab"):
        added = tok.get_added_vocab()
    out = {}
    for t in texts:
        tid = added.get(t)
        if tid is not None and tid < ctx.vocab_size and ctx.vocab.token_bytes[tid] is None:
            out[t] = int(tid)
    return out


@dataclass
class _FreeTables:
    excluded: np.ndarray  # sorted ids masked here
    vocab_size: int
    masks: dict = field(default_factory=dict)  # device -> ban list (None: nothing masked)
    _allowed: np.ndarray | None = None

    @property
    def allowed(self) -> np.ndarray:
        """Every other id (built on first use: decoding free text never asks for it)."""
        if self._allowed is None:
            self._allowed = np.setdiff1d(np.arange(self.vocab_size, dtype=np.int64), self.excluded)
        return self._allowed


class TriggerScanner:
    """Free text's watch for triggers. Its state is the longest end of the free text so far
    that begins a trigger (bytes). `step` says which trigger a token completes; a token
    that would complete one before its own end is masked (`tables`)."""

    def __init__(self, ctx: TokenizerContext, texts: tuple[str, ...], special: dict[str, int]):
        self.ctx = ctx
        self.texts = tuple(t.encode("utf-8") for t in texts)
        self.by_special = {special[t]: i for i, t in enumerate(texts) if t in special}
        self._inside_ids: np.ndarray | None = None
        self._tables: dict[tuple[bytes, bool], _FreeTables] = {}

    def step(self, state: bytes, token_id: int) -> tuple[bytes, int | None, bool]:
        """(next state, index of the trigger the token completes or None, crosses): crosses
        is True for a token that runs past a trigger's end (never allowed)."""
        if token_id in self.by_special:
            return b"", self.by_special[token_id], False
        b = self.ctx.vocab.token_bytes[token_id] if token_id < self.ctx.vocab_size else None
        s = state + (b or b"")
        for i, t in enumerate(self.texts):
            at = s.find(t, max(0, len(state) - len(t) + 1))
            if at >= 0:
                return b"", i, at + len(t) < len(s)
        return self._suffix_state(s), None, False

    def _suffix_state(self, s: bytes) -> bytes:
        longest = max((len(t) for t in self.texts), default=1)
        for n in range(min(len(s), longest - 1), 0, -1):
            tail = s[-n:]
            if any(t.startswith(tail) for t in self.texts):
                return tail
        return b""

    def _inside(self) -> np.ndarray:
        """Tokens holding a whole trigger before their own end (one vocabulary scan)."""
        if self._inside_ids is None:
            tb = self.ctx.vocab.token_bytes
            self._inside_ids = np.array(
                [i for i, b in enumerate(tb) if b and any(t in b[:-1] for t in self.texts)],
                dtype=np.int64,
            )
        return self._inside_ids

    def _crossing(self, state: bytes) -> np.ndarray:
        """Tokens that would run past a trigger's end from this state: a trigger begun in
        the text (its first k bytes end the state) and finished inside the token before
        its end, or one wholly inside the token. Two binary searches per begun trigger."""
        parts = [self._inside()]
        for t in self.texts:
            for k in range(1, len(t)):
                if state.endswith(t[:k]):
                    parts.append(self.ctx.vocab.ids_extending(t[k:]))
        return np.unique(np.concatenate(parts)).astype(np.int64)

    def tables(self, state: bytes, may_end: bool) -> _FreeTables:
        key = (state, may_end)
        if key not in self._tables:
            ex = self._crossing(state)
            if not may_end:
                ex = np.union1d(ex, [self.ctx.eos_token_id]).astype(np.int64)
            self._tables[key] = _FreeTables(ex, self.ctx.vocab_size)
        return self._tables[key]

    def prepare(self, may_end: bool) -> None:
        """Every state's tables now (with the compile, outside any decoding step): the
        states are the triggers' proper prefixes."""
        for t in self.texts:
            for k in range(len(t)):
                self.tables(t[:k], may_end)

    def mask(self, state: bytes, may_end: bool, device: str):
        """None where nothing is masked (most free steps: no trigger under way); else the
        few excluded ids (a ban list, which sampling applies without a vocabulary-wide
        mask)."""
        t = self.tables(state, may_end)
        if device not in t.masks:
            t.masks[device] = torch.from_numpy(t.excluded).to(device) if len(t.excluded) else None
        return t.masks[device]


class TagTable:
    """Tokens that spell a prefix of a tag's remaining text (or its special token)."""

    def __init__(self, ctx: TokenizerContext, text: str, special: int | None) -> None:
        self.ctx = ctx
        self.text = text.encode("utf-8")
        self.special = special
        self._ids: dict[tuple[int, bool], np.ndarray] = {}
        self._masks: dict[tuple[int, str, bool], object] = {}

    def allowed_ids(self, pos: int, may_end: bool = False) -> np.ndarray:
        """With `may_end`, the stop (EOS) is allowed too."""
        if (pos, may_end) not in self._ids:
            if self.special is not None:
                ids = [self.special]
            else:
                by_bytes = self.ctx.view("ids-by-bytes", lambda: _ids_by_bytes(self.ctx))
                rest = self.text[pos:]
                ids = [i for n in range(1, len(rest) + 1) for i in by_bytes.get(rest[:n], ())]
            ids += [self.ctx.eos_token_id] if may_end else []
            self._ids[(pos, may_end)] = np.array(sorted(set(ids)), dtype=np.int64)
        return self._ids[(pos, may_end)]

    def advance(self, pos: int, token_id: int) -> int | None:
        """The position after the token, or None when it does not continue the tag."""
        if token_id == self.special:
            return len(self.text)
        b = self.ctx.vocab.token_bytes[token_id] if token_id < self.ctx.vocab_size else None
        if not b or not self.text.startswith(b, pos):
            return None
        return pos + len(b)

    def mask(self, pos: int, device: str, may_end: bool = False):
        key = (pos, device, may_end)
        if key not in self._masks:
            m = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)
            m[torch.from_numpy(self.allowed_ids(pos, may_end))] = True
            self._masks[key] = m.to(device)
        return self._masks[key]

    def rest(self, pos: int) -> str:
        """The text still to write ('' for a special token, which no text spells)."""
        if self.special is not None:
            return ""
        try:
            return self.text[pos:].decode("utf-8")
        except UnicodeDecodeError:
            return ""


def _ids_by_bytes(ctx: TokenizerContext) -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for i, b in enumerate(ctx.vocab.token_bytes):
        if b:
            out.setdefault(b, []).append(i)
    return out


MAX_TABLES = 32  # tag texts are user input: their tables (and masks) are kept for this many


def _kept(ctx: TokenizerContext, key: tuple, build):
    """The table for `key`, built once and kept among the MAX_TABLES most recently used
    (per tokenizer), so that many distinct tags cannot grow the process without bound."""
    lru = ctx.view("trigger-tables", OrderedDict)
    if key in lru:
        lru.move_to_end(key)
    else:
        lru[key] = build()
        while len(lru) > MAX_TABLES:
            lru.popitem(last=False)
    return lru[key]


def scanner(ctx: TokenizerContext, texts: tuple[str, ...], special: dict[str, int]):
    return _kept(ctx, ("scan", texts), lambda: TriggerScanner(ctx, texts, special))


def tag_table(ctx: TokenizerContext, text: str, special: int | None) -> TagTable:
    return _kept(ctx, ("tag", text), lambda: TagTable(ctx, text, special))
