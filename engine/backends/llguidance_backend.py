"""llguidance: regex, native JSON schema (separators by our whitespace policy) and Lark."""

from __future__ import annotations

import numpy as np

from ..constraint import Constraint
from ..errors import CfsmError, native_message
from ..lazy import lazy_module
from ..regex.dfa import normalize_regex
from ..tokens.text_tables import special_ids
from .audit import LLGUIDANCE_GAPS
from .base import (
    BitmaskMatcher,
    CompiledConstraint,
    GrammarBackend,
    Matcher,
    TokenizerContext,
    emittable_bits,
)
from .json_options import llguidance_json_overrides, llguidance_schema
from .llguidance_triggers import lark_for_plan

llg = lazy_module("llguidance")
llg_numpy = lazy_module("llguidance.numpy")

# llguidance's Earley parser refuses a row past `max_items_in_row` (2,000 by default) in the
# middle of a decode, after its mask allowed the token: an object with 700 optional
# properties makes a row of about 4 items per property once `{` is read (2,799 at 700).
# Its per-step bound (`step_max_items`, 50,000) still caps each mask's work; this lifts the
# row cap to what objects of up to ~5,000 properties need (2,000 properties: 1.7 ms a mask).
MAX_ITEMS_IN_ROW = 20_000


def parser_limits():
    """The limits every matcher and validation of this backend runs under."""
    return llg.LLParserLimits(max_items_in_row=MAX_ITEMS_IN_ROW)


class LlguidanceMatcher(BitmaskMatcher):
    backend = "llguidance"

    def __init__(self, c: LlguidanceCompiled) -> None:
        super().__init__()
        self.c = c
        self.m = llg.LLMatcher(c.tokenizer, c.grammar, log_level=0, limits=parser_limits())
        if self.m.is_error():
            raise CfsmError("invalid_grammar", f"llguidance: {self.m.get_error()}")
        self._buffer = np.full((1, (c.vocab_size + 31) // 32), -1, dtype=np.int32)

    def _fill_bitmask(self) -> np.ndarray:
        llg_numpy.fill_next_token_bitmask(self.m, self._buffer)
        return self._buffer[0]

    def _accept(self, token_id: int) -> bool:
        return self.m.try_consume_tokens([token_id]) == 1

    def _rollback(self, num_tokens: int) -> None:
        self.m.rollback(num_tokens)

    def refusal(self) -> str | None:
        if not self.m.is_error():
            return None
        return native_message(self.m.get_error().split("<state>")[0])

    def is_final(self) -> bool:
        return bool(self.m.is_accepting())

    def jump_forward(self) -> str:
        return self.m.compute_ff_bytes().decode("utf-8", errors="ignore")


class LlguidanceCompiled(CompiledConstraint):
    backend = "llguidance"

    def __init__(
        self, constraint: Constraint, tokenizer, grammar: str, vocab_size: int, emittable
    ) -> None:
        self.constraint = constraint
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.vocab_size = vocab_size
        self.emittable = emittable
        self.emittable_bits = emittable_bits(emittable)

    def matcher(self) -> Matcher:
        return LlguidanceMatcher(self)


class LlguidanceBackend(GrammarBackend):
    name = "llguidance"
    kinds = ("regex", "schema", "grammar")
    known_gaps = LLGUIDANCE_GAPS
    grammar_syntax = "Lark"
    exact_masks = False  # forced text only in its canonical tokenization

    def triggered_grammar(self, plan, opts, ctx: TokenizerContext) -> Constraint | None:
        """The plan as one Lark grammar with lazy lexemes (engine/backends/
        llguidance_triggers.py); None for what it cannot say as the engine's layer does: a
        thinking budget (its `max_tokens` drops the end marker instead of forcing it), a
        grammar answer, a special-token tag."""

        if special_ids(ctx, plan.tag_texts()):
            return None
        text = lark_for_plan(plan, opts)
        return None if text is None else Constraint("grammar", text)

    def check_grammar(self, text: str) -> None:
        msg = llg.LLMatcher.validate_grammar(llg.grammar_from("lark", text), limits=parser_limits())
        if msg:
            raise CfsmError("invalid_grammar", f"llguidance (Lark): {native_message(msg)}")

    compiles_in_worker = True

    @staticmethod
    def _tokenizer(ctx: TokenizerContext):
        """llguidance's tokenizer, built from the Hugging Face tokenizer's JSON as its
        `llguidance.hf.from_tokenizer` does (~1 s), so a compile worker, which has only
        that JSON, builds the same one."""

        def build():
            text = ctx.tokenizer_json()
            if text is None:
                raise CfsmError(
                    "unsupported_feature", "llguidance needs a fast (Rust) Hugging Face tokenizer"
                )
            return llg.LLTokenizer(text, n_vocab=ctx.vocab_size, eos_token=ctx.eos_token_id)

        return ctx.view("llguidance", build)

    def warm(self, ctx: TokenizerContext) -> None:
        self._tokenizer(ctx)

    def dump_compiled(self, compiled: LlguidanceCompiled) -> bytes:
        return compiled.grammar.encode("utf-8")

    def load_compiled(
        self, payload: bytes, constraint: Constraint, ctx: TokenizerContext, dfa=None
    ):
        """The worker validated the grammar against the same tokenizer: matchers are built
        from it here (llguidance's own parser limits bound each one's work)."""
        return LlguidanceCompiled(
            constraint, self._tokenizer(ctx), payload.decode("utf-8"), ctx.vocab_size, ctx.emittable
        )

    def compile_native(self, constraint: Constraint, ctx: TokenizerContext, dfa=None):
        tok = self._tokenizer(ctx)
        if constraint.kind == "regex":
            grammar = llg.LLMatcher.grammar_from_regex(normalize_regex(constraint.text))
        elif constraint.kind == "schema":
            obj = llguidance_schema(constraint)
            try:
                grammar = llg.LLMatcher.grammar_from_json_schema(
                    obj, overrides=llguidance_json_overrides(constraint)
                )
            except Exception as exc:  # noqa: BLE001
                raise CfsmError("invalid_schema", f"llguidance: {exc}") from exc
        else:
            grammar = llg.LLMatcher.grammar_from_lark(constraint.text)
        msg = llg.LLMatcher.validate_grammar(grammar, tok, limits=parser_limits())
        if msg:
            raise self.compile_error(constraint, msg)
        return LlguidanceCompiled(constraint, tok, grammar, ctx.vocab_size, ctx.emittable)
