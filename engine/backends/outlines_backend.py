"""outlines-core: its Rust Index over the same regex (whitespace applied by our policy).
It has no jump-forward of its own, so the jump string comes from the shared compressed
FSM of that regex, walked over the text emitted so far.

outlines-core 0.2.x drops every token that leads from an accepting state to a
non-accepting one (`[0-9]+(\\.[0-9]+)?` refuses `1.5`). The adapter works around it: the
Index is built for `(R)` followed by an end marker (a private-use character no real token
contains, written only by one extra token id past the vocabulary), so no state inside R
is accepting for outlines-core; "may end here" is "the marker may follow", and EOS is
allowed exactly there. A token that only starts writing the marker (a byte token such as
`<0xF4>`) is not a way forward for the regex and is left out. Everything else is
outlines-core's own Index. (A regex that itself writes U+10FFFD right where it may end is
the one case this cannot tell apart.)"""

from __future__ import annotations

import pickle

import numpy as np

from ..constraint import Constraint
from ..errors import CfsmError
from ..lazy import lazy_module
from ..regex.compressed import compressed_of
from ..regex.dfa import CharDFA, normalize_regex
from ..tokens.bitmask import pack_ids, unpack
from .base import CompiledConstraint, GrammarBackend, Matcher, StackMatcher, TokenizerContext

outlines_core = lazy_module("outlines_core")
torch = lazy_module("torch")

END_MARKER = "\U0010fffd"
MARKER_BYTES = END_MARKER.encode("utf-8")


def token_groups(ctx: TokenizerContext) -> dict[bytes, list[int]]:
    """Token ids by their bytes, EOS and special tokens left out: what outlines-core's
    `Vocabulary` is built from."""
    groups: dict[bytes, list[int]] = {}
    for tid, b in enumerate(ctx.vocab.token_bytes):
        if b and tid != ctx.eos_token_id:
            groups.setdefault(b, []).append(tid)
    return groups


def _vocabulary(ctx: TokenizerContext):
    """outlines-core's vocabulary plus the end-marker token (id = vocabulary size), and the
    ids of tokens that end in the marker's first bytes; built once per tokenizer."""
    groups = token_groups(ctx)
    prefix_ids = set()
    for b, ids in groups.items():
        if MARKER_BYTES in b:
            raise CfsmError(
                "unsupported_model", "a token contains the outlines adapter's end marker U+10FFFD"
            )
        if any(b.endswith(MARKER_BYTES[:i]) for i in range(1, len(MARKER_BYTES))):
            prefix_ids.update(ids)
    groups[MARKER_BYTES] = [ctx.vocab_size]
    return outlines_core.Vocabulary(ctx.eos_token_id, groups), frozenset(prefix_ids)


class OutlinesMatcher(StackMatcher):
    backend = "outlines"

    def __init__(self, c: OutlinesCompiled) -> None:
        self.c = c
        # (index state, char state of our DFA or None, bytes of an unfinished character)
        self.stack: list[tuple[int, int | None, bytes]] = [
            (c.index.get_initial_state(), c.compressed.dfa.initial, b"")
        ]

    def allowed_ids(self) -> np.ndarray:
        state = self.stack[-1][0]
        got = self.c.allowed_cache.get(state)
        if got is None:
            ids = {
                t for t in (self.c.index.get_allowed_tokens(state) or []) if t < self.c.vocab_size
            }
            ids.discard(self.c.eos_token_id)
            ids -= {t for t in ids & self.c.marker_prefix_ids if self.c.only_marker_after(state, t)}
            if self.c.may_end(state):
                ids.add(self.c.eos_token_id)
            got = np.array(sorted(ids), dtype=np.int64)
            self.c.allowed_cache[state] = got
        return got

    def bitmask(self, device: str, vocab_size: int):
        """The state's row, cached per state on `device` (as fsm's are)."""
        key = (self.stack[-1][0], device)
        m = self.c.mask_cache.get(key)
        if m is None:
            m = torch.from_numpy(pack_ids(self.allowed_ids(), self.c.vocab_size)).to(device)
            self.c.mask_cache[key] = m
        return m

    def mask(self, device: str):
        return unpack(self.bitmask(device, self.c.vocab_size), self.c.vocab_size)

    def accept_token(self, token_id: int) -> bool:
        state, char_state, pending = self.stack[-1]
        if token_id == self.c.eos_token_id:
            return self.c.may_end(state)
        if token_id >= self.c.vocab_size:
            return False
        if token_id in self.c.marker_prefix_ids and self.c.only_marker_after(state, token_id):
            return False
        nxt = self.c.index.get_next_state(state, token_id)
        if nxt is None:
            return False
        # follow the same text in our DFA, incrementally, for the jump string
        buf = pending + (self.c.token_bytes[token_id] or b"")
        cut = len(buf)
        while cut > 0 and cut > len(buf) - 4:
            try:
                text = buf[:cut].decode("utf-8")
                break
            except UnicodeDecodeError:
                cut -= 1
        else:
            text, cut = "", 0
        if char_state is not None:
            char_state = self.c.compressed.dfa.walk(text, char_state)
        self.stack.append((nxt, char_state, buf[cut:]))
        return True

    def is_final(self) -> bool:
        return self.c.may_end(self.stack[-1][0])

    def jump_forward(self) -> str:
        _state, char_state, pending = self.stack[-1]
        if pending or char_state is None:
            return ""
        return self.c.compressed.jump_string(char_state)

    def state_info(self) -> dict:
        return {"char_state": None, "token_state": int(self.stack[-1][0])}


