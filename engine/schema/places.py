"""Where each state of a schema's automaton sits in the schema: the JSON pointer of the
value (or key) being written there and the part of it (a key, a string value, an escape,
a number, a separator...), so that the graph and the step view can say "in
/properties/name: string value, after a backslash" instead of "state 397".

A state's place is read off the shortest text that reaches it from the start (one
representative character per edge, breadth first), scanned as a JSON prefix: the automaton
of a schema walks its document in order, so every text reaching a state is at the same
place in it (minimization merges states only where what follows is the same)."""

from __future__ import annotations

import json
import re
from collections import deque

from ..analysis.json_scan import JsonScan, JsonScanner, scan_json
from ..regex.dfa import CharDFA
from .pointer import Located, choosing_key, locate_scan, walkable

MAX_STATES = 5_000  # larger automata get no places (a second of scanning at most)
_PREFERRED = "a0 .-e"  # representatives that keep a prefix readable (a letter, a digit...)
_ESCAPE_U = re.compile(r"(?<!\\)(?:\\\\)*\\u[0-9a-fA-F]{0,3}$")
_ODD_BACKSLASHES = re.compile(r"(?<!\\)(?:\\\\)*\\$")


def in_escape(prefix: str) -> bool:
    """Whether a JSON string prefix ends inside an escape (after its backslash, or in a
    u-escape's hex digits); the Doctor's cause classification reads strings the same way."""
    return bool(_ESCAPE_U.search(prefix) or _ODD_BACKSLASHES.search(prefix))


def _representative(dfa: CharDFA, k: int) -> str:
    chars = dfa.classes[k] if k != dfa.other_class else ""
    if not chars:  # the other class: any character no class lists
        listed = dfa.char_class
        return next(chr(i) for i in range(0x20, 0x110000) if chr(i) not in listed)
    return next((c for c in _PREFERRED if c in chars), chars[0])


def shortest_prefixes(dfa: CharDFA) -> dict[int, str]:
    """Each state's shortest text from the start (ties broken by class order)."""
    seen = {dfa.initial: ""}
    todo = deque([dfa.initial])
    while todo:
        s = todo.popleft()
        for k, t in sorted(dfa.trans[s].items()):
            if t not in seen:
                seen[t] = seen[s] + _representative(dfa, k)
                todo.append(t)
    return seen


def _forced_tail(dfa: CharDFA, state: int, stop: str, limit: int = 200) -> str | None:
    """The characters the automaton forces from `state` up to `stop` (None: a choice)."""
    out = []
    for _ in range(limit):
        row = dfa.trans[state]
        if len(row) != 1:
            return None
        ((k, nxt),) = row.items()
        chars = dfa.classes[k] if k != dfa.other_class else ""
        if len(chars) != 1:
            return None
        if chars == stop:
            return "".join(out)
        out.append(chars)
        state = nxt
    return None


_TAIL = 64  # characters of a prefix that tell its escape or literal (a longer run is odd)


def describe(sc: JsonScan, tail: str, schema: dict | None, key: str | None = None) -> dict:
    """{"pointer", "part", "key"} of a position the scanner read as `sc`; `tail` ends the
    text there. `key`: the whole key being written, when the caller knows it (None: which
    key is the model's choice). "key" is the label `Located` gives ('' when the pointer
    says it all): the one place builder of the graph, the step view and the outline."""
    if sc.in_str and sc.str_is_key:
        if key is None:  # which key: the place is the object
            got = locate_scan(schema, choosing_key(sc.stack))
            return _place(got, "key (which one: the model's choice)")
        return _place(locate_scan(schema, sc.stack, key), "key")
    if sc.in_str:
        part = "string value"
        if _ESCAPE_U.search(tail):
            part += ", inside a \\u escape (hex digits)"
        elif _ODD_BACKSLASHES.search(tail):
            part += ", after a backslash"
        return _place(locate_scan(schema, sc.stack), part)
    if not sc.stack:
        return {
            "pointer": "/",
            "part": "after the document" if tail.strip() else "start",
            "key": "",
        }
    return _place(*_between(sc, tail.rstrip()[-1:], tail, schema))


