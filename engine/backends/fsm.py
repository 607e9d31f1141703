"""The project's own backend: character DFA -> compressed FSM -> token index. This is
the reference the visualizer shows."""

from __future__ import annotations

import json

import numpy as np

from .. import limits
from ..constraint import Constraint
from ..errors import CfsmError
from ..regex.compressed import compressed_of
from ..regex.dfa import CharDFA, build_char_dfa
from ..schema.formats import FORMATS
from ..tokens.index import TokenIndex
from .base import CompiledConstraint, GrammarBackend, Matcher, StackMatcher, TokenizerContext


class FsmMatcher(StackMatcher):
    backend = "fsm"

    def __init__(self, compiled: FsmCompiled) -> None:
        self.c = compiled
        self.stack = [compiled.index.initial]

    @property
    def state(self) -> int:
        return self.stack[-1]

    def allowed_ids(self) -> np.ndarray:
        return self.c.index.allowed_ids(self.state)

    def mask(self, device: str):
        return self.c.index.mask(self.state, device)

    def bitmask(self, device: str, vocab_size: int):
        return self.c.index.bitmask(self.state, device)

    def accept_token(self, token_id: int) -> bool:
        nxt = self.c.index.next_state(self.state, token_id)
        if nxt is None:
            return False
        self.stack.append(nxt)
        return True

    def is_final(self) -> bool:
        return self.c.index.is_final(self.state)

    def next_char_state(self, token_id: int) -> int | None:
        nxt = self.c.index.next_state(self.state, token_id)
        return None if nxt is None else self.c.index.split(nxt)[0]

    def jump_forward(self) -> str:
        char_state, pending = self.c.index.split(self.state)
        if pending:
            return ""
        return self.c.compressed.jump_string(char_state)

    def state_info(self) -> dict:
        char_state, pending = self.c.index.split(self.state)
        return {
            "char_state": char_state,
            "token_state": self.state,
            "pending_bytes": pending.hex() or None,
        }


class FsmCompiled(CompiledConstraint):
    backend = "fsm"

    def __init__(self, constraint: Constraint, dfa: CharDFA, index: TokenIndex) -> None:
        self.constraint = constraint
        self.dfa = dfa
        self.compressed = compressed_of(dfa)
        self.index = index

    def matcher(self) -> Matcher:
        return FsmMatcher(self)

    def stats(self) -> dict:
        return {**super().stats(), **self.compressed.stats(), "token_index": self.index.stats()}

    def nbytes(self) -> int:
        return self.index.nbytes()


class FsmBackend(GrammarBackend):
    name = "fsm"
    kinds = ("regex", "schema")
    needs_automaton = True
    _warmed: set[str] = set()  # vocabularies whose shared index parts are built (`warm`)
    # states indexed at compile, within this time (0: all lazy, as decoding reaches them)
    index_ahead_s: float = limits.INDEX_AHEAD_S

    def compile_native(
        self, constraint: Constraint, ctx: TokenizerContext, dfa: CharDFA | None = None
    ):
        dfa = self.automaton(constraint, dfa)
        if dfa is None:
            raise CfsmError("invalid_input", "no automaton")
        index = TokenIndex(dfa, ctx.vocab)
        if self.index_ahead_s > 0:
            index.index_ahead(self.index_ahead_s, limits.INDEX_AHEAD_MB << 20)
        return FsmCompiled(constraint, dfa, index)

    def warm(self, ctx: TokenizerContext) -> None:
        """The token index's shared parts for the character sets most schemas use (a
        string's content, digits, the formats: `loop_split`, `runs_after_first`; once per
        process and vocabulary): without them the first such state a server meets takes
        2-5 ms instead of ~0.3."""
        if ctx.vocab.fingerprint in self._warmed:
            return
        self._warmed.add(ctx.vocab.fingerprint)
        schemas = [{"type": t} for t in ("string", "integer", "number")]
        for schema in schemas + [{"type": "string", "format": f} for f in FORMATS]:
            c = Constraint("schema", json.dumps(schema))
            dfa = build_char_dfa(c.regex() or "", max_chars=c.max_regex_chars)
            index = TokenIndex(dfa, ctx.vocab)
            for s in range(dfa.num_states):
                index.allowed_ids(s)
