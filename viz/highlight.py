"""Show where a doctor's cause points: the schema node at a JSON pointer, or the span of
the regex source, highlighted in the user's own text."""

from __future__ import annotations

import html
import json
import re

from engine.schema.pointer import join, resolve, split

_MARK = "\ue001MARK\ue001"


def _resolve(node, pointer: str):
    """(parent, key) of the node at a JSON pointer; None when it is not there."""
    parts = split(pointer)
    if not parts:
        return None, None
    found, parent = resolve(node, join("", *parts[:-1]))
    key = parts[-1]
    if found and isinstance(parent, dict) and key in parent:
        return parent, key
    if found and isinstance(parent, list) and key.isdigit() and int(key) < len(parent):
        return parent, int(key)
    return None


def schema_node_html(schema_text: str, pointer: str) -> str:
    """The schema pretty-printed with the node at `pointer` marked (the whole schema for /)."""
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return ""
    found = _resolve(schema, pointer)
    if found is None:
        return ""
    parent, key = found
    if parent is None:
        return (
            f"<pre><mark>{html.escape(json.dumps(schema, indent=2, ensure_ascii=False))}</mark>"
            "</pre>"
        )
    node = parent[key]
    parent[key] = _MARK
    text = json.dumps(schema, indent=2, ensure_ascii=False)
    line = next(ln for ln in text.splitlines() if _MARK in ln)
    indent = len(line) - len(line.lstrip())
    body = json.dumps(node, indent=2, ensure_ascii=False).replace("\n", "\n" + " " * indent)
    before, after = text.split(f'"{_MARK}"', 1)
    return (
        f"<pre>{html.escape(before)}<mark "
        f"id='doctor-mark'>{html.escape(body)}</mark>{html.escape(after)}</pre>"
    )


def regex_span_html(pattern: str, place: str) -> str:
    """The regex with the span a place `regex[a:b]` names marked."""
    m = re.fullmatch(r"regex\[(\d+):(\d+)\]", place or "")
    if not m:
        return ""
    a, b = int(m.group(1)), int(m.group(2))
    return (
        f"<pre>{html.escape(pattern[:a])}<mark id='doctor-mark'>{html.escape(pattern[a:b])}</mark>"
        f"{html.escape(pattern[b:])}</pre>"
    )


def test_strings_html(results: list[dict]) -> str:
    """One line per test string, like regex101: accepted, a prefix of something accepted,
    or the character where it leaves the language marked, with what was allowed there."""
    rows = []
    for r in results:
        text = r.get("text", "")
        if "error" in r:
            rows.append(
                f"<div class='cfsm-error'>\u26a0 {html.escape(r['error'].get('kind', ''))}: "
                f"{html.escape(r['error'].get('message', ''))}</div>"
            )
            break
        data = text.encode("utf-8")
        at = r.get("rejected_at")
        if r.get("accepted"):
            badge, body = "<b style='color:#15803d'>\u2713 match</b>", html.escape(text)
        elif at is None:
            badge = "<b style='color:#b45309'>\u2026 prefix</b>"
            body = (
                html.escape(text) + "<mark class='ts-end' title='more is needed here'>\u2423</mark>"
            )
        else:
            head, bad = data[:at].decode("utf-8", "replace"), data[at:].decode("utf-8", "replace")
            badge = f"<b style='color:#b91c1c'>\u2717 leaves at byte {at}</b>"
            body = (
                f"{html.escape(head)}<mark class='ts-reject' style='background:#fecaca'>"
                f"{html.escape(bad[:1] or ' ')}</mark>{html.escape(bad[1:])}"
            )
        expected = ", ".join(r.get("expected") or [])
        limit = html.escape(f" \u2014 {r['limit']}") if r.get("limit") else ""
        hint = (
            f" <span class='cfsm-muted'>expected: {html.escape(expected)}{limit}</span>"
            if expected and not r.get("accepted")
            else ""
        )
        warn = "".join(
            f"<div class='cfsm-muted'>\u26a0 {html.escape(w)}</div>"
            for w in r.get("warnings") or []
        )
        rows.append(f"<div class='ts-row'>{badge} <code>{body}</code>{hint}{warn}</div>")
    if not results:  # a click always gets a visible answer (an empty one read as a hang)
        rows.append(
            "<div class='ts-empty cfsm-muted'>Nothing to check: type one text per line in the "
            "box above, then Check.</div>"
        )
    return "<div id='test-strings-result'>" + "".join(rows) + "</div>"