def _between(sc: JsonScan, last: str, tail: str, schema: dict | None) -> tuple[Located, str]:
    """The place and part of a position outside any string, inside a container."""
    if sc.stack[-1][0] == "obj" and sc.expecting_key:
        if last == '"':  # the key is written, its colon is next
            return locate_scan(schema, sc.stack), "after the key"
        return locate_scan(schema, choosing_key(sc.stack)), "before a key"
    if last in ":[,":
        return locate_scan(
            schema, sc.stack
        ), "before the value" if last == ":" else "before an item"
    token = re.search(r"[-0-9.eE+a-z]+$", tail)
    if token:
        part = "literal" if token.group(0)[0] in "tfn" else "number"
        return locate_scan(schema, sc.stack), part
    return locate_scan(schema, sc.stack), "after the value"


def _place(got: Located, part: str) -> dict:
    return {"pointer": got.pointer, "part": part, "key": got.label}


def place_of(dfa: CharDFA, state: int, prefix: str, schema: dict | None = None) -> dict:
    """{"pointer", "part", "key"} for a state reached by `prefix` (its shortest text): a
    key is known where the automaton forces the rest of it; the pointer is walked in
    `schema` when given (engine/schema/pointer.py), so it names a node the schema has."""
    sc = scan_json(prefix, len(prefix))
    key = None
    if sc.in_str and sc.str_is_key:
        tail = _forced_tail(dfa, state, '"')
        key = None if tail is None else prefix[prefix.rfind('"') + 1 :] + tail
    return describe(sc, prefix[-_TAIL:], schema, key)


def _state_part(p: dict) -> str:
    """A state's part: a key written on its shortest text is one representative of any
    the state admits, so the state says which kind of key it is under, not which key."""
    if not p["key"]:
        return p["part"]
    free = "a key the schema does not list" if "not in the schema" in p["key"] else "a free key"
    return f"{p['part']} (under {free})"


def places_along(text: str, schema: dict | None) -> list[dict]:
    """The place of each position of `text` (before each character, and at its end), read
    by the scanner from the text itself: a key in progress is named by the whole key the
    text goes on to write, so the step view says where the output really is, even past
    where an automaton that reads objects closed left it."""
    scanner, out, key = JsonScanner(), [], None
    for i in range(len(text) + 1):
        sc = scanner.scan()
        if sc.in_str and sc.str_is_key and key is None:
            key = _key_from(text, i)
        elif not (sc.in_str and sc.str_is_key):
            key = None
        out.append(describe(sc, text[max(0, i - _TAIL) : i], schema, key))
        if i < len(text):
            scanner.feed(text[i])
    return out


def _key_from(text: str, i: int) -> str | None:
    """The key whose string opened just before `i` ends (None: the text ends inside it)."""
    start = text.rfind('"', 0, i)
    m = _KEY_STRING.match(text, start)
    if not m:
        return None
    try:
        return json.loads(m.group(0))
    except ValueError:
        return None


_KEY_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def place_words(p: dict) -> str:
    """A place as the page writes it: 'in /properties/labels/additionalProperties (key
    "app"): string value'."""
    key = f" ({p['key']})" if p.get("key") else ""
    return f"in {p['pointer']}{key}: {p['part']}"


def schema_places(dfa: CharDFA, schema: dict | None = None) -> dict[str, list[str]] | None:
    """state -> [pointer, part] for every state (JSON keys are strings), or None for an
    automaton too large to scan."""
    if dfa.num_states > MAX_STATES:
        return None
    return {
        str(s): [(p := place_of(dfa, s, text, schema))["pointer"], _state_part(p)]
        for s, text in shortest_prefixes(dfa).items()
    }


def places_for_view(dfa: CharDFA, schema_text: str) -> dict[str, list[str]] | None:
    """`schema_places`, kept with the automaton's trace view (`dfa.view`) once built, so a
    cached constraint scans its states (and parses its schema) once: a dfa is built from
    one schema."""
    view = dfa.view if dfa.view is not None else {}
    if "places" not in view:
        view["places"] = schema_places(dfa, walkable(schema_text))
    return view["places"]
