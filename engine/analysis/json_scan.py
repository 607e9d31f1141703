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


class JsonScanner:
    """The scan fed one character at a time, so a caller that needs the place before
    every character (the step view's outline) reads a text once, not once per prefix."""

    def __init__(self) -> None:
        self.stack: list = []
        self.in_str = self.esc = self.expecting_key = self.str_is_key = False
        self.buf: list[str] = []
        self.last_struct = ""
        self.n_chars = 0

    def scan(self) -> JsonScan:
        """Where the text fed so far is (a copy: feeding on does not change it)."""
        stack = [list(f) for f in self.stack]
        return JsonScan(
            stack,
            self.expecting_key,
            self.in_str,
            self.str_is_key,
            self.last_struct,
            self.n_chars,
        )

    def feed(self, c: str) -> None:
        if self.in_str:
            self._feed_string(c)
        else:
            self._feed_structure(c)

    def _feed_string(self, c: str) -> None:
        if self.esc:
            self.esc = False
            self.n_chars += 1
        elif c == "\\":
            self.esc = True
        elif c == '"':
            self.in_str = False
            if self.str_is_key and self.stack and self.stack[-1][0] == "obj":
                self.stack[-1][1] = "".join(self.buf)
        else:
            self.buf.append(c)
            self.n_chars += 1

    def _feed_structure(self, c: str) -> None:
        stack = self.stack
        if c == '"':
            self.in_str, self.buf, self.n_chars = True, [], 0
            self.str_is_key = self.expecting_key and bool(stack) and stack[-1][0] == "obj"
        elif c == "{":
            stack.append(["obj", None])
            self.expecting_key = True
        elif c == "[":
            stack.append(["arr", 0])
            self.expecting_key = False
        elif c in "}]":
            if stack:
                stack.pop()
            self.expecting_key = False
        elif c == ":":
            self.expecting_key = False
        elif c == ",":
            if stack and stack[-1][0] == "arr":
                stack[-1][1] += 1
            else:
                if stack:
                    stack[-1][1] = None  # the next key is not chosen yet
                self.expecting_key = True
        if c in "{}[],:":
            self.last_struct = c


def scan_json(text: str, pos: int) -> JsonScan:
    """One pass over a JSON prefix (up to `pos`); never fails, whatever the text."""
    sc = JsonScanner()
    for c in text[: min(pos, len(text))]:
        sc.feed(c)
    return sc.scan()