class OutlinesCompiled(CompiledConstraint):
    backend = "outlines"

    def __init__(
        self,
        constraint: Constraint,
        index,
        dfa: CharDFA,
        ctx: TokenizerContext,
        marker_prefix_ids: frozenset[int],
    ) -> None:
        self.constraint = constraint
        self.index = index
        self.compressed = compressed_of(dfa)
        self.vocab_size = ctx.vocab_size
        self.eos_token_id = ctx.eos_token_id
        self.token_bytes = ctx.vocab.token_bytes
        self.allowed_cache: dict[int, np.ndarray] = {}
        self.marker_prefix_ids = marker_prefix_ids
        self.mask_cache: dict = {}
        self._index_bytes: int | None = None

    def matcher(self) -> Matcher:
        return OutlinesMatcher(self)

    def only_marker_after(self, state: int, token_id: int) -> bool:
        """Does this token (ending in the first bytes of the end marker) lead only into
        the marker? Then it writes no text of the regex."""
        tb = self.token_bytes[token_id] or b""
        k = max(i for i in range(1, len(MARKER_BYTES)) if tb.endswith(MARKER_BYTES[:i]))
        nxt = self.index.get_next_state(state, token_id)
        return nxt is None or self._marker_only(nxt, MARKER_BYTES[k:])

    def _marker_only(self, state: int, rest: bytes) -> bool:
        for u in self.index.get_allowed_tokens(state) or []:
            if u >= self.vocab_size or u == self.eos_token_id:
                continue
            ub = self.token_bytes[u] or b""
            if ub == rest:
                continue
            if rest.startswith(ub) and self._marker_only(
                self.index.get_next_state(state, u), rest[len(ub) :]
            ):
                continue
            return False
        return True

    def may_end(self, state: int) -> bool:
        """The regex may end here: the end-marker token leads to the Index's final state
        (see the module doc; a regex that can write U+10FFFD itself leads elsewhere too)."""
        nxt = self.index.get_next_state(state, self.vocab_size)
        return nxt is not None and bool(self.index.is_final_state(nxt))

    def nbytes(self) -> int:
        if self._index_bytes is None:  # outlines-core reports no size: count its transitions once
            self._index_bytes = 24 * sum(len(v) for v in self.index.get_transitions().values())
        n = sum(
            a.nbytes for a in list(self.allowed_cache.values())
        )  # snapshots: decoding adds states
        return (
            self._index_bytes
            + n
            + sum(m.numel() * m.element_size() for m in list(self.mask_cache.values()))
        )


class OutlinesBackend(GrammarBackend):
    name = "outlines"
    kinds = ("regex", "schema")
    needs_automaton = True
    compiles_in_worker = True  # its Rust Index build cannot be interrupted

    def native_key(self, constraint: Constraint) -> str | None:
        """The Index is built from the regex alone (its automaton is loaded beside it)."""
        return constraint.regex()

    def warm(self, ctx: TokenizerContext) -> None:
        ctx.view("outlines+end-marker", lambda: _vocabulary(ctx))

    def dump_compiled(self, compiled: OutlinesCompiled) -> bytes:
        return pickle.dumps((compiled.index, sorted(compiled.marker_prefix_ids)))

    def load_compiled(
        self,
        payload: bytes,
        constraint: Constraint,
        ctx: TokenizerContext,
        dfa: CharDFA | None = None,
    ):

        index, marker_ids = pickle.loads(payload)
        return OutlinesCompiled(
            constraint, index, self.automaton(constraint, dfa), ctx, frozenset(marker_ids)
        )

    def compile_native(
        self, constraint: Constraint, ctx: TokenizerContext, dfa: CharDFA | None = None
    ):
        dfa = self.automaton(constraint, dfa)
        vocab, marker_prefix_ids = ctx.view("outlines+end-marker", lambda: _vocabulary(ctx))
        try:
            index = outlines_core.Index(
                f"({normalize_regex(constraint.regex() or '')}){END_MARKER}", vocab
            )
        except Exception as exc:  # noqa: BLE001
            raise CfsmError(
                "unsupported_feature", f"outlines-core cannot compile this regex: {exc}"
            ) from exc
        return OutlinesCompiled(constraint, index, dfa, ctx, marker_prefix_ids)
