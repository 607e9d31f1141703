"""The vocabulary's tokens prepared once per process for every token index over it:
split by character (regular tokens as a matrix of character ids by position, the irregular
partial-character ones apart), and by the character sets automata loop on (`loop_split`,
`runs_after_first`: a JSON string's content is the same set whatever the schema). UTF-8
helpers for tokens that end inside a character."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .vocab import TokenVocab


def utf8_len(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # continuation byte or invalid lead


def valid_partial(partial: bytes) -> bool:
    """Is `partial` a proper prefix of some valid UTF-8 encoding?"""
    if not partial:
        return True
    n = utf8_len(partial[0])
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


def concat_or_empty(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def complete_prefix(b: bytes) -> int:
    """Where the last character of `b` starts if it is cut short, else len(b)."""
    for back in range(1, min(4, len(b)) + 1):
        n = utf8_len(b[-back])
        if n:  # a lead byte (or ASCII)
            return len(b) - back if n > back else len(b)
    return len(b)


def chars_with_prefix(partial: bytes) -> int:
    """How many Unicode scalar values encode with this byte prefix (an upper bound is
    enough: it only decides whether "any other character" can still follow)."""
    n = utf8_len(partial[0])
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
    lengths: np.ndarray  # each row's length in characters (int16)
    irregular: list[int]
    cont_start: list[int]
    irregular_first: np.ndarray  # each irregular token's first byte
    # irregular tokens that are one cut-short character, valid as far as they go: allowed
    # wherever a character they may start is (no whole character before it)
    bare_partials: dict[int, bytes] = field(default_factory=dict)


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
        lens.astype(np.int16),
        irregular,
        cont_start,
        np.array([vocab.token_bytes[t][0] for t in irregular], dtype=np.uint8),
        {
            t: vocab.token_bytes[t]
            for t in irregular
            if complete_prefix(vocab.token_bytes[t]) == 0 and valid_partial(vocab.token_bytes[t])
        },
    )


@dataclass
class LoopSplit:
    """The regular tokens split by one set of looping characters (over the vocabulary's
    alphabet): those made only of them (`stay_ids`, sorted) and the others' rows, ordered
    by the column of their first character outside it (`leave_start[j]:leave_start[j+1]`
    leave at column j)."""

    stay_ids: np.ndarray
    leave_rows: np.ndarray
    leave_start: np.ndarray


_PER_SET_LOCK = threading.Lock()
SETS_KEPT = 32  # character sets kept per kind of split (~0.3 MB each for a 49k vocabulary)
_LOOP_SPLITS: dict[tuple[str, bytes], LoopSplit] = {}
_RUNS: dict[tuple[str, bytes], np.ndarray] = {}


def _per_set(cache: dict, fingerprint: str, in_set: np.ndarray, build: Callable):
    """`build()` once per process, vocabulary and character set (a bool per alphabet
    character), the oldest of SETS_KEPT dropped first; built outside the lock."""
    key = (fingerprint, hashlib.blake2b(np.packbits(in_set).tobytes()).digest())
    with _PER_SET_LOCK:
        got = cache.get(key)
    if got is None:
        got = build()
        with _PER_SET_LOCK:
            if len(cache) >= SETS_KEPT:
                cache.pop(next(iter(cache)))
            cache[key] = got
    return got


def loop_split(vt: VocabTokens, fingerprint: str, in_loop: np.ndarray) -> LoopSplit:
    """The split for `in_loop`, computed once per process: every JSON string's content
    loops on the same characters, whatever the schema."""
    return _per_set(_LOOP_SPLITS, fingerprint, in_loop, lambda: _split_by_loop(vt, in_loop))


def _split_by_loop(vt: VocabTokens, in_loop: np.ndarray) -> LoopSplit:
    inside = np.append(in_loop, False)  # index -1: past a token's end (rows ended by then)
    rows = np.arange(len(vt.regular_ids))
    stay, leave, cols = [], [], []
    for j, active in enumerate(vt.active):
        ended = rows >= active
        stay.append(rows[ended])
        rows = rows[~ended]
        ok = inside[vt.chars[j][rows]]
        leave.append(rows[~ok])
        cols.append(np.full(int((~ok).sum()), j, dtype=np.int32))
        rows = rows[ok]
    stay.append(rows)
    leave_rows = np.concatenate(leave) if leave else np.zeros(0, dtype=np.int64)
    leave_cols = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int32)
    stay_ids = np.sort(vt.regular_ids[np.concatenate(stay)].astype(np.int32))
    starts = np.searchsorted(leave_cols, np.arange(len(vt.active) + 1))
    return LoopSplit(stay_ids, leave_rows, starts)


def runs_after_first(vt: VocabTokens, fingerprint: str, in_set: np.ndarray) -> np.ndarray:
    """Per regular row, how many characters after its first are in `in_set` (a bool per
    alphabet character) before one is not: computed once per process and set (a string's
    content, a counted run of digits), shared by every automaton over the vocabulary."""
    return _per_set(_RUNS, fingerprint, in_set, lambda: _runs(vt, in_set))


def _runs(vt: VocabTokens, in_set: np.ndarray) -> np.ndarray:
    inside = np.append(in_set, False)
    run = np.zeros(len(vt.regular_ids), dtype=np.int16)
    rows = np.arange(len(vt.regular_ids))
    for j in range(1, len(vt.active)):
        rows = rows[rows < vt.active[j]]  # those with a character at column j
        rows = rows[inside[vt.chars[j][rows]]]
        run[rows] += 1
    return run
