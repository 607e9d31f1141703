"""A schema text as its regex, memoized with its failures: the page (while typing), the
backends and the doctor ask for the same schema's regex many times, and a schema that ran
out of its lowering budget must not spend it again at every ask."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from ..errors import CfsmError
from .parse import parse_schema
from .to_regex import SchemaRegex, schema_regex

MEMO_SIZE = 64
RETRY_TIMEOUT_AFTER_S = 60.0  # a lowering that ran out of time may fit on a quieter machine


class _Memo:
    """The last MEMO_SIZE lowerings, results and CfsmErrors alike (a thread-safe LRU)."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple, tuple[SchemaRegex | CfsmError, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> SchemaRegex | CfsmError | None:
        with self._lock:
            got = self._items.get(key)
            if got is None:
                return None
            value, at = got
            if isinstance(value, CfsmError) and value.kind == "compile_timeout":
                if time.monotonic() - at > RETRY_TIMEOUT_AFTER_S:
                    del self._items[key]
                    return None
            self._items.move_to_end(key)
            return value

    def put(self, key: tuple, value: SchemaRegex | CfsmError) -> None:
        with self._lock:
            self._items[key] = (value, time.monotonic())
            while len(self._items) > MEMO_SIZE:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_MEMO = _Memo()


def schema_to_regex(
    text: str, whitespace: str = "compact", lenient: bool = False, spec: bool = False
) -> str:
    """JSON schema -> regex by the project's own exact compiler (engine/schema/to_regex.py)."""
    return compile_schema_regex(text, whitespace, lenient, spec).regex


def compile_schema_regex(
    text: str, whitespace: str = "compact", lenient: bool = False, spec: bool = False
) -> SchemaRegex:
    """The regex and the warnings of what `lenient` let through unenforced; its size, the
    work and the time are bounded while it is built (engine/schema/budget.py)."""
    key = (text, whitespace, lenient, spec)
    got = _MEMO.get(key)
    if got is None:
        try:
            got = schema_regex(parse_schema(text), whitespace, lenient, spec)
        except CfsmError as exc:
            got = exc
        _MEMO.put(key, got)
    if isinstance(got, CfsmError):
        raise CfsmError(got.error_kind, got.message)
    return got
