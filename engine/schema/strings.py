"""Regexes over the *text* of a JSON string's content: what a generated string may contain
between its quotes. A schema `pattern` speaks about the decoded string, so it is
translated here into the language of its JSON spellings (a quote becomes `\\"`, a newline
`\\n`); shorthand classes, `.` and `$` mean what ECMA-262 says (the output validator
reads patterns the same way, through engine/ecma_pattern.py). The pattern is parsed by
Python's `re` parser, so syntax the two dialects read differently (ECMA's literal `a{,3}`)
follows Python."""

from __future__ import annotations

import re

from ..errors import CfsmError
from ..regex.algebra import combine
from ..regex.sets import (
    MAXCODE,
    Ranges,
    class_ranges,
    complement,
    intersect,
    norm,
    of_chars,
    sre_c,
    sre_parse,
)
from .ecma import DIGITS, SPACES, WORD

# a string's intersection (pattern with pattern, format or length), as the key products:
# the product is written back as a regex by state elimination, which grows fast (3,000
# states and 200,000 characters lowered 1 more of the 400 main-subset schemas than these,
# and took 2.4x the lowering time over them all)
STRING_PRODUCT_STATES = 400
STRING_PRODUCT_CHARS = 60_000


def intersect_contents(regexes: list[str]) -> str | None:
    """A content regex for the strings every one of `regexes` matches, grouped (it may
    alternate at its top); None when none does. Raises TooLarge past the limits."""
    got = combine(regexes, all, STRING_PRODUCT_STATES, STRING_PRODUCT_CHARS)
    return None if got is None else "(" + got + ")"


def width_of(rx: str) -> tuple[int, int]:
    """The (min, max) length of what a regex matches (max 2**31 - 1 and up: unbounded)."""
    return sre_parse.parse(rx).getwidth()


# one character of string content, as JSON spells it; \u escapes of surrogates are left
# out so that a length counted on the text equals the length of the decoded string
RAW = '[^"\\\\\\x00-\\x1f]'
CHAR = (
    f'({RAW}|\\\\["\\\\/bfnrt]|\\\\u([0-9a-cA-Ce-fE-F][0-9a-fA-F]{{3}}|[dD][0-7][0-9a-fA-F]{{2}}))'
)
ANY_STRING = f'"{CHAR}*"'
_ESC = {
    '"': '\\\\"',
    "\\": "\\\\\\\\",
    "\n": "\\\\n",
    "\r": "\\\\r",
    "\t": "\\\\t",
    "\b": "\\\\b",
    "\f": "\\\\f",
}
_SPECIAL = frozenset(chr(c) for c in range(0x20)) | {'"', "\\"}
_LINE_TERMINATORS = "\n\r\u2028\u2029"


def literal(ch: str) -> str:
    """Regex for one character as JSON writes it (ensure_ascii off)."""
    if ch in _ESC:
        return _ESC[ch]
    if ch in _SPECIAL:
        return f"\\\\u{ord(ch):04x}"
    return re.escape(ch)


def literal_text(s: str) -> str:
    return "".join(literal(c) for c in s)


def _category(name: str) -> Ranges:
    """Shorthand classes as ECMA-262 reads them (engine/ecma_pattern.py makes the output
    validator read them the same way)."""
    ranges = {"DIGIT": DIGITS, "WORD": WORD, "SPACE": SPACES}[name.rsplit("_", 1)[1]]
    return complement(ranges) if name.startswith("CATEGORY_NOT_") else ranges


def _class_char(cp: int) -> str:
    ch = chr(cp)
    return "\\" + ch if ch in "]\\^-[" else ch


def _class_body(ranges: Ranges) -> str:
    return "".join(
        _class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in ranges
    )


def _size(ranges: Ranges) -> int:
    return sum(b - a + 1 for a, b in ranges)


def narrowed(ranges: Ranges) -> bool:
    """Whether ranges_regex keeps only the ASCII part of this set (it and its complement
    are both too large to list): the regex is then a subset, not the set."""
    no_surrogates = intersect(norm(ranges), [(0, 0xD7FF), (0xE000, MAXCODE)])
    return _size(complement(no_surrogates)) > 20000 and _size(no_surrogates) > 20000


