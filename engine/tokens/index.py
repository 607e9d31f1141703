"""Token-level index over a character DFA: which vocabulary tokens each state allows.

Tokens are byte strings and may end (or start) in the middle of a UTF-8 character, so a
token-level state is (char state, pending bytes). States with no pending bytes keep the
char state's id; the rare pending states get ids after them, on demand.

The index is lazy: compiling only maps the vocabulary's characters to the DFA's character
classes (numpy, from a per-vocabulary table built once), and a state's allowed set is
computed the first time decoding reaches it (one gather per token position over the
tokens still alive, no Python loop over tokens; tokens that run through a string's
content or a counted run are split once per process: vocab_split.py). Decoding visits a
few hundred states at most, so a run never pays for the states it does not reach; device
masks are cached per state.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..lazy import lazy_module
from ..regex.dfa import CharDFA
from .bitmask import pack_ids, unpack
from .vocab import TokenVocab
from .vocab_split import (
    LoopSplit,
    chars_with_prefix,
    complete_prefix,
    concat_or_empty,
    loop_split,
    runs_after_first,
    utf8_len,
    valid_partial,
    vocab_tokens,
)

torch = lazy_module("torch")


class TokenIndex:
    """Allowed tokens and transitions at token level for one (regex, vocabulary)."""

    # token positions after the first whose classes are kept looked up (int16 per token
    # each): most tokens are still being walked there; later ones go through `_lut`
    HEAD_COLUMNS = 3
    # a state whose self-loop this many tokens start in goes through the shared loop split
    WIDE_LOOP = 2048

    def __init__(self, dfa: CharDFA, vocab: TokenVocab) -> None:
        t0 = time.perf_counter()
        self.dfa = dfa
        self.vocab = vocab
        self.num_char_states = dfa.num_states
        self._pending: dict[tuple[int, bytes], int] = {}
        self._pending_keys: list[tuple[int, bytes]] = []
        self._allowed: dict[int, np.ndarray] = {}
        self._masks: dict[tuple[int, str], object] = {}
        self._irregular_by_row: dict[tuple, np.ndarray] = {}
        self._chains: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}
        self._ids_lock = (
            threading.Lock()
        )  # the decode thread and a page's check may add pending states
        self._prepare_tokens()
        self.build_seconds = time.perf_counter() - t0

    # ---------------------------------------------------------------- preparation
    def _prepare_tokens(self) -> None:
        """Character classes of every regular token (a lookup over the vocabulary's
        alphabet, no loop over tokens) and the DFA as a dense table."""
        vt = vocab_tokens(self.vocab)
        dfa = self.dfa
        n, c = dfa.num_states, len(dfa.classes)
        dead_class = c
        other = dfa.other_class if dfa.other_class is not None else dead_class
        lut = np.full(len(vt.alphabet) + 1, other, dtype=np.int32)
        lut[-1] = dead_class  # index -1: past the token's end (never read: rows are inactive there)
        listed = np.array([ord(ch) for ch in dfa.char_class], dtype=np.int64)
        if len(listed):
            pos = np.searchsorted(vt.alphabet, listed)
            pos_ok = pos < len(vt.alphabet)
            hit = np.zeros(len(listed), dtype=bool)
            hit[pos_ok] = vt.alphabet[pos[pos_ok]] == listed[pos_ok]
            lut[pos[hit]] = np.array(list(dfa.char_class.values()), dtype=np.int32)[hit]
        # the class of each alphabet character: a token's classes are looked up through it
        # per column when a state is computed, never kept per token (that copy of the
        # vocabulary's characters was 7.7 MB for every compiled constraint)
        self._lut = lut.astype(np.int16 if c < 32767 else np.int32)
        # regular tokens grouped by the class of their first character: a state starts its
        # walk from the groups of its outgoing classes only, not from the whole vocabulary
        first = self._lut[vt.chars[0]] if vt.chars.shape[1] else np.zeros(0, dtype=np.int16)
        self._by_first = np.argsort(first, kind="stable").astype(np.int32)
        # the next few columns, where most tokens are still alive, are kept looked up
        self._head = self._lut[vt.chars[1 : 1 + self.HEAD_COLUMNS]]
        self._first_start = np.searchsorted(first[self._by_first], np.arange(c + 2))
        self._vt = vt
        self._regular_ids = vt.regular_ids
        self._active = vt.active
        self._irregular = np.array(vt.irregular, dtype=np.int64)
        self._cont_start = vt.cont_start
        # the UTF-8 lead bytes of each class's characters: an irregular token can only be
        # allowed where its first byte starts a character some outgoing class holds
        self._class_leads = [
            np.unique(
                np.frombuffer(
                    bytes(ch.encode("utf-8")[0] for ch in chars if ord(ch) >= 0x80) or b"",
                    dtype=np.uint8,
                )
            )
            for chars in dfa.classes
        ]
        table = np.full((n + 1, c + 1), n, dtype=np.int32)  # row/col n = dead
        for s, row in enumerate(dfa.trans):
            for k, t in row.items():
                table[s, k] = t
        self._table = table

    def _irregular_candidates(self, s: int) -> list[int]:
        """Irregular tokens worth walking from `s`: those starting with ASCII (walked
        character by character) or with a lead byte some outgoing class can continue."""
        row = self.dfa.trans[s]
        first = self._vt.irregular_first
        ok = np.zeros(256, dtype=bool)
        if self.dfa.other_class is not None and self.dfa.other_class in row:
            ok[:] = True
        ok[0x80:0xC0] = False  # a continuation byte never starts a token from a char state
        ok[:0x80] = True
        for k in row:
            if k < len(self._class_leads):
                ok[self._class_leads[k]] = True
        return self._irregular[ok[first]].tolist()

    def _compute(self, s: int) -> np.ndarray:
        """One char state's allowed ids: every regular token walked at once, column by
        column; where a token's characters run through a wide self-loop (a string's
        content) the loop's shared split answers for them (`loop_split`); the irregular
        tokens byte by byte."""
        sp = self._wide_loop(s)
        if sp is not None:
            ok = self._compute_looping(s, sp)
        else:
            ok = self._regular_ids[self._compute_walk(s)]
        extra = self._irregular_allowed(s)
        ids = np.concatenate([ok, extra]) if len(extra) else ok
        if s in self.dfa.finals:
            ids = np.append(ids, self.vocab.eos_token_id)
        marks = np.zeros(self.vocab.size, dtype=bool)  # sorted by marking: no sort of ~49k
        marks[ids] = True
        return np.flatnonzero(marks).astype(np.int32)

    def _wide_loop(self, s: int) -> LoopSplit | None:
        """The loop split of `s` when at least WIDE_LOOP tokens start in its self-loop."""
        loops = [k for k, t in self.dfa.trans[s].items() if t == s]
        starts = sum(int(self._first_start[k + 1] - self._first_start[k]) for k in loops)
        if starts < self.WIDE_LOOP:
            return None
        return loop_split(self._vt, self.vocab.fingerprint, self._in_classes(loops))

    def _in_classes(self, classes: list[int]) -> np.ndarray:
        """Which of the vocabulary's alphabet characters fall in `classes` (a bool each):
        what the shared splits are keyed by, whatever this automaton numbers them."""
        member = np.zeros(len(self.dfa.classes) + 1, dtype=bool)
        member[classes] = True
        return member[self._lut[:-1]]

    def _compute_walk(self, s: int) -> np.ndarray:
        """Rows of the regular tokens allowed from `s`, walked from their first character;
        those whose first character enters a wide loop join the walk where they leave it."""
        by_target: dict[int, list[np.ndarray]] = {}
        for k, t in sorted(self.dfa.trans[s].items()):
            by_target.setdefault(t, []).append(
                self._by_first[self._first_start[k] : self._first_start[k + 1]]
            )
        walk_rows, walk_cur, direct, join_rows, join_cur, join_cols = [], [], [], [], [], []
        for t, groups in by_target.items():
            g = np.concatenate(groups)
            chain = self._chain(t) if len(g) >= self.WIDE_LOOP // 8 else None
            if chain is None:
                walk_rows.append(g)
                walk_cur.append(np.full(len(g), t, dtype=np.int32))
                continue
            states, run = chain
            run, rest = run[g], self._vt.lengths[g] - 1
            m = len(states) - 1
            ends = (run >= rest) & (rest <= m)  # every later character runs down the chain
            direct.append(g[ends])
            c = np.minimum(run[~ends], m)  # where the chain is left (or ends): walked on
            join_rows.append(g[~ends])
            join_cur.append(states[c])
            join_cols.append(c + 1)
        joins = None
        if join_rows:
            cols = np.concatenate(join_cols)
            order = np.argsort(cols, kind="stable")
            starts = np.searchsorted(cols[order], np.arange(len(self._active) + 1))
            joins = (np.concatenate(join_rows)[order], np.concatenate(join_cur)[order], starts)
        rows, cur = concat_or_empty(walk_rows, np.int64), concat_or_empty(walk_cur, np.int32)
        rows = self._walk_columns(rows, cur, 1, joins)
        return np.concatenate(direct + [rows])

    def _chain(self, t: int) -> tuple[np.ndarray, np.ndarray] | None:
        """From `t`, the states its main character set leads through one character at a
        time (a loop: `t` again and again; a counted run: t, t+1, ...) and each row's run
        of that set after its first character (`runs_after_first`). None for a short one."""
        got = self._chains.get(t)
        if got is not None or t in self._chains:
            return got
        row = self.dfa.trans[t]
        mass: dict[int, int] = {}
        for k, nxt in row.items():
            mass[nxt] = mass.get(nxt, 0) + int(self._first_start[k + 1] - self._first_start[k])
        got = None
        if mass:
            nxt = max(mass, key=mass.get)
            cls = [k for k, n in row.items() if n == nxt]
            states = [t] * len(self._active) if nxt == t else self._follow(t, cls)
            if mass[nxt] >= self.WIDE_LOOP // 8 and len(states) > 1:
                run = runs_after_first(self._vt, self.vocab.fingerprint, self._in_classes(cls))
                got = (np.array(states, dtype=np.int32), run)
        self._chains[t] = got
        return got

    def _follow(self, t: int, cls: list[int]) -> list[int]:
        """t and the states `cls` lead to one after another, while they agree."""
        states = [t]
        while len(states) < len(self._active):
            row = self.dfa.trans[states[-1]]
            nxt = {row.get(k) for k in cls}
            if len(nxt) != 1 or None in nxt:
                break
            states.append(nxt.pop())
        return states

    def _compute_looping(self, s: int, sp: LoopSplit) -> np.ndarray:
        """Allowed regular ids of a state whose self-loop most tokens start in (`sp`, its
        split): the tokens made only of looping characters are allowed as a shared set;
        only the others are walked, from where they leave the loop."""
        cur = np.full(len(sp.leave_rows), s, dtype=np.int32)
        rows = self._walk_columns(
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int32),
            0,
            (sp.leave_rows, cur, sp.leave_start),
        )
        return np.concatenate([sp.stay_ids, self._regular_ids[rows]])

    def _walk_columns(self, rows, cur, start: int, joins=None) -> np.ndarray:
        """Walk regular token rows from column `start` on, their states in `cur`; rows
        alive at their end are allowed. `joins` = (rows, states, starts): more rows, ordered
        by the column they join at (`starts[j]:starts[j+1]` step column j first)."""
        dead = self.num_char_states
        done = []
        for j in range(start, len(self._active)):
            if len(rows):
                ended = rows >= self._active[j]  # sorted longest first: these ended alive
                done.append(rows[ended])
                rows, cur = rows[~ended], cur[~ended]
                cur = self._table[cur, self._classes_at(j, rows)]
                alive = cur != dead  # after a character or two, few are walked on
                rows, cur = rows[alive], cur[alive]
            if joins is not None:
                jr, jc, starts = joins
                joining, states = jr[starts[j] : starts[j + 1]], jc[starts[j] : starts[j + 1]]
                if len(joining):
                    step = self._table[states, self._classes_at(j, joining)]
                    alive = step != dead
                    rows = np.concatenate([rows, joining[alive]])
                    cur = np.concatenate([cur, step[alive]])
            if not len(rows) and (joins is None or joins[2][j + 1] == len(joins[0])):
                break
        return np.concatenate(done + [rows])

    def _classes_at(self, j: int, rows: np.ndarray) -> np.ndarray:
        if 1 <= j <= self.HEAD_COLUMNS:
            return self._head[j - 1][rows]
        return self._lut[self._vt.chars[j][rows]]

    def _irregular_allowed(self, s: int) -> np.ndarray:
        """Irregular token ids allowed from `s`. What a token does inside the state's
        self-loop depends only on which classes loop and which leave (shared by a schema's
        string states, `_irregular_in_loop`); the tokens that leave it are walked."""
        row = self.dfa.trans[s]
        loops = frozenset(k for k, t in row.items() if t == s)
        stay_ok, leaving = self._irregular_in_loop(s, loops)
        walked = [t for t in leaving if self._walk(s, b"", self.vocab.token_bytes[t]) is not None]
        return np.concatenate([stay_ok, np.array(walked, dtype=np.int32)]) if walked else stay_ok

    def _irregular_in_loop(self, s: int, loops: frozenset) -> tuple[np.ndarray, list[int]]:
        """(ids whose whole characters loop and whose last partial character may go on,
        ids with a character outside the loop), cached by the loop and the outgoing classes
        (all that decides the first part). Where any other character may come, a bare
        partial character is allowed unless the automaton lists every character it starts
        (`_listed_prefixes`), so those are not walked one by one."""
        row = self.dfa.trans[s]
        key = (loops, frozenset(row))
        got = self._irregular_by_row.get(key)
        if got is not None:
            return got
        other = self.dfa.other_class
        anything = other is not None and other in row
        bare = self._vt.bare_partials if anything else {}
        full = self._listed_prefixes() if anything else set()
        ok, leaving = [t for t, b in bare.items() if b not in full], []
        for t in self._irregular_candidates(s):
            b = self.vocab.token_bytes[t]
            if t in bare and b not in full:
                continue
            cut = complete_prefix(b)
            try:
                text = b[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue  # an invalid byte inside: never allowed
            if any(self.dfa.char_class.get(ch, other) not in loops for ch in text):
                leaving.append(t)
            elif self._partial_viable(s, b[cut:]):
                ok.append(t)
        got = self._irregular_by_row[key] = (np.array(sorted(ok), dtype=np.int32), leaving)
        return got

    def _listed_prefixes(self) -> set[bytes]:
        """Partial characters whose every completion the automaton lists in some class."""
        full = getattr(self, "_full_prefixes", None)
        if full is None:
            table = self._prefix_classes()
            full = {p for p, (_k, n) in table.items() if n >= chars_with_prefix(p)}
            self._full_prefixes = full
        return full

    # ---------------------------------------------------------------- walking
    def _prefix_classes(self) -> dict[bytes, tuple[set[int], int]]:
        """UTF-8 proper prefix -> (classes of listed chars with it, how many chars)."""
        table = getattr(self, "_prefix_table", None)
        if table is None:
            table = {}
            for ch, k in self.dfa.char_class.items():
                enc = ch.encode("utf-8")
                for cut in range(1, len(enc)):
                    classes, count = table.get(enc[:cut], (set(), 0))
                    classes.add(k)
                    table[enc[:cut]] = (classes, count + 1)
            self._prefix_table = table
        return table

    def _partial_viable(self, s: int, partial: bytes) -> bool:
        if not valid_partial(partial):
            return False
        dfa = self.dfa
        row = dfa.trans[s]
        classes, listed = self._prefix_classes().get(partial, (set(), 0))
        if any(k in row for k in classes):
            return True
        if dfa.other_class is not None and dfa.other_class in row:
            return listed < chars_with_prefix(partial)
        return False

    def _walk(self, s: int, pending: bytes, tok: bytes) -> tuple[int, bytes] | None:
        """Feed raw bytes from (state, pending); None when they leave the language."""
        buf = pending + tok
        i = 0
        dfa = self.dfa
        while i < len(buf):
            n = utf8_len(buf[i])
            if n == 0:
                return None
            if i + n > len(buf):
                partial = buf[i:]
                return (s, partial) if self._partial_viable(s, partial) else None
            try:
                ch = buf[i : i + n].decode("utf-8")
            except UnicodeDecodeError:
                return None
            nxt = dfa.step(s, ch)
            if nxt is None:
                return None
            s = nxt
            i += n
        return (s, b"")

    # ---------------------------------------------------------------- token states
    def state_id(self, char_state: int, pending: bytes = b"") -> int:
        if not pending:
            return char_state
        key = (char_state, pending)
        sid = self._pending.get(key)
        if sid is None:
            with self._ids_lock:
                sid = self._pending.get(key)
                if sid is None:
                    sid = self.num_char_states + len(self._pending_keys)
                    self._pending_keys.append(key)
                    self._pending[key] = sid
        return sid

    def split(self, tstate: int) -> tuple[int, bytes]:
        if tstate < self.num_char_states:
            return tstate, b""
        return self._pending_keys[tstate - self.num_char_states]

    def index_ahead(self, budget_s: float, max_bytes: int) -> int:
        """Index char states before decoding needs them, breadth first from the start,
        until every one is done or `budget_s` or `max_bytes` (of allowed ids) is spent: a
        first visit otherwise stalls a decode step, and every sequence batched with it, for
        0.1-10 ms. Changes only the cache; returns how many states are indexed."""
        t0 = time.perf_counter()
        seen, order, held = {self.dfa.initial}, [self.dfa.initial], 0
        for s in order:
            if time.perf_counter() - t0 > budget_s or held > max_bytes:
                break
            held += self.allowed_ids(s).nbytes
            for t in self.dfa.trans[s].values():
                if t not in seen:
                    seen.add(t)
                    order.append(t)
        return sum(1 for s in list(self._allowed) if s < self.num_char_states)

    @property
    def initial(self) -> int:
        return self.dfa.initial

    def is_final(self, tstate: int) -> bool:
        s, pending = self.split(tstate)
        return not pending and s in self.dfa.finals

    def next_state(self, tstate: int, token_id: int) -> int | None:
        if token_id == self.vocab.eos_token_id:
            return tstate if self.is_final(tstate) else None
        if token_id < 0 or token_id >= self.vocab.size:
            return None
        tok = self.vocab.token_bytes[token_id]
        if not tok:
            return None
        s, pending = self.split(tstate)
        res = self._walk(s, pending, tok)
        if res is None:
            return None
        return self.state_id(*res)

    def allowed_ids(self, tstate: int) -> np.ndarray:
        """Sorted allowed token ids (EOS included where the match may end); computed the
        first time a state is asked for, then kept."""
        got = self._allowed.get(tstate)
        if got is None and tstate < self.num_char_states:
            got = self._allowed[tstate] = self._compute(tstate)
        elif got is None:
            s, pending = self.split(tstate)
            ids = [
                t
                for t in self._cont_start
                if self._walk(s, pending, self.vocab.token_bytes[t]) is not None
            ]
            got = np.array(sorted(ids), dtype=np.int32)
            self._allowed[tstate] = got
        return got

    def bitmask(self, tstate: int, device: str = "cpu"):
        """The state's allowed tokens as an int32 bitmask row (engine.tokens.bitmask) on
        `device`, cached per state: a batch's step stacks these rows as they are."""
        key = (tstate, device)
        m = self._masks.get(key)
        if m is None:
            m = torch.from_numpy(pack_ids(self.allowed_ids(tstate), self.vocab.size)).to(device)
            self._masks[key] = m
        return m

    def mask(self, tstate: int, device: str = "cpu"):
        """Boolean mask over the vocabulary as a tensor on `device` (unpacked from the
        cached row: a view that combines masks, not the decoding step)."""
        return unpack(self.bitmask(tstate, device), self.vocab.size)

    def nbytes(self) -> int:
        """Memory held (host arrays and device masks), for the byte-bounded caches."""
        # snapshots: the decode thread may add states while this runs
        n = (
            sum(a.nbytes for a in list(self._allowed.values()))
            + self._table.nbytes
            + self._lut.nbytes
            + self._by_first.nbytes
            + self._head.nbytes
        )
        n += sum(m.numel() * m.element_size() for m in list(self._masks.values()))
        return n + 120 * (len(self._pending) + len(self._allowed) + len(self._masks))

    def stats(self) -> dict:
        """Figures over the states indexed so far (`char_states_indexed` of `char_states`:
        those `index_ahead` reached, and those decoding has visited; the allowed_* figures
        cover those only)."""
        counts = [len(self._allowed[s]) for s in list(self._allowed) if s < self.num_char_states]
        return {
            "vocab_size": self.vocab.size,
            "char_states_indexed": len(counts),
            "char_states": self.num_char_states,
            "allowed_total": int(sum(counts)),
            "allowed_max": int(max(counts, default=0)),
            "allowed_mean": round(float(np.mean(counts)) if counts else 0.0, 1),
            "single_token_states": int(sum(1 for c in counts if c == 1)),
            "build_seconds": round(self.build_seconds, 4),
        }
