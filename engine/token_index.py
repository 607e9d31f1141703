"""Token-level index over a character DFA: which vocabulary tokens each state allows.

Tokens are byte strings and may end (or start) in the middle of a UTF-8 character, so a
token-level state is (char state, pending bytes). States with no pending bytes keep the
char state's id; the rare pending states get ids after them, on demand.

The allowed sets of all char states are computed at once with numpy (one gather per
token position over the whole vocabulary, no Python loop over tokens), cached on disk
keyed by regex and tokenizer fingerprint, and turned into device masks lazily.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from .errors import CfsmError
from .limits import MAX_INDEX_ENTRIES
from .regex_dfa import CharDFA
from .vocab import TokenVocab

INDEX_VERSION = "1"


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
    return 64 ** remaining


class TokenIndex:
    """Allowed tokens and transitions at token level for one (regex, vocabulary)."""

    def __init__(self, dfa: CharDFA, vocab: TokenVocab, cache_dir: Path | None = None) -> None:
        t0 = time.perf_counter()
        self.dfa = dfa
        self.vocab = vocab
        self.num_char_states = dfa.num_states
        self._pending: dict[tuple[int, bytes], int] = {}
        self._pending_keys: list[tuple[int, bytes]] = []
        self._allowed: dict[int, np.ndarray] = {}
        self._masks: dict[tuple[int, str], object] = {}
        self._regular_ids: np.ndarray
        self._prepare_tokens()
        cached = self._load(cache_dir)
        if cached is None:
            self._compute_all()
            self._save(cache_dir)
        self._cls = self._active = None  # only needed while building: ~3 MB a vocabulary
        self.build_seconds = time.perf_counter() - t0

    # ---------------------------------------------------------------- preparation
    def _prepare_tokens(self) -> None:
        """Split tokens into regular (valid UTF-8 text, walked with numpy) and irregular
        (partial characters, walked byte by byte)."""
        regular: list[tuple[int, str]] = []
        irregular: list[int] = []
        cont_start: list[int] = []
        for tid, b in enumerate(self.vocab.token_bytes):
            if not b:
                continue
            try:
                regular.append((tid, b.decode("utf-8")))
            except UnicodeDecodeError:
                irregular.append(tid)
                if 0x80 <= b[0] <= 0xBF:
                    cont_start.append(tid)
        regular.sort(key=lambda x: -len(x[1]))
        dfa = self.dfa
        dead_class = len(dfa.classes)
        maxlen = len(regular[0][1]) if regular else 0
        cls = np.full((len(regular), max(maxlen, 1)), dead_class, dtype=np.int32)
        lens = np.zeros(len(regular), dtype=np.int32)
        for row, (_tid, text) in enumerate(regular):
            lens[row] = len(text)
            for j, ch in enumerate(text):
                k = dfa.class_of(ch)
                cls[row, j] = dead_class if k is None else k
        self._regular_ids = np.array([t for t, _ in regular], dtype=np.int64)
        self._cls = cls
        # active rows per position (rows are sorted by length, descending)
        self._active = [int((lens > j).sum()) for j in range(cls.shape[1])]
        self._irregular = irregular
        self._cont_start = cont_start
        n, c = dfa.num_states, len(dfa.classes)
        table = np.full((n + 1, c + 1), n, dtype=np.int32)  # row/col n = dead
        for s, row in enumerate(dfa.trans):
            for k, t in row.items():
                table[s, k] = t
        self._table = table

    def _compute_all(self, chunk: int = 32) -> None:
        n = self.num_char_states
        self._entries = 0
        dead = n
        table = self._table
        cls = self._cls
        for start in range(0, n, chunk):
            states = np.arange(start, min(n, start + chunk), dtype=np.int32)
            cur = np.repeat(states[:, None], cls.shape[0], axis=1)
            for j, active in enumerate(self._active):
                if active == 0:
                    break
                cur[:, :active] = table[cur[:, :active], cls[:active, j]]
            for row, s in enumerate(states):
                ok = self._regular_ids[cur[row] != dead]
                self._entries += len(ok)
                if self._entries > MAX_INDEX_ENTRIES:
                    raise CfsmError(
                        "state_explosion",
                        f"the token index would exceed {MAX_INDEX_ENTRIES:,} (state, token) pairs "
                        f"({n} states x {self.vocab.size} tokens); simplify the constraint",
                    )
                extra = [t for t in self._irregular if self._walk(int(s), b"", self.vocab.token_bytes[t]) is not None]
                ids = np.concatenate([ok, np.array(extra, dtype=np.int64)]) if extra else ok
                if int(s) in self.dfa.finals:
                    ids = np.append(ids, self.vocab.eos_token_id)
                self._allowed[int(s)] = np.sort(ids.astype(np.int32))

    # ---------------------------------------------------------------- disk cache
    def _key(self) -> str:
        h = hashlib.sha256()
        h.update(f"v{INDEX_VERSION}:{self.vocab.fingerprint}:".encode())
        h.update(self.dfa.pattern.encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:24]

    def _load(self, cache_dir: Path | None):
        if cache_dir is None:
            return None
        path = cache_dir / f"index-{self._key()}.npz"
        if not path.exists():
            return None
        try:
            data = np.load(path)
            packed = data["packed"]
            if packed.shape[0] != self.num_char_states:
                return None
            for s in range(self.num_char_states):
                bits = np.unpackbits(packed[s], count=self.vocab.size).astype(bool)
                self._allowed[s] = np.flatnonzero(bits).astype(np.int32)
            return True
        except Exception:  # noqa: BLE001 - a corrupt cache is rebuilt
            return None

    def _save(self, cache_dir: Path | None) -> None:
        if cache_dir is None:
            return
        cache_dir.mkdir(parents=True, exist_ok=True)
        packed = np.zeros((self.num_char_states, (self.vocab.size + 7) // 8), dtype=np.uint8)
        for s in range(self.num_char_states):
            bits = np.zeros(self.vocab.size, dtype=bool)
            bits[self._allowed[s]] = True
            packed[s] = np.packbits(bits)
        path = cache_dir / f"index-{self._key()}.npz"
        tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
        np.savez_compressed(tmp, packed=packed)
        os.replace(tmp, path)

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
            sid = self.num_char_states + len(self._pending_keys)
            self._pending[key] = sid
            self._pending_keys.append(key)
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
        """Sorted allowed token ids (EOS included where the match may end)."""
        got = self._allowed.get(tstate)
        if got is None:
            s, pending = self.split(tstate)
            ids = [t for t in self._cont_start if self._walk(s, pending, self.vocab.token_bytes[t]) is not None]
            got = np.array(sorted(ids), dtype=np.int32)
            self._allowed[tstate] = got
        return got

    def mask(self, tstate: int, device: str = "cpu"):
        """Boolean mask over the vocabulary as a tensor on `device`, cached per state."""
        key = (tstate, device)
        m = self._masks.get(key)
        if m is None:
            import torch

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
        n = sum(a.nbytes for a in list(self._allowed.values())) + self._table.nbytes + self._regular_ids.nbytes
        n += sum(m.numel() * m.element_size() for m in list(self._masks.values()))
        return n + 120 * (len(self._pending) + len(self._allowed) + len(self._masks))

    def stats(self) -> dict:
        counts = [len(self._allowed[s]) for s in range(self.num_char_states)]
        return {
            "vocab_size": self.vocab.size,
            "char_states_indexed": self.num_char_states,
            "allowed_total": int(sum(counts)),
            "allowed_max": int(max(counts, default=0)),
            "allowed_mean": round(float(np.mean(counts)) if counts else 0.0, 1),
            "single_token_states": int(sum(1 for c in counts if c == 1)),
            "build_seconds": round(self.build_seconds, 4),
        }
