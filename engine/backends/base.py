"""The one interface every grammar backend implements, and the tokenizer context they
share. The decoding loop only talks to `Matcher`."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..constraint import Constraint
from ..tokens.vocab import TokenVocab, build_vocab


class TokenizerContext:
    """A tokenizer plus lazily built per-library views of it, shared by all compiles."""

    def __init__(self, tokenizer, model_vocab_size: int | None = None, eos_token_id: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.vocab: TokenVocab = build_vocab(tokenizer, model_vocab_size, eos_token_id)
        self.vocab_size = self.vocab.size
        self.eos_token_id = self.vocab.eos_token_id
        self._views: dict[str, Any] = {}
        # Tokens that may ever be emitted under a constraint: text tokens and EOS.
        # Some libraries admit special (empty-text) tokens inside strings; we never do.
        base = np.array([b is not None for b in self.vocab.token_bytes], dtype=bool)
        base[self.eos_token_id] = True
        self.emittable = base

    @property
    def fingerprint(self) -> str:
        return self.vocab.fingerprint

    def view(self, name: str, build) -> Any:
        if name not in self._views:
            self._views[name] = build()
        return self._views[name]


def unpack_bitmask(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    """int32 bitmask (xgrammar/llguidance layout, little-endian bits) -> bool array."""
    bits = np.unpackbits(np.ascontiguousarray(bitmask).view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


class Matcher(ABC):
    """Grammar state of one request; supports rollback for jump-forward re-tokenization."""

    backend: str

    @abstractmethod
    def allowed_ids(self) -> np.ndarray:
        """Sorted allowed token ids now (host side; EOS included where the match may end)."""

    @abstractmethod
    def mask(self, device: str):
        """Bool tensor over the vocabulary on `device`."""

    @abstractmethod
    def accept_token(self, token_id: int) -> bool: ...

    @abstractmethod
    def rollback(self, num_tokens: int) -> None: ...

    @abstractmethod
    def is_final(self) -> bool:
        """The output so far is a complete match (EOS allowed)."""

    @abstractmethod
    def jump_forward(self) -> str:
        """Characters forced from here on ('' when the next character is a choice)."""

    def allowed_count(self) -> int:
        return int(len(self.allowed_ids()))

    def allows_any(self, token_ids) -> bool:
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.size == 0:
            return False
        allowed = self.allowed_ids()
        pos = np.searchsorted(allowed, ids)
        pos[pos >= len(allowed)] = 0
        return bool(len(allowed) and (allowed[pos] == ids).any())

    def next_char_state(self, token_id: int) -> int | None:
        """Char-level state this token would lead to (None where the backend has none)."""
        return None

    def state_info(self) -> dict:
        """Ids the trace records (char-level state where the backend has one)."""
        return {"char_state": None, "token_state": None}


class StackMatcher(Matcher):
    """Matchers that keep one state per accepted token; rollback pops them."""

    stack: list

    def rollback(self, num_tokens: int) -> None:
        if num_tokens >= len(self.stack):
            raise ValueError("rollback past the start")
        if num_tokens > 0:
            del self.stack[-num_tokens:]


class CompiledConstraint(ABC):
    """A compiled constraint for one tokenizer; cheap to make matchers from."""

    backend: str = ""
    constraint: Constraint
    compile_seconds: float = 0.0
    warnings: list[str] | tuple = ()  # what this backend compiled but does not enforce (lenient only)

    @abstractmethod
    def matcher(self) -> Matcher: ...

    def nbytes(self) -> int:
        """Approximate memory this compiled constraint holds (host and device), for the
        byte-bounded compile cache; may grow as per-state caches fill during decoding."""
        return 256 * 1024

    def stats(self) -> dict:
        return {"backend": self.backend, "compile_seconds": round(self.compile_seconds, 4), "warnings": list(self.warnings)}


class GrammarBackend(ABC):
    name: str = ""
    kinds: tuple[str, ...] = ()

    def compile(self, constraint: Constraint, ctx: TokenizerContext, **opts) -> CompiledConstraint:
        from ..errors import CfsmError

        if constraint.kind not in self.kinds:
            raise CfsmError(
                "unsupported_feature",
                f"backend {self.name!r} does not support {constraint.kind} constraints "
                f"(it supports: {', '.join(self.kinds)})",
            )
        from .audit import audit

        t0 = time.perf_counter()
        warnings = audit(self.name, constraint)  # a known gap of this backend: refused unless lenient
        compiled = self._compile(constraint, ctx, **opts)
        compiled.compile_seconds = time.perf_counter() - t0
        compiled.warnings = warnings + (constraint.regex_warnings() if self.name in ("fsm", "outlines") else [])
        return compiled

    @abstractmethod
    def _compile(self, constraint: Constraint, ctx: TokenizerContext, **opts) -> CompiledConstraint: ...
