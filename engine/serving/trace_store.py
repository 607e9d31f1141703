"""The traces of API requests, kept so that `/?trace=ID` opens one in the page's step
view: the newest first, bounded by count and by bytes (a detailed trace is 0.1-1 MB)."""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict

MAX_TRACES = 64
MAX_BYTES = 64 * 2**20


class TraceStore:
    def __init__(self, max_traces: int = MAX_TRACES, max_bytes: int = MAX_BYTES) -> None:
        self.max_traces, self.max_bytes = max_traces, max_bytes
        self._items: OrderedDict[str, tuple[dict, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, trace: dict) -> str | None:
        """Keep `trace`; returns its id (None when it alone is over the byte budget).
        The oldest traces go to make room."""
        size = len(json.dumps(trace))  # ASCII: characters are bytes
        if size > self.max_bytes:
            return None
        tid = uuid.uuid4().hex[:16]
        with self._lock:
            self._items[tid] = (trace, size)
            self._bytes += size
            while len(self._items) > self.max_traces or self._bytes > self.max_bytes:
                _, (_, n) = self._items.popitem(last=False)
                self._bytes -= n
        return tid

    def get(self, tid: str) -> dict | None:
        with self._lock:
            item = self._items.get(tid)
        return None if item is None else item[0]

    def stats(self) -> dict:
        with self._lock:
            return {"traces": len(self._items), "bytes": self._bytes}
