"""The one interface every grammar backend implements, and the tokenizer context they
share. The decoding loop only talks to `Matcher`."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from copy import copy
from typing import Any

import numpy as np

from ..constraint import Constraint
from ..errors import CfsmError, native_message
from ..lazy import lazy_module
from ..regex.dfa import CharDFA, build_char_dfa
from ..tokens.bitmask import mask_row, pack_bool, popcount, unpack_bitmask
from ..tokens.continuation import ContinuationEncoder
from ..tokens.vocab import TokenVocab, build_vocab, vocab_from_bytes
from .audit import audit, place_of

torch = lazy_module("torch")


class TokenizerContext:
    """A tokenizer plus lazily built per-library views of it, shared by all compiles."""

    @classmethod
    def from_token_bytes(
        cls, token_bytes: list, eos_token_id: int, tokenizer_json: str | None = None
    ) -> TokenizerContext:
        """A context without the tokenizer itself (a compile worker's): enough for the
        backends that compile from token bytes (fsm, outlines, xgrammar) and, given the
        tokenizer's JSON, for llguidance."""

        self = cls.__new__(cls)
        self._setup(None, vocab_from_bytes(token_bytes, eos_token_id))
        self._tokenizer_json = tokenizer_json
        return self

    def __init__(
        self, tokenizer, model_vocab_size: int | None = None, eos_token_id: int | None = None
    ) -> None:
        self._setup(tokenizer, build_vocab(tokenizer, model_vocab_size, eos_token_id))

    def _setup(self, tokenizer, vocab: TokenVocab) -> None:
        self.tokenizer = tokenizer
        self.vocab: TokenVocab = vocab
        self.vocab_size = self.vocab.size
        self.eos_token_id = self.vocab.eos_token_id
        self._views: dict[str, Any] = {}
        # Tokens that may ever be emitted under a constraint: text tokens and EOS.
        # Some libraries admit special (empty-text) tokens inside strings; we never do.
        base = np.array([b is not None for b in self.vocab.token_bytes], dtype=bool)
        base[self.eos_token_id] = True
        self.emittable = base
        self._continuation = None
        self._tokenizer_json: str | None = None

    def tokenizer_json(self) -> str | None:
        """The Hugging Face fast tokenizer as JSON, padding and truncation off (what
        llguidance builds its tokenizer from, here and in a compile worker alike); None for
        a tokenizer that has none."""
        if self._tokenizer_json is None and self.tokenizer is not None:
            backend = getattr(self.tokenizer, "backend_tokenizer", None)
            if backend is None:
                return None
            backend = copy(backend)
            backend.no_padding()
            backend.no_truncation()
            self._tokenizer_json = backend.to_str()
        return self._tokenizer_json

    @property
    def continuation(self):
        """Encodes outputs as they stand inside a longer text (tokens/continuation.py)."""
        if self._continuation is None:
            self._continuation = ContinuationEncoder(self.tokenizer, self.vocab)
        return self._continuation

    @property
    def fingerprint(self) -> str:
        return self.vocab.fingerprint

    def view(self, name: str, build) -> Any:
        if name not in self._views:
            self._views[name] = build()
        return self._views[name]


class Matcher(ABC):
    """Grammar state of one request; supports rollback for jump-forward re-tokenization.

    The decoding loop only talks to this interface. Queries (`allowed_ids`, `mask`,
    `is_final`, `jump_forward`, `next_char_state`, `state_info`) never change the state;
    `accept_token` and `rollback` are the only mutators."""

    backend: str

    @abstractmethod
    def allowed_ids(self) -> np.ndarray:
        """Sorted allowed token ids now (host side; EOS included where the match may end).
        Does not change the state; may cache per state."""

    @abstractmethod
    def mask(self, device: str):
        """Bool tensor over the vocabulary on `device`, True where `allowed_ids` holds the
        id; or, where nearly every token is allowed (free text before a trigger), None
        (nothing masked) or a small int64 tensor of the only ids excluded (a ban list).
        Does not change the state; callers must not write into it (it may be cached)."""

    def bitmask(self, device: str, vocab_size: int):
        """The allowed tokens as one int32 bitmask row (engine.tokens.bitmask) on `device`,
        or None where nothing is masked: what a batch's step stacks, one row per request.
        Does not change the state; callers must not write into it (it may be cached). This
        default packs `mask` on the device; a backend that holds bitmasks returns its own."""
        return mask_row(self.mask(device), vocab_size)

    @abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token. Returns True and moves the state when the token is
        allowed; returns False and leaves the state exactly as it was when it is not.
        Never raises for a disallowed token."""

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last `num_tokens` accepted tokens (0 is a no-op). Raises ValueError
        when asked to go back past the start; the state is then unchanged."""

    def refusal(self) -> str | None:
        """Why the library refused the last token, where it says (a native parser past one
        of its limits, say); None when it gives no reason. Does not change the state."""
        return None

    @abstractmethod
    def is_final(self) -> bool:
        """The output so far is a complete match (EOS allowed). Does not change the state."""

    @abstractmethod
    def jump_forward(self) -> str:
        """Characters forced from here on ('' when the next character is a choice, or in the
        middle of a UTF-8 character). Does not change the state: the caller re-tokenizes
        the string and accepts the tokens it chooses."""

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

    def retokenize_from(self) -> int:
        """Output tokens before this index are never re-tokenized by a jump: they belong to
        an earlier segment (free text, a trigger) of a triggered constraint. 0 for a
        constraint over the whole output. Does not change the state."""
        return 0

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


class BitmaskMatcher(Matcher):
    """Native backends that fill an int32 token bitmask (xgrammar, llguidance): the
    allowed set and the mask are computed once per state, on first use."""

    c: Any  # the compiled constraint: .vocab_size, .emittable, .emittable_bits

    def __init__(self) -> None:
        self._allowed: np.ndarray | None = None
        self._row: np.ndarray | None = None
        self.depth = 0  # tokens accepted and not rolled back: how far rollback may go

    @abstractmethod
    def _fill_bitmask(self) -> np.ndarray:
        """The library's bitmask for the current state, as a 1-D int32 numpy array."""

    def _bits_row(self) -> np.ndarray:
        """The library's row for this state, less the tokens never emitted (packed)."""
        if self._row is None:
            bits = self.c.emittable_bits
            self._row = self._fill_bitmask()[: len(bits)] & bits
        return self._row

    def _fill(self) -> np.ndarray:
        if self._allowed is None:
            bits = unpack_bitmask(self._bits_row(), self.c.vocab_size)
            self._allowed = np.flatnonzero(bits).astype(np.int64)
        return self._allowed

    def _dirty(self) -> None:
        self._allowed = None
        self._row = None

    @abstractmethod
    def _accept(self, token_id: int) -> bool:
        """The library's accept; must leave the state unchanged when it refuses."""

    @abstractmethod
    def _rollback(self, num_tokens: int) -> None:
        """The library's rollback of 1..depth tokens."""

    def accept_token(self, token_id: int) -> bool:
        if not self._accept(int(token_id)):
            return False
        self.depth += 1
        self._dirty()
        return True

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > self.depth:
            raise ValueError("rollback past the start")
        if num_tokens > 0:
            self._rollback(num_tokens)
            self.depth -= num_tokens
            self._dirty()

    def allowed_ids(self) -> np.ndarray:
        return self._fill()

    def allowed_count(self) -> int:
        return popcount(self._bits_row())  # a step's count, without unpacking the row

    def mask(self, device: str):
        return torch.from_numpy(unpack_bitmask(self._bits_row(), self.c.vocab_size)).to(device)

    def bitmask(self, device: str, vocab_size: int):
        return torch.from_numpy(self._bits_row()).to(device)


def emittable_bits(emittable: np.ndarray) -> np.ndarray:
    """The tokens ever emitted under a constraint as one bitmask row (a native library's
    rows are cut to them with one AND)."""
    return pack_bool(emittable)


class CompiledConstraint(ABC):
    """A compiled constraint for one tokenizer; cheap to make matchers from."""

    backend: str = ""
    constraint: Constraint
    compile_seconds: float = 0.0
    triggered: bool = False  # a triggered plan (engine.triggers): the trace has segments
    warnings: (
        list[str] | tuple
    ) = ()  # what this backend compiled but does not enforce (lenient only)

    @abstractmethod
    def matcher(self) -> Matcher:
        """A fresh matcher at the start state. Thread-safe and cheap (many per compile);
        raises CfsmError when the library refuses to start one."""

    def check_output(
        self, matcher: Matcher, token_bytes: list, out_ids: list[int], finished: bool, reason: str
    ) -> tuple[bool | None, str, list[dict]] | None:
        """(valid, one line, segments) for a constraint that checks its outputs itself (a
        triggered one, segment by segment); None: the decoder checks the text against
        `constraint`. Pure."""
        return None

    def nbytes(self) -> int:
        """Approximate memory this compiled constraint holds (host and device), for the
        byte-bounded compile cache; may grow as per-state caches fill during decoding."""
        return 256 * 1024

    def stats(self) -> dict:
        return {
            "backend": self.backend,
            "compile_seconds": round(self.compile_seconds, 4),
            "warnings": list(self.warnings),
        }


class GrammarBackend(ABC):
    """A grammar library behind one interface. Class attributes say what it can do, so
    nothing outside `backends/` needs to know a backend by name."""

    name: str = ""
    kinds: tuple[str, ...] = ()
    # It decodes over our character DFA (built first, in the killable worker); without
    # one it cannot compile. Native backends only lose the FSM view.
    needs_automaton: bool = False
    # The grammar language it reads ("EBNF", "Lark"), None when it takes no grammars.
    grammar_syntax: str | None = None
    # Schema constructs the library is known to mishandle (checks from audit.py): refused
    # unless lenient, so nothing is silently dropped.
    known_gaps: tuple = ()
    # Its library compiles in native code that no thread can stop (the one isolation flag):
    # the compile cache runs `compile_native` in a killable worker process and sends back
    # `dump_compiled`'s payload; benchmarks that feed it many schemas fork a child per compile.
    compiles_in_worker: bool = False
    # Its masks are exactly the tokens whose text the constraint allows (the differential
    # tests compare every such backend token for token). False for a library that also
    # drops non-canonical tokenizations of forced text (llguidance): its sets are subsets.
    exact_masks: bool = True

    def compile(
        self,
        constraint: Constraint,
        ctx: TokenizerContext,
        worker=None,
        dfa: CharDFA | None = None,
    ) -> CompiledConstraint:
        """Compile for `ctx`'s tokenizer. Pure (no shared state is changed except the
        tokenizer context's per-library views); raises CfsmError with a kind on any input
        it cannot enforce, never a library exception. With `worker` ((name, constraint,
        dfa) -> payload, the compile cache's killable processes), a backend that
        `compiles_in_worker` runs its library there, within the compile's time and memory
        limits, and loads the result here. `dfa`: the constraint's character automaton when
        the caller has it (a backend that `needs_automaton` builds it otherwise)."""

        if constraint.kind not in self.kinds:
            raise CfsmError(
                "unsupported_feature",
                f"backend {self.name!r} does not support {constraint.kind} constraints "
                f"(it supports: {', '.join(self.kinds)})",
            )

        t0 = time.perf_counter()
        warnings = audit(self, constraint)  # a known gap of this backend: refused unless lenient
        payload = None
        if worker is not None and self.compiles_in_worker:
            payload = worker(self.name, constraint, dfa)
        if payload is not None:
            compiled = self.load_compiled(payload, constraint, ctx, dfa)
        else:  # no worker, or one that found repeating the compile here cheaper than carrying it
            compiled = self.compile_native(constraint, ctx, dfa)
        compiled.compile_seconds = time.perf_counter() - t0
        regex_warnings = constraint.regex_warnings() if self.needs_automaton else []
        compiled.warnings = warnings + regex_warnings
        return compiled

    def native_key(self, constraint: Constraint) -> str | None:
        """What the library's own compile reads of `constraint`, where that is less than
        the whole of it: constraints with the same key get the same payload, so the compile
        cache builds it once (schemas that differ only in titles or descriptions lower to
        one regex). None, the default: the whole constraint, nothing shared. Changes
        nothing; may raise CfsmError for a constraint that cannot compile."""
        return None

    @abstractmethod
    def compile_native(
        self, constraint: Constraint, ctx: TokenizerContext, dfa: CharDFA | None = None
    ) -> CompiledConstraint:
        """The library's own compile, in this process (the server, or a compile worker that
        then sends `dump_compiled`'s payload); `compile` wraps it with the checks every
        backend shares. Changes no state of the backend. Raises CfsmError (use
        `compile_error` for a library exception)."""

    def warm(self, ctx: TokenizerContext) -> None:
        """Build this library's per-tokenizer setup (once per process; outside any
        compile's time limit). Most backends have none worth doing ahead."""
        return None

    def dump_compiled(self, compiled: CompiledConstraint) -> bytes:
        """What a worker sends back for `load_compiled` (backends that compile in workers)."""
        raise NotImplementedError(f"{self.name} does not compile in a worker")

    def repeat_in_server(self, compiled: CompiledConstraint, seconds: float) -> bool:
        """Asked in a worker after a compile that took `seconds` and stayed within the time
        and memory limits: True when compiling again in the server costs less than carrying
        the result back (the worker has then shown the compile to be bounded; it sends no
        payload). Pure; never raises. Most backends always carry."""
        return False

    def load_compiled(
        self,
        payload: bytes,
        constraint: Constraint,
        ctx: TokenizerContext,
        dfa: CharDFA | None = None,
    ) -> CompiledConstraint:
        """The compiled constraint from a worker's payload, for this process's `ctx`."""
        raise NotImplementedError(f"{self.name} does not compile in a worker")

    def triggered_grammar(self, plan, opts, ctx: TokenizerContext) -> Constraint | None:
        """A triggered plan (engine.triggers.plan) as one grammar this library finds the
        triggers of itself (xgrammar: a structural tag), compiled like any grammar; None
        where the library has no such machinery or cannot express the plan: the engine's
        trigger layer then runs the plan over this backend's per-segment matchers. Pure;
        raises CfsmError for a plan it refuses."""
        return None

    def check_grammar(self, text: str) -> None:
        """Parse a grammar as this backend will, without a tokenizer (cheap enough for
        validation while typing). Raises CfsmError when it does not parse, or when this
        backend takes no grammars."""

        raise CfsmError("unsupported_feature", f"backend {self.name!r} does not take grammars")

    def compile_error(self, constraint: Constraint, exc: BaseException | str):
        """A library's refusal as our error: a grammar that does not parse is
        `invalid_grammar`, anything else the library cannot compile `unsupported_feature`."""

        kind = "invalid_grammar" if constraint.kind == "grammar" else "unsupported_feature"
        what, msg = constraint.kind, native_message(exc)
        if what == "schema":
            msg += place_of(constraint.schema_obj(), msg)
        return CfsmError(kind, f"{self.name} cannot compile this {what}: {msg}")

    @staticmethod
    def automaton(constraint: Constraint, dfa: CharDFA | None) -> CharDFA:
        """The character DFA a regex-path backend decodes over (built here when the
        caller has none, e.g. outside the compile cache)."""
        if dfa is not None:
            return dfa

        return build_char_dfa(constraint.regex() or "", max_chars=constraint.max_regex_chars)
