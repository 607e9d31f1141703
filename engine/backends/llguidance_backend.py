"""llguidance: regex, native JSON schema (separators by our whitespace policy) and Lark."""

from __future__ import annotations

import numpy as np

from ..constraint import FLEXIBLE_WS, Constraint
from ..errors import CfsmError
from ..regex.dfa import normalize_regex
from .base import CompiledConstraint, GrammarBackend, Matcher, TokenizerContext, unpack_bitmask


class LlguidanceMatcher(Matcher):
    backend = "llguidance"

    def __init__(self, c: LlguidanceCompiled) -> None:
        from llguidance import LLMatcher

        self.c = c
        self.m = LLMatcher(c.tokenizer, c.grammar, log_level=0)
        if self.m.is_error():
            raise CfsmError("invalid_grammar", f"llguidance: {self.m.get_error()}")
        self.bitmask = np.full((1, (c.vocab_size + 31) // 32), -1, dtype=np.int32)
        self._allowed: np.ndarray | None = None
        self._bits: np.ndarray | None = None

    def _fill(self) -> np.ndarray:
        if self._allowed is None:
            from llguidance.numpy import fill_next_token_bitmask

            fill_next_token_bitmask(self.m, self.bitmask)
            bits = unpack_bitmask(self.bitmask[0], self.c.vocab_size) & self.c.emittable
            self._bits = bits
            self._allowed = np.flatnonzero(bits).astype(np.int64)
        return self._allowed

    def allowed_ids(self) -> np.ndarray:
        return self._fill()

    def mask(self, device: str):
        import torch

        self._fill()
        return torch.from_numpy(self._bits).to(device)

    def accept_token(self, token_id: int) -> bool:
        ok = bool(self.m.consume_token(int(token_id))) and not self.m.is_error()
        self._allowed = None
        return ok

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.m.rollback(num_tokens)
            self._allowed = None

    def is_final(self) -> bool:
        return bool(self.m.is_accepting())

    def jump_forward(self) -> str:
        return self.m.compute_ff_bytes().decode("utf-8", errors="ignore")


class LlguidanceCompiled(CompiledConstraint):
    backend = "llguidance"

    def __init__(self, constraint: Constraint, tokenizer, grammar: str, vocab_size: int, emittable) -> None:
        self.constraint = constraint
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.vocab_size = vocab_size
        self.emittable = emittable

    def matcher(self) -> Matcher:
        return LlguidanceMatcher(self)


class LlguidanceBackend(GrammarBackend):
    name = "llguidance"
    kinds = ("regex", "schema", "grammar")

    def _compile(self, constraint: Constraint, ctx: TokenizerContext, **_):
        from llguidance import LLMatcher
        from llguidance.hf import from_tokenizer

        tok = ctx.view(
            "llguidance", lambda: from_tokenizer(ctx.tokenizer, n_vocab=ctx.vocab_size, eos_token=ctx.eos_token_id)
        )
        if constraint.kind == "regex":
            grammar = LLMatcher.grammar_from_regex(normalize_regex(constraint.text))
        elif constraint.kind == "schema":
            obj = constraint.schema_obj()
            ws = constraint.whitespace
            opts = {
                "item_separator": ", " if ws == "spaced" else ",",
                "key_separator": ": " if ws == "spaced" else ":",
                "whitespace_flexible": ws == "flexible",
            }
            if ws == "flexible":
                opts["whitespace_pattern"] = FLEXIBLE_WS
            try:
                grammar = LLMatcher.grammar_from_json_schema(obj, overrides=opts)
            except Exception as exc:  # noqa: BLE001
                raise CfsmError("invalid_schema", f"llguidance: {exc}") from exc
        else:
            grammar = LLMatcher.grammar_from_lark(constraint.text)
        msg = LLMatcher.validate_grammar(grammar, tok)
        if msg:
            kind = "invalid_grammar" if constraint.kind == "grammar" else "unsupported_feature"
            raise CfsmError(kind, f"llguidance cannot compile this {constraint.kind}: {msg}")
        return LlguidanceCompiled(constraint, tok, grammar, ctx.vocab_size, ctx.emittable)
