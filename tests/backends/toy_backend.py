"""A fifth backend, as docs/architecture.md's "Adding a backend" builds one: one file, one
registry line. It decodes over the character DFA like fsm, but finds each state's allowed
tokens by walking every token's bytes one by one (no vectorized index): slow, and for that
a second opinion on fsm's sets."""

from __future__ import annotations

import numpy as np

from engine.backends.base import (
    CompiledConstraint,
    GrammarBackend,
    Matcher,
    StackMatcher,
    TokenizerContext,
)
from engine.constraint import Constraint
from engine.lazy import lazy_module
from engine.regex.dfa import CharDFA
from engine.tokens.index import TokenIndex

torch = lazy_module("torch")


class ToyMatcher(StackMatcher):
    def __init__(self, compiled: ToyCompiled) -> None:
        self.c = compiled
        self.stack = [compiled.index.initial]

    def allowed_ids(self) -> np.ndarray:
        state = self.stack[-1]
        got = self.c.allowed.get(state)
        if got is None:
            walk = self.c.index.next_state
            ids = [t for t in range(self.c.index.vocab.size) if walk(state, t) is not None]
            got = self.c.allowed[state] = np.array(ids, dtype=np.int64)
        return got

    def mask(self, device: str):
        m = torch.zeros(self.c.index.vocab.size, dtype=torch.bool)
        m[torch.from_numpy(self.allowed_ids())] = True
        return m.to(device)

    def accept_token(self, token_id: int) -> bool:
        nxt = self.c.index.next_state(self.stack[-1], token_id)
        if nxt is None:
            return False
        self.stack.append(nxt)
        return True

    def is_final(self) -> bool:
        return self.c.index.is_final(self.stack[-1])

    def jump_forward(self) -> str:
        return ""  # it finds no forced text: jump mode decodes it token by token


class ToyCompiled(CompiledConstraint):
    backend = "toy"

    def __init__(self, constraint: Constraint, dfa: CharDFA, index: TokenIndex) -> None:
        self.constraint, self.dfa, self.index = constraint, dfa, index
        self.allowed: dict[int, np.ndarray] = {}

    def matcher(self) -> Matcher:
        return ToyMatcher(self)


class ToyBackend(GrammarBackend):
    name = "toy"
    kinds = ("regex", "schema")
    needs_automaton = True

    def compile_native(
        self, constraint: Constraint, ctx: TokenizerContext, dfa: CharDFA | None = None
    ) -> CompiledConstraint:
        dfa = self.automaton(constraint, dfa)
        return ToyCompiled(constraint, dfa, TokenIndex(dfa, ctx.vocab))
