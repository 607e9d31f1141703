"""Where each state of a schema's automaton sits in the schema: the JSON pointer of the
value (or key) being written there and the part of it (a key, a string value, an escape,
a number, a separator...), so that the graph and the step view can say "in
/properties/name: string value, after a backslash" instead of "state 397".

A state's place is read off the shortest text that reaches it from the start (one
representative character per edge, breadth first), scanned as a JSON prefix: the automaton
of a schema walks its document in order, so every text reaching a state is at the same
place in it (minimization merges states only where what follows is the same)."""

from __future__ import annotations

import re
from collections import deque

from ..analysis.json_scan import scan_json
from ..regex.dfa import CharDFA
from .pointer import scan_path, schema_pointer, walkable

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


def place_of(dfa: CharDFA, state: int, prefix: str, schema: dict | None = None) -> dict:
    """{"pointer", "part"} for a state reached by `prefix`; the pointer is walked in
    `schema` when given (engine/schema/pointer.py), so it names a node the schema has."""
    sc = scan_json(prefix, len(prefix))

    def _pointer(stack: list, key: str | None) -> str:
        return schema_pointer(schema, scan_path(stack, key))

    if sc.in_str and sc.str_is_key:
        start = prefix.rfind('"') + 1
        tail = _forced_tail(dfa, state, '"')
        if tail is None:  # which key is the model's choice: the place is the object
            stack = [*sc.stack[:-1], ["obj", None]]
            return {"pointer": _pointer(stack, None), "part": "key (which one: the model's choice)"}
        return {"pointer": _pointer(sc.stack, prefix[start:] + tail), "part": "key"}
    if sc.in_str:
        part = "string value"
        if _ESCAPE_U.search(prefix):
            part += ", inside a \\u escape (hex digits)"
        elif _ODD_BACKSLASHES.search(prefix):
            part += ", after a backslash"
        return {"pointer": _pointer(sc.stack, None), "part": part}
    if not sc.stack:
        return {"pointer": "/", "part": "after the document" if prefix.strip() else "start"}
    last = prefix.rstrip()[-1:]
    kind = sc.stack[-1][0]
    if kind == "obj" and sc.expecting_key:
        if last == '"':  # the key is written, its colon is next
            return {"pointer": _pointer(sc.stack, None), "part": "after the key"}
        return {"pointer": _pointer([*sc.stack[:-1], ["obj", None]], None), "part": "before a key"}
    if last in ":[,":
        part = "before the value" if last == ":" else "before an item"
        return {"pointer": _pointer(sc.stack, None), "part": part}
    token = re.search(r"[-0-9.eE+a-z]+$", prefix)
    if token and prefix.endswith(token.group(0)):
        word = token.group(0)
        part = "literal" if word[0] in "tfn" else "number"
        return {"pointer": _pointer(sc.stack, None), "part": part}
    return {"pointer": _pointer(sc.stack, None), "part": "after the value"}


def schema_places(dfa: CharDFA, schema: dict | None = None) -> dict[str, list[str]] | None:
    """state -> [pointer, part] for every state (JSON keys are strings), or None for an
    automaton too large to scan."""
    if dfa.num_states > MAX_STATES:
        return None
    return {
        str(s): [(p := place_of(dfa, s, text, schema))["pointer"], p["part"]]
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
