"""A least-recently-used map bounded by bytes, not entries: one compiled constraint can
hold a few KB or a few hundred MB (token index, per-state device masks, automaton), so a
count bound says nothing about memory. Sizes are measured by a function and re-measured
when an entry is used again (its caches may have grown meanwhile)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class ByteLRU:
    def __init__(
        self,
        budget_bytes: int,
        sizeof: Callable[[Any], int],
        pinned: Callable[[Any], bool] | None = None,
    ) -> None:
        self.budget = int(budget_bytes)
        self.sizeof = sizeof
        self.pinned = pinned or (lambda _v: False)  # entries that must not be evicted now
        self._items: OrderedDict[Hashable, list] = OrderedDict()  # key -> [value, size]
        self._total = 0
        self._lock = threading.RLock()
        self.evictions = 0

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """The value, or `default`, without counting it as used."""
        with self._lock:
            item = self._items.get(key)
            return default if item is None else item[0]

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value (now most recently used, and re-measured), or `default`."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return default
            self._items.move_to_end(key)
            self._measure(key, item)
            self._evict(keep=key)
            return item[0]

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._total -= old[1]
            item = [value, 0]
            self._items[key] = item
            self._measure(key, item)
            self._evict(keep=key)

    def remeasure(self, key: Hashable) -> None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._measure(key, item)
                self._evict(keep=key)

    def pop(self, key: Hashable) -> Any:
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return None
            self._total -= item[1]
            return item[0]

    def _measure(self, key: Hashable, item: list) -> None:
        try:
            size = max(0, int(self.sizeof(item[0])))
        except Exception:  # noqa: BLE001 - a failed measurement keeps the last size
            return
        self._total += size - item[1]
        item[1] = size

    def _evict(self, keep: Hashable) -> None:
        """Drop least recently used entries until the total fits (the entry just used and
        pinned entries stay, even when they alone are over budget)."""
        if self._total <= self.budget:
            return
        for k in [k for k in self._items if k != keep and not self.pinned(self._items[k][0])]:
            if self._total <= self.budget:
                break
            _, size = self._items.pop(k)
            self._total -= size
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def stats(self) -> dict:
        with self._lock:
            return {
                "entries": len(self._items),
                "bytes": self._total,
                "budget_bytes": self.budget,
                "evictions": self.evictions,
            }
