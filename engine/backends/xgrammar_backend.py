"""xgrammar: regex, native JSON schema (separators by our whitespace policy) and EBNF."""

from __future__ import annotations

import json

import numpy as np

from ..constraint import Constraint
from ..errors import CfsmError, native_message
from ..lazy import lazy_module
from ..limits import CACHE_BUDGET_MB
from ..regex.dfa import normalize_regex
from ..schema import WHITESPACE_POLICIES
from ..tokens.text_tables import special_ids
from .audit import XGRAMMAR_GAPS
from .base import (
    BitmaskMatcher,
    CompiledConstraint,
    GrammarBackend,
    Matcher,
    TokenizerContext,
    emittable_bits,
)
from .json_options import xgrammar_json_options
from .xgrammar_triggers import structural_tag_ebnf

xgr = lazy_module("xgrammar")


class XgrammarMatcher(BitmaskMatcher):
    backend = "xgrammar"

    def __init__(self, c: XgrammarCompiled) -> None:
        super().__init__()
        self.c = c
        self.m = xgr.GrammarMatcher(c.grammar)
        self._buffer = xgr.allocate_token_bitmask(1, c.vocab_size)

    def _fill_bitmask(self) -> np.ndarray:
        self.m.fill_next_token_bitmask(self._buffer)
        return self._buffer[0].numpy()

    def _accept(self, token_id: int) -> bool:
        return bool(self.m.accept_token(token_id))

    def _rollback(self, num_tokens: int) -> None:
        self.m.rollback(num_tokens)

    def is_final(self) -> bool:
        return (
            bool(self.m.is_completed())
            if hasattr(self.m, "is_completed")
            else bool(self.m.is_terminated())
        )

    def jump_forward(self) -> str:
        return self.m.find_jump_forward_string()


class XgrammarCompiled(CompiledConstraint):
    backend = "xgrammar"

    def __init__(self, constraint: Constraint, grammar, vocab_size: int, emittable) -> None:
        self.constraint = constraint
        self.grammar = grammar
        self.vocab_size = vocab_size
        self.emittable = emittable
        self.emittable_bits = emittable_bits(emittable)

    def nbytes(self) -> int:
        return int(self.grammar.memory_size_bytes) + self.vocab_size

    def matcher(self) -> Matcher:
        return XgrammarMatcher(self)


class XgrammarBackend(GrammarBackend):
    name = "xgrammar"
    kinds = ("regex", "schema", "grammar")
    known_gaps = XGRAMMAR_GAPS
    grammar_syntax = "EBNF"

    def triggered_grammar(self, plan, opts, ctx: TokenizerContext) -> Constraint | None:
        """The plan as a structural tag (engine/backends/xgrammar_triggers.py), unless a tag
        is one special token (a structural tag's text tags cannot spell it)."""

        if special_ids(ctx, plan.tag_texts()):
            return None

        try:
            return Constraint("grammar", structural_tag_ebnf(plan, opts))
        except Exception as exc:  # noqa: BLE001 - the library's refusal, in one line
            why = native_message(exc)
            raise CfsmError(
                "unsupported_feature", f"xgrammar cannot build this structural tag: {why}"
            ) from None

    def check_grammar(self, text: str) -> None:
        try:
            xgr.Grammar.from_ebnf(text)
        except Exception as exc:  # noqa: BLE001 - the parser's message is the answer
            raise CfsmError("invalid_grammar", f"xgrammar (EBNF): {native_message(exc)}") from None

    compiles_in_worker = True

    @staticmethod
    def _info(ctx: TokenizerContext):
        """Our token bytes, as a raw vocabulary: xgrammar then reads every tokenizer family
        exactly as the other backends do (its own detection treats a prefix-space
        tokenizer's first token specially, while outputs here are continuations)."""
        return ctx.view(
            "xgrammar-info",
            lambda: xgr.TokenizerInfo(
                [b or b"" for b in ctx.vocab.token_bytes],
                xgr.VocabType.RAW,
                vocab_size=ctx.vocab_size,
                stop_token_ids=[ctx.eos_token_id],
                add_prefix_space=False,
            ),
        )

    def warm(self, ctx: TokenizerContext) -> None:
        """Its TokenizerInfo, and one small compile of each kind and whitespace policy as
        this adapter makes them: a process's first JSON-schema compile costs ~3.5 s of
        one-time setup inside xgrammar (8 ms afterwards)."""
        self.compile_native(Constraint("regex", "a"), ctx)
        self.compile_native(Constraint("grammar", 'root ::= "a"'), ctx)
        for ws in WHITESPACE_POLICIES:
            for spec in (False, True):
                self.compile_native(Constraint("schema", '{"type": "object"}', ws, spec=spec), ctx)

    def dump_compiled(self, compiled: XgrammarCompiled) -> bytes:
        return compiled.grammar.serialize_json().encode("utf-8")

    # carrying a compiled grammar back (serialize_json, then deserialize_json here) costs
    # about this much per byte of its memory: 0.19 s for the character regex's 1.3 MB
    CARRY_S_PER_BYTE = 1.4e-7
    # the repeat runs in the server, where nothing watches its time: only short compiles
    REPEAT_MAX_S = 0.25

    def repeat_in_server(self, compiled: XgrammarCompiled, seconds: float) -> bool:
        """A regex or grammar the worker compiled in under REPEAT_MAX_S, and faster than
        carrying it back would take, is compiled again in the server (the character regex:
        40 ms against 0.19 s); a longer one is carried, so that the compile's time limit
        still holds. Not a schema: a process's first JSON-schema compile pays ~3 s of
        xgrammar's one-time setup, which the server would then pay in-process."""
        carry_s = self.CARRY_S_PER_BYTE * int(compiled.grammar.memory_size_bytes)
        quick = seconds < min(carry_s, self.REPEAT_MAX_S)
        return compiled.constraint.kind != "schema" and quick

    def load_compiled(
        self, payload: bytes, constraint: Constraint, ctx: TokenizerContext, dfa=None
    ):
        grammar = xgr.CompiledGrammar.deserialize_json(payload.decode("utf-8"), self._info(ctx))
        return XgrammarCompiled(constraint, grammar, ctx.vocab_size, ctx.emittable)

    def _compiler(self, ctx: TokenizerContext):
        # xgrammar's own compile cache is unbounded by default: give it a share of the budget
        return ctx.view(
            "xgrammar",
            lambda: xgr.GrammarCompiler(
                self._info(ctx), max_threads=2, cache_limit_bytes=CACHE_BUDGET_MB * 1024 * 1024 // 8
            ),
        )

    def compile_native(self, constraint: Constraint, ctx: TokenizerContext, dfa=None):
        compiler = self._compiler(ctx)
        try:
            if constraint.kind == "regex":
                grammar = compiler.compile_regex(normalize_regex(constraint.text))
            elif constraint.kind == "schema":
                obj = constraint.schema_obj()
                grammar = compiler.compile_json_schema(
                    json.dumps(obj), **xgrammar_json_options(constraint)
                )
            else:
                grammar = compiler.compile_grammar(constraint.text)
        except CfsmError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.compile_error(constraint, exc) from exc
        return XgrammarCompiled(constraint, grammar, ctx.vocab_size, ctx.emittable)
