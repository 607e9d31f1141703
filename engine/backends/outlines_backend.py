"""outlines-core: its Rust Index over the same regex (whitespace applied by our policy).
It has no jump-forward of its own, so the jump string comes from the shared compressed
FSM of that regex, walked over the text emitted so far."""

from __future__ import annotations

import numpy as np

from ..compressed import CompressedFSM
from ..constraint import Constraint
from ..errors import CfsmError
from ..regex_dfa import CharDFA, normalize_regex
from .base import CompiledConstraint, GrammarBackend, Matcher, TokenizerContext


def _vocabulary(ctx: TokenizerContext):
    from outlines_core import Vocabulary

    groups: dict[bytes, list[int]] = {}
    for tid, b in enumerate(ctx.vocab.token_bytes):
        if b and tid != ctx.eos_token_id:
            groups.setdefault(b, []).append(tid)
    return Vocabulary(ctx.eos_token_id, groups)


class OutlinesMatcher(Matcher):
    backend = "outlines"

    def __init__(self, c: OutlinesCompiled) -> None:
        self.c = c
        self.stack: list[tuple[int, bytes]] = [(c.index.get_initial_state(), b"")]

    def allowed_ids(self) -> np.ndarray:
        state = self.stack[-1][0]
        got = self.c.allowed_cache.get(state)
        if got is None:
            got = np.array(sorted(self.c.index.get_allowed_tokens(state) or []), dtype=np.int64)
            self.c.allowed_cache[state] = got
        return got

    def mask(self, device: str):
        import torch

        state = self.stack[-1][0]
        key = (state, device)
        m = self.c.mask_cache.get(key)
        if m is None:
            m = torch.zeros(self.c.vocab_size, dtype=torch.bool)
            ids = self.allowed_ids()
            if len(ids):
                m[torch.from_numpy(ids)] = True
            m = m.to(device)
            self.c.mask_cache[key] = m
        return m

    def accept_token(self, token_id: int) -> bool:
        state, text = self.stack[-1]
        if token_id == self.c.eos_token_id:
            return self.c.index.is_final_state(state)
        nxt = self.c.index.get_next_state(state, token_id)
        if nxt is None:
            return False
        self.stack.append((nxt, text + (self.c.token_bytes[token_id] or b"")))
        return True

    def rollback(self, num_tokens: int) -> None:
        if num_tokens >= len(self.stack):
            raise ValueError("rollback past the start")
        if num_tokens > 0:
            del self.stack[-num_tokens:]

    def is_final(self) -> bool:
        return bool(self.c.index.is_final_state(self.stack[-1][0]))

    def jump_forward(self) -> str:
        try:
            text = self.stack[-1][1].decode("utf-8")
        except UnicodeDecodeError:
            return ""
        s = self.c.compressed.dfa.walk(text)
        return "" if s is None else self.c.compressed.jump_string(s)

    def state_info(self) -> dict:
        return {"char_state": None, "token_state": int(self.stack[-1][0])}


class OutlinesCompiled(CompiledConstraint):
    backend = "outlines"

    def __init__(self, constraint: Constraint, index, dfa: CharDFA, ctx: TokenizerContext) -> None:
        self.constraint = constraint
        self.index = index
        self.compressed = CompressedFSM(dfa)
        self.vocab_size = ctx.vocab_size
        self.eos_token_id = ctx.eos_token_id
        self.token_bytes = ctx.vocab.token_bytes
        self.allowed_cache: dict[int, np.ndarray] = {}
        self.mask_cache: dict = {}

    def matcher(self) -> Matcher:
        return OutlinesMatcher(self)


class OutlinesBackend(GrammarBackend):
    name = "outlines"
    kinds = ("regex", "schema")

    def _compile(self, constraint: Constraint, ctx: TokenizerContext, dfa: CharDFA | None = None, **_):
        from outlines_core import Index

        if dfa is None:
            from ..regex_dfa import build_char_dfa

            dfa = build_char_dfa(constraint.regex() or "")
        vocab = ctx.view("outlines", lambda: _vocabulary(ctx))
        try:
            index = Index(normalize_regex(constraint.regex() or ""), vocab)
        except Exception as exc:  # noqa: BLE001
            raise CfsmError("unsupported_feature", f"outlines-core cannot compile this regex: {exc}") from exc
        return OutlinesCompiled(constraint, index, dfa, ctx)
