"""A user's regex (Python dialect) rewritten from its parse tree into the plain subset every
backend reads the same way: inline flags applied (`(?s)` `.` takes newlines, `(?i)`
letters take both cases, scoped `(?i:...)` too), anchors that only restate full-match
semantics dropped (`^a$|^b$`, `(^x)`, `a\\\\$`), shorthand classes spelled in ASCII, and
every construct a finite automaton cannot hold named in the error (a back-reference is
named as it was written)."""

from __future__ import annotations

import re

from ..errors import CfsmError
from .sets import class_ranges, complement, norm, sre_c, sre_parse

_META = set(".^$*+?{}[]\\|()")
_CLASS_META = set("]\\^-[")
_ASCII_CLASSES = {
    "DIGIT": [(48, 57)],
    "WORD": [(48, 57), (65, 90), (95, 95), (97, 122)],
    "SPACE": [(9, 13), (32, 32)],
}
_UNSUPPORTED = {
    "ASSERT": "a look-ahead/look-behind assertion (?=...)/(?<=...)",
    "ASSERT_NOT": "a negative look-around (?!...)/(?<!...)",
    "GROUPREF_EXISTS": "a conditional group (?(1)...)",
    "ATOMIC_GROUP": "an atomic group (?>...)",
    "POSSESSIVE_REPEAT": "a possessive quantifier (*+, ++)",
}


def _ascii_category(name: str):
    """Shorthand classes in ASCII, as the engine and the validator (re.ASCII) read them."""
    cat = name.replace("CATEGORY_", "")
    base = _ASCII_CLASSES[cat.replace("NOT_", "")]
    return complement(base) if cat.startswith("NOT_") else base


def _fold(r):
    """Add the other case of every ASCII letter in the ranges (`(?i)` as Python applies it
    with re.ASCII, the mode the engine and the validator share)."""
    extra = []
    for a, b in r:
        for lo, hi, shift in ((65, 90, 32), (97, 122, -32)):
            x, y = max(a, lo), min(b, hi)
            if x <= y:
                extra.append((x + shift, y + shift))
    return norm(list(r) + extra)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _control(ch: str) -> str | None:
    """Control characters spelled as escapes (some backends' lexers refuse them raw)."""
    if ch in _NAMED:
        return _NAMED[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else None


def _class_char(cp: int) -> str:
    ch = chr(cp)
    return _control(ch) or ("\\" + ch if ch in _CLASS_META else ch)


def _class(r) -> str:
    r = norm(r)
    if not r:
        raise CfsmError(
            "unsatisfiable",
            "the regex has an empty character class (its language is empty: empty language)",
        )
    if len(r) == 1 and r[0][0] == r[0][1]:
        return _lit(r[0][0])
    comp = complement(r)

    def body(rs):
        return "".join(
            _class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in rs
        )

    size = sum(b - a for a, b in r)
    return f"[^{body(comp)}]" if comp and sum(b - a for a, b in comp) < size else f"[{body(r)}]"


def _lit(cp: int) -> str:
    ch = chr(cp)
    return _control(ch) or ("\\" + ch if ch in _META else ch)


class _Emitter:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, what: str):
        raise CfsmError(
            "unsupported_feature",
            f"regex uses {what}, which a finite automaton cannot represent here",
        )

    def seq(self, items, flags: int, at_start: bool, at_end: bool) -> str:
        items = list(items)
        out = []
        for i, (op, av) in enumerate(items):
            before = all(str(o) == "AT" for o, _ in items[:i])
            after = all(str(o) == "AT" for o, _ in items[i + 1 :])
            out.append(self.node(op, av, flags, at_start and before, at_end and after))
        return "".join(out)

    def node(self, op, av, flags: int, at_start: bool, at_end: bool) -> str:
        name = str(op)
        icase = bool(flags & re.IGNORECASE)
        if name == "LITERAL":
            return _class(_fold([(av, av)])) if icase else _lit(av)
        if name == "NOT_LITERAL":
            return _class(complement(_fold([(av, av)]) if icase else [(av, av)]))
        if name == "ANY":
            return "([^\\n]|\\n)" if flags & re.DOTALL else "[^\\n]"
        if name == "IN":
            return _class(class_ranges(av, _ascii_category, _fold if icase else None))
        if name == "SUBPATTERN":
            _group, add, rem, sub = av
            inner = self.seq(sub, (flags | add) & ~rem, at_start, at_end)
            return inner if len(sub) == 1 and str(sub[0][0]) == "BRANCH" else "(" + inner + ")"
        if name == "BRANCH":
            return "(" + "|".join(self.seq(b, flags, at_start, at_end) for b in av[1]) + ")"
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            return self.repeat(av, flags)
        if name == "AT":
            return self.anchor(str(av), at_start, at_end)
        if name == "GROUPREF":
            self.fail(f"a back-reference ({self.backref_text()})")
        self.fail(_UNSUPPORTED.get(name, name.lower()))
        return ""

    def repeat(self, av, flags: int) -> str:
        lo, hi, sub = av
        inner = self.seq(sub, flags, False, False)
        one = (
            len(sub) == 1
            and str(sub[0][0]) in ("IN", "ANY", "SUBPATTERN", "BRANCH")
            or len(inner) == 1
            or (len(inner) == 2 and inner[0] == "\\")
        )
        inner = inner if one else f"({inner})"
        if hi == sre_c.MAXREPEAT:
            return inner + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
        return inner + (
            "?" if (lo, hi) == (0, 1) else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
        )

    def anchor(self, kind: str, at_start: bool, at_end: bool) -> str:
        if kind in ("AT_BEGINNING", "AT_BEGINNING_STRING", "AT_BEGINNING_LINE") and at_start:
            return ""
        if kind in ("AT_END", "AT_END_STRING", "AT_END_LINE") and at_end:
            return ""
        names = {
            "AT_BOUNDARY": "a word boundary \\b",
            "AT_NON_BOUNDARY": "a non-boundary \\B",
            "AT_BEGINNING": "the anchor ^ inside the pattern",
            "AT_END": "the anchor $ inside the pattern",
            "AT_BEGINNING_STRING": "the anchor \\A inside the pattern",
            "AT_END_STRING": "the anchor \\Z inside the pattern",
        }
        self.fail(names.get(kind, f"the anchor {kind}"))
        return ""

    def backref_text(self) -> str:
        m = re.search(r"\(\?P=\w+\)|\\[1-9][0-9]?|\\g<\w+>", self.source)
        return m.group(0) if m else "\\1"


def normalize_regex(pattern: str) -> str:
    """The pattern in the plain subset the automaton builders share (see module doc)."""
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise CfsmError("invalid_regex", f"invalid regex: {exc}") from exc
    flags = parsed.state.flags  # (?x) needs nothing: the parser already dropped its whitespace
    return _Emitter(pattern).seq(list(parsed), flags, True, True)
