"""Token-level index over a character DFA: which vocabulary tokens each state allows.

Tokens are byte strings and may end (or start) in the middle of a UTF-8 character, so a
token-level state is (char state, pending bytes). States with no pending bytes keep the
char state's id; the rare pending states get ids after them, on demand.

The index is lazy: compiling only maps the vocabulary's characters to the DFA's character
classes (numpy, from a per-vocabulary table built once), and a state's allowed set is
computed the first time decoding reaches it (one gather per token position over the whole
vocabulary, no Python loop over tokens; ~1 ms). Decoding visits a few hundred states at
most, so a run never pays for the states it does not reach; device masks are cached per
state.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from ..lazy import lazy_module
from ..regex.dfa import CharDFA
from .vocab import TokenVocab

torch = lazy_module("torch")


def _utf8_len(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # continuation byte or invalid lead


def _valid_partial(partial: bytes) -> bool:
    """Is `partial` a proper prefix of some valid UTF-8 encoding?"""
    if not partial:
        return True
    n = _utf8_len(partial[0])
    if n <= 1 or len(partial) >= n:
        return False
    lo, hi = 0x80, 0xBF
    if partial[0] == 0xE0:
        lo = 0xA0
    elif partial[0] == 0xED:
        hi = 0x9F
    elif partial[0] == 0xF0:
        lo = 0x90
    elif partial[0] == 0xF4:
        hi = 0x8F
    if len(partial) > 1 and not (lo <= partial[1] <= hi):
        return False
    return all(0x80 <= b <= 0xBF for b in partial[2:])


def _chars_with_prefix(partial: bytes) -> int:
    """How many Unicode scalar values encode with this byte prefix (an upper bound is
    enough: it only decides whether "any other character" can still follow)."""
    n = _utf8_len(partial[0])
    remaining = n - len(partial)
    return 64**remaining


@dataclass
class VocabTokens:
    """The vocabulary split once for every index: regular tokens (whole UTF-8 text) as a
    matrix of character ids, longest first, and the irregular (partial-character) ones."""

    regular_ids: np.ndarray  # token ids, rows of `chars`
    chars: np.ndarray  # (max length, tokens) indices into `alphabet`, -1 past the end: by position
    alphabet: np.ndarray  # the distinct code points the vocabulary uses, sorted
    active: list[int]  # rows still running at each position
    irregular: list[int]
    cont_start: list[int]
    irregular_first: np.ndarray  # each irregular token's first byte


_VOCAB_TOKENS: dict[str, VocabTokens] = {}
_VOCAB_LOCK = threading.Lock()


def vocab_tokens(vocab: TokenVocab) -> VocabTokens:
    with _VOCAB_LOCK:
        got = _VOCAB_TOKENS.get(vocab.fingerprint)
        if got is None:
            got = _split_vocab(vocab)
            if len(_VOCAB_TOKENS) >= 4:
                _VOCAB_TOKENS.pop(next(iter(_VOCAB_TOKENS)))
            _VOCAB_TOKENS[vocab.fingerprint] = got
        return got


def _split_vocab(vocab: TokenVocab) -> VocabTokens:
    regular: list[tuple[int, str]] = []
    irregular: list[int] = []
    cont_start: list[int] = []
    for tid, b in enumerate(vocab.token_bytes):
        if not b:
            continue
        try:
            regular.append((tid, b.decode("utf-8")))
        except UnicodeDecodeError:
            irregular.append(tid)
            if 0x80 <= b[0] <= 0xBF:
                cont_start.append(tid)
    regular.sort(key=lambda x: -len(x[1]))
    maxlen = max(1, len(regular[0][1])) if regular else 1
    cps = np.full((len(regular), maxlen), -1, dtype=np.int64)
    lens = np.zeros(len(regular), dtype=np.int64)
    for row, (_tid, text) in enumerate(regular):
        lens[row] = len(text)
        cps[row, : len(text)] = [ord(ch) for ch in text]
    alphabet, inv = np.unique(cps[cps >= 0], return_inverse=True)
    chars = np.full(cps.shape, -1, dtype=np.int32)
    chars[cps >= 0] = inv
    chars = np.ascontiguousarray(chars.T)
    return VocabTokens(
        np.array([t for t, _ in regular], dtype=np.int64),
        chars,
        alphabet,
        [int((lens > j).sum()) for j in range(maxlen)],
        irregular,
        cont_start,
        np.array([vocab.token_bytes[t][0] for t in irregular], dtype=np.uint8),
    )


class TokenIndex:
    """Allowed tokens and transitions at token level for one (regex, vocabulary)."""

    # token positions after the first whose classes are kept looked up (int16 per token
    # each): most tokens are still being walked there; later ones go through `_lut`
    HEAD_COLUMNS = 3

    def __init__(self, dfa: CharDFA, vocab: TokenVocab) -> None:
        t0 = time.perf_counter()
        self.dfa = dfa
        self.vocab = vocab
        self.num_char_states = dfa.num_states
        self._pending: dict[tuple[int, bytes], int] = {}
        self._pending_keys: list[tuple[int, bytes]] = []
        self._allowed: dict[int, np.ndarray] = {}
        self._masks: dict[tuple[int, str], object] = {}
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
        if self.dfa.other_class is not None and self.dfa.other_class in row:
            return self._irregular.tolist()
        first = self._vt.irregular_first
        ok = np.zeros(256, dtype=bool)
        ok[:0x80] = True
        for k in row:
            if k < len(self._class_leads):
                ok[self._class_leads[k]] = True
        return self._irregular[ok[first]].tolist()

    def _compute(self, s: int) -> np.ndarray:
        """One char state's allowed ids: every regular token walked at once, column by
        column; the irregular ones byte by byte."""
        dead = self.num_char_states
        out = sorted(self.dfa.trans[s].items())
        groups = [self._by_first[self._first_start[k] : self._first_start[k + 1]] for k, _t in out]
        rows = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
        cur = np.repeat(np.array([t for _k, t in out], dtype=np.int32), [len(g) for g in groups])
        done = []
        for j, active in enumerate(self._active[1:], 1):
            if not len(rows):
                break
            ended = rows >= active  # rows are sorted longest first: these have ended, alive
            done.append(rows[ended])
            rows, cur = rows[~ended], cur[~ended]
            cls = (
                self._head[j - 1][rows]
                if j <= self.HEAD_COLUMNS
                else self._lut[self._vt.chars[j][rows]]
            )
            cur = self._table[cur, cls]
            alive = (
                cur != dead
            )  # only the survivors are walked on: after a character or two, few are
            rows, cur = rows[alive], cur[alive]
        ok = self._regular_ids[np.concatenate(done + [rows])]
        extra = [
            t
            for t in self._irregular_candidates(s)
            if self._walk(s, b"", self.vocab.token_bytes[t]) is not None
        ]
        ids = np.concatenate([ok, np.array(extra, dtype=np.int64)]) if extra else ok
        if s in self.dfa.finals:
            ids = np.append(ids, self.vocab.eos_token_id)
        return np.sort(ids.astype(np.int32))

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
        if not _valid_partial(partial):
            return False
        dfa = self.dfa
        row = dfa.trans[s]
        classes, listed = self._prefix_classes().get(partial, (set(), 0))
        if any(k in row for k in classes):
            return True
        if dfa.other_class is not None and dfa.other_class in row:
            return listed < _chars_with_prefix(partial)
        return False

    def _walk(self, s: int, pending: bytes, tok: bytes) -> tuple[int, bytes] | None:
        """Feed raw bytes from (state, pending); None when they leave the language."""
        buf = pending + tok
        i = 0
        dfa = self.dfa
        while i < len(buf):
            n = _utf8_len(buf[i])
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

    def mask(self, tstate: int, device: str = "cpu"):
        """Boolean mask over the vocabulary as a tensor on `device`, cached per state."""
        key = (tstate, device)
        m = self._masks.get(key)
        if m is None:
            m = torch.zeros(self.vocab.size, dtype=torch.bool)
            ids = self.allowed_ids(tstate)
            if len(ids):
                m[torch.from_numpy(ids.astype(np.int64))] = True
            m = m.to(device)
            self._masks[key] = m
        return m

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
        """Figures over the states indexed so far (the index is lazy: `char_states_indexed`
        of `char_states`; the allowed_* figures cover those only)."""
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
