"""xgrammar: regex, native JSON schema (separators by our whitespace policy) and EBNF."""

from __future__ import annotations

import json

import numpy as np

from ..constraint import Constraint
from ..errors import CfsmError, native_message
from ..limits import CACHE_BUDGET_MB
from ..regex.dfa import normalize_regex
from .base import CompiledConstraint, GrammarBackend, Matcher, TokenizerContext, unpack_bitmask


class XgrammarMatcher(Matcher):
    backend = "xgrammar"

    def __init__(self, c: XgrammarCompiled) -> None:
        import xgrammar as xgr

        self.c = c
        self.m = xgr.GrammarMatcher(c.grammar)
        self.bitmask = xgr.allocate_token_bitmask(1, c.vocab_size)
        self._allowed: np.ndarray | None = None
        self._mask = None

    def _fill(self) -> np.ndarray:
        if self._allowed is None:
            self.m.fill_next_token_bitmask(self.bitmask)
            bits = unpack_bitmask(self.bitmask[0].numpy(), self.c.vocab_size) & self.c.emittable
            self._allowed = np.flatnonzero(bits).astype(np.int64)
            self._mask = bits
        return self._allowed

    def allowed_ids(self) -> np.ndarray:
        return self._fill()

    def mask(self, device: str):
        import torch

        self._fill()
        return torch.from_numpy(self._mask).to(device)

    def _dirty(self) -> None:
        self._allowed = None
        self._mask = None

    def accept_token(self, token_id: int) -> bool:
        ok = bool(self.m.accept_token(int(token_id)))
        if ok:
            self._dirty()
        return ok

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.m.rollback(num_tokens)
            self._dirty()

    def is_final(self) -> bool:
        return bool(self.m.is_completed()) if hasattr(self.m, "is_completed") else bool(self.m.is_terminated())

    def jump_forward(self) -> str:
        return self.m.find_jump_forward_string()


class XgrammarCompiled(CompiledConstraint):
    backend = "xgrammar"

    def __init__(self, constraint: Constraint, grammar, vocab_size: int, emittable) -> None:
        self.constraint = constraint
        self.grammar = grammar
        self.vocab_size = vocab_size
        self.emittable = emittable

    def nbytes(self) -> int:
        return int(self.grammar.memory_size_bytes) + self.vocab_size

    def matcher(self) -> Matcher:
        return XgrammarMatcher(self)


class XgrammarBackend(GrammarBackend):
    name = "xgrammar"
    kinds = ("regex", "schema", "grammar")

    def _compile(self, constraint: Constraint, ctx: TokenizerContext, **_):
        import xgrammar as xgr

        def make():
            info = xgr.TokenizerInfo.from_huggingface(
                ctx.tokenizer, vocab_size=ctx.vocab_size, stop_token_ids=[ctx.eos_token_id]
            )
            # xgrammar's own compile cache is unbounded by default: give it a share of the budget
            return xgr.GrammarCompiler(info, max_threads=2, cache_limit_bytes=CACHE_BUDGET_MB * 1024 * 1024 // 8)

        compiler = ctx.view("xgrammar", make)
        try:
            if constraint.kind == "regex":
                grammar = compiler.compile_regex(normalize_regex(constraint.text))
            elif constraint.kind == "schema":
                obj = constraint.schema_obj()
                ws = constraint.whitespace
                seps = (", ", ": ") if ws == "spaced" else (",", ":")
                grammar = compiler.compile_json_schema(
                    json.dumps(obj),
                    any_whitespace=ws == "flexible",
                    separators=None if ws == "flexible" else seps,
                    max_whitespace_cnt=1 if ws == "flexible" else None,
                    strict_mode=not constraint.spec,  # closed objects unless JSON Schema's reading is asked for
                )
            else:
                grammar = compiler.compile_grammar(constraint.text)
        except CfsmError:
            raise
        except Exception as exc:  # noqa: BLE001
            kind = "invalid_grammar" if constraint.kind == "grammar" else "unsupported_feature"
            raise CfsmError(kind, f"xgrammar cannot compile this {constraint.kind}: {native_message(exc)}") from exc
        return XgrammarCompiled(constraint, grammar, ctx.vocab_size, ctx.emittable)
