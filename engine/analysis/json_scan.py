"""Where a JSON prefix is: its container stack, whether it is inside a string (a key or a
value) and how long that string is so far. The doctor, the unbounded-part finder and the
checker read a prefix through this one scanner, so they agree on what "inside" means."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class JsonScan:
    stack: list  # ["obj", key of the member in progress, or None] / ["arr", index]
    expecting_key: bool
    in_str: bool
    str_is_key: bool
    last_struct: str
    str_chars: int = 0  # characters of the open string so far, an escape counted as one


def scan_json(text: str, pos: int) -> JsonScan:
    """One pass over a JSON prefix (up to `pos`); never fails, whatever the text."""
    stack: list = []
    in_str = esc = expecting_key = str_is_key = False
    buf: list[str] = []
    last_struct = ""
    n_chars = 0
    for c in text[: min(pos, len(text))]:
        if in_str:
            if esc:
                esc = False
                n_chars += 1
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
                if str_is_key and stack and stack[-1][0] == "obj":
                    stack[-1][1] = "".join(buf)
            else:
                buf.append(c)
                n_chars += 1
            continue
        if c == '"':
            in_str, buf, n_chars = True, [], 0
            str_is_key = expecting_key and bool(stack) and stack[-1][0] == "obj"
        elif c == "{":
            stack.append(["obj", None])
            expecting_key = True
        elif c == "[":
            stack.append(["arr", 0])
            expecting_key = False
        elif c in "}]":
            if stack:
                stack.pop()
            expecting_key = False
        elif c == ":":
            expecting_key = False
        elif c == ",":
            if stack and stack[-1][0] == "arr":
                stack[-1][1] += 1
            else:
                if stack:
                    stack[-1][1] = None  # the next key is not chosen yet
                expecting_key = True
        if c in "{}[],:":
            last_struct = c
    return JsonScan(stack, expecting_key, in_str, str_is_key, last_struct, n_chars)
