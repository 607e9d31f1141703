"""Where in a sample a forced or chosen character sits: its JSON pointer and context for
a schema, its span in the pattern for a regex."""

from __future__ import annotations

import json
import re

from ...schema.pointer import choosing_key, locate_scan
from ..json_scan import scan_json


def _json_pointer_at(text: str, pos: int, schema: dict | None = None) -> str:
    """Schema pointer of the value being written at `pos` (the object while a key is
    chosen), walked in `schema` when given."""
    return locate_scan(schema, scan_json(text, pos).stack).pointer


_NEXT_KEY = re.compile(r'\s*,?\s*"((?:[^"\\]|\\.)*)"\s*:')


def _choice_pointer(text: str, pos: int, schema: dict | None = None) -> str:
    """Where an object-level choice (another property or the end; which key) points: the
    property the text chose next, else the object that was closed."""
    sc = scan_json(text, pos)
    if not sc.stack or sc.stack[-1][0] != "obj":
        return _json_pointer_at(text, pos, schema)
    start = text.rfind('"', 0, pos) if sc.in_str and sc.str_is_key else pos
    m = _NEXT_KEY.match(text, start)
    key = json.loads(f'"{m.group(1)}"') if m else None  # None: the object was closed
    return locate_scan(schema, choosing_key(sc.stack), key).pointer


def _json_context(text: str, pos: int) -> str:
    """'key', 'string', 'number' or 'structure' at `pos`."""
    sc = scan_json(text, pos)
    if sc.in_str:
        return "key" if sc.str_is_key else "string"
    ch = text[pos] if pos < len(text) else ""
    if ch in "-0123456789.eE+" and sc.last_struct in (":", "[", ","):
        return "number"
    return "structure"


def _regex_span(pattern: str, forced_before: str) -> list[int] | None:
    """Where in the regex source the choice sits: right after the literal text that
    precedes it (best effort)."""
    for n in range(min(16, len(forced_before)), 0, -1):
        tail = forced_before[-n:]
        for form in (
            re.escape(tail),
            tail,
            tail.replace("\n", "\\n").replace('"', '\\"'),
            re.escape(tail).replace("\\ ", " "),
        ):
            i = pattern.find(form)
            if i >= 0:
                end = i + len(form)
                return [end, min(len(pattern), end + 24)]
    return None