def ranges_regex(ranges: Ranges) -> str | None:
    """Regex for one character of content from a set of code points (None: empty set).
    Large sets are written as a negated class: automaton builders expand the characters a
    class lists, so `[^...]` of the few left out is what stays cheap."""
    no_surrogates = intersect(norm(ranges), [(0, 0xD7FF), (0xE000, MAXCODE)])
    excluded = complement(no_surrogates)
    if narrowed(ranges):  # both huge: keep the ASCII part
        no_surrogates = intersect(no_surrogates, [(0, 0x7F)])
        excluded = complement(no_surrogates)
    special = of_chars("".join(sorted(_SPECIAL)))
    safe = intersect(no_surrogates, complement(special))
    parts = []
    if safe and _size(safe) <= _size(excluded):
        body = _class_body(safe)
        parts.append(
            body
            if len(safe) == 1
            and safe[0][0] == safe[0][1]
            and len(body) == 1
            and body not in ".^$*+?{}()|"
            else f"[{body}]"
        )
    elif safe:
        outside = intersect(
            norm(excluded + special), [(0, 0xD7FF), (0xE000, MAXCODE)]
        )  # text has no surrogates
        parts.append(f"[^{_class_body(outside)}]")
    for a, b in no_surrogates:
        for cp in range(a, min(b, 0x5C) + 1):
            if chr(cp) in _SPECIAL:
                parts.append(literal(chr(cp)))
    if not parts:
        return None
    if len(parts) == 1 and (parts[0].startswith("[") or len(parts[0]) == 1):
        return parts[0]
    return (
        "(" + "|".join(parts) + ")"
    )  # a lone escape like \\n is two atoms: a quantifier needs the group


class PatternTranslator:
    """ECMA-262 `pattern` (search semantics) -> regex over a JSON string's content."""

    def __init__(self, pattern: str, where: str) -> None:
        self.pattern, self.where = pattern, where
        self.exact = True  # False once a class had to be narrowed to its ASCII part (a subset)

    def fail(self, what: str):
        raise CfsmError(
            "unsupported_feature",
            f"`pattern` at {self.where}: {what} cannot be enforced ({self.pattern!r})",
        )

    def translate(self) -> tuple[str, tuple[int, int]]:
        """(content regex, (min, max) length of what the pattern itself matches)."""
        try:
            parsed = sre_parse.parse(self.pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            self.fail(f"the regex does not parse ({exc})")
        if parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE):
            self.fail("inline flags")
        items = list(parsed)
        anchored_start = (
            bool(items)
            and str(items[0][0]) == "AT"
            and str(items[0][1]) in ("AT_BEGINNING", "AT_BEGINNING_STRING")
        )
        anchored_end = (
            bool(items)
            and str(items[-1][0]) == "AT"
            and str(items[-1][1]) in ("AT_END", "AT_END_STRING")
        )
        if anchored_start:
            items = items[1:]
        if anchored_end and items:
            items = items[:-1]
        body = self.seq(items)
        width = parsed.getwidth()
        if not (anchored_start and anchored_end):  # search semantics: anything may surround it
            width = (width[0], sre_c.MAXREPEAT)
        any_content = f"{CHAR}*"
        return (
            ("" if anchored_start else any_content) + body + ("" if anchored_end else any_content)
        ), width

    def seq(self, items) -> str:
        return "".join(self.node(op, av) for op, av in items)

    def node(self, op, av) -> str:
        name = str(op)
        if name == "LITERAL":
            return literal(chr(av))
        if name == "NOT_LITERAL":
            return self.chars(complement([(av, av)]))
        if name == "ANY":
            return self.chars(complement(of_chars(_LINE_TERMINATORS)))
        if name == "IN":
            return self.chars(class_ranges(av, _category))
        if name == "SUBPATTERN":
            return "(" + self.seq(av[-1]) + ")"
        if name == "BRANCH":
            return "(" + "|".join(self.seq(b) for b in av[1]) + ")"
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, sub = av
            inner = self.seq(sub)
            inner = (
                inner
                if len(sub) == 1 and str(sub[0][0]) in ("IN", "SUBPATTERN", "ANY")
                else f"({inner})"
            )
            if hi == sre_c.MAXREPEAT:
                return inner + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
            return inner + (
                "?" if (lo, hi) == (0, 1) else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
            )
        if name == "AT":
            self.fail("an anchor inside the pattern")
        what = {
            "ASSERT": "look-around",
            "ASSERT_NOT": "negative look-around",
            "GROUPREF": "a back-reference",
            "GROUPREF_EXISTS": "a conditional group",
        }.get(name, name.lower())
        self.fail(what)
        return ""

    def chars(self, ranges: Ranges) -> str:
        if narrowed(ranges):
            self.exact = False
        rx = ranges_regex(ranges)
        if rx is None:
            self.fail("an empty character class")
        return rx
