"""Where in a sample a forced or chosen character sits: its JSON pointer and context for
a schema, its span in the pattern for a regex."""

from __future__ import annotations

import json
import re

from ..json_scan import escape_pointer, pointer_of, scan_json


def _json_pointer_at(text: str, pos: int) -> str:
    """JSON pointer of the value being written at `pos`."""
    sc = scan_json(text, pos)
    parts = []
    for depth, (kind, v) in enumerate(sc.stack):
        last = depth == len(sc.stack) - 1
        if kind == "obj":
            if v is None or (last and sc.expecting_key and not sc.in_str):
                break  # choosing a key: the place is the object itself
            parts.append("properties/" + str(v).replace("~", "~0").replace("/", "~1"))
        else:
            parts.append("items")
    return "/" + "/".join(parts) if parts else "/"


_NEXT_KEY = re.compile(r'\s*,?\s*"((?:[^"\\]|\\.)*)"\s*:')


def _choice_pointer(text: str, pos: int) -> str:
    """Where an object-level choice (another property or the end; which key) points: the
    property the text chose next, else the object that was closed."""
    sc = scan_json(text, pos)
    if not sc.stack or sc.stack[-1][0] != "obj":
        return _json_pointer_at(text, pos)
    base = pointer_of(sc.stack[:-1])
    start = text.rfind('"', 0, pos) if sc.in_str and sc.str_is_key else pos
    m = _NEXT_KEY.match(text, start)
    if m:
        return base.rstrip("/") + "/properties/" + escape_pointer(json.loads(f'"{m.group(1)}"'))
    return base


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
