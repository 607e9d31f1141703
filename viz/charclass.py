"""Character classes in words a reader knows: `letter, digit or space`, `any character
except "`, `0-7`, instead of the partition's `[\\t\\x0b-\\rBCEF…]`.

A set is (chars, negated): the characters listed, or with `negated` every character but
those. Parallel edges of a graph are merged into one set before they are described."""

from __future__ import annotations

import string

CharSet = tuple[frozenset[str], bool]

CONTROL = frozenset(chr(i) for i in range(32))
GROUPS = (
    ("control character", CONTROL),  # before whitespace, which it holds
    ("letter", frozenset(string.ascii_letters)),
    ("lowercase letter", frozenset(string.ascii_lowercase)),
    ("uppercase letter", frozenset(string.ascii_uppercase)),
    ("digit", frozenset(string.digits)),
    ("whitespace", frozenset(" \t\n\r\x0b\x0c")),
)
# a graph label is underlined where it links, and an underscore vanished into the line
NAMES = {" ": "space", "\n": "newline", "\t": "tab", "\r": "carriage return", "_": "underscore"}
MAX_LISTED = 6  # more leftover characters than this are written as ranges
# a set that is one of these less a few characters is said so ("hex digit except D or d",
# not "digit, A-C, E, F, a-c or e, f")
NEAR_GROUPS = (
    ("hex digit", frozenset(string.hexdigits)),
    ("letter", frozenset(string.ascii_letters)),
    ("lowercase letter", frozenset(string.ascii_lowercase)),
    ("uppercase letter", frozenset(string.ascii_uppercase)),
    ("digit", frozenset(string.digits)),
)
MAX_EXCEPT = 3


def class_set(automaton: dict, k: int) -> CharSet:
    """The set of class `k` of an automaton's JSON (`classes`: None for the other class)."""
    classes = automaton.get("classes") or []
    if k < len(classes) and classes[k] is not None:
        return frozenset(classes[k]), False
    listed = frozenset("".join(c for c in classes if c))
    return listed, True


def union(a: CharSet, b: CharSet) -> CharSet:
    (ca, na), (cb, nb) = a, b
    if not na and not nb:
        return ca | cb, False
    if na and nb:
        return ca & cb, True
    excl, incl = (ca, cb) if na else (cb, ca)
    return excl - incl, True


def _char(c: str) -> str:
    if c in NAMES:
        return NAMES[c]
    return c if c.isprintable() else c.encode("unicode_escape").decode()


def _regex_char(c: str) -> str:
    if c in "\\]-^":
        return "\\" + c
    return c if c.isprintable() else c.encode("unicode_escape").decode()


def _ranges(chars: frozenset[str], show=_char, pair: str = ", ") -> list[str]:
    """Runs of consecutive characters: 0-9, or two neighbours as `a, b`."""
    cps = sorted(ord(c) for c in chars)
    out, i = [], 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        a, b = show(chr(cps[i])), show(chr(cps[j]))
        out.append(a if i == j else f"{a}-{b}" if j > i + 1 else f"{a}{pair}{b}")
        i = j + 1
    return out


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def describe_chars(chars: frozenset[str]) -> str:
    """A finite set in words: named groups it holds whole, then what is left."""
    if len(chars) == 1:
        c = next(iter(chars))
        return NAMES.get(c, _char(c))
    for name, group in NEAR_GROUPS:
        if chars == group:
            return name
        missing = group - chars
        if chars <= group and 0 < len(missing) <= MAX_EXCEPT and len(chars) > MAX_LISTED:
            return f"{name} except {_join([_char(c) for c in sorted(missing)])}"
    left, parts = set(chars), []
    for name, group in GROUPS:
        if group <= left:
            parts.append(name)
            left -= group
    rest = frozenset(left)
    if not rest:
        return _join(parts)
    listed = [_char(c) for c in sorted(rest)] if len(rest) <= MAX_LISTED else _ranges(rest)
    return _join(parts + listed)


def describe(cs: CharSet) -> str:
    chars, negated = cs
    if not negated:
        return describe_chars(chars) if chars else "nothing"
    if not chars:
        return "any character"
    words = describe_chars(chars).replace(" or ", " and ")
    return "any character except " + words.replace("control character", "control characters")


def raw_label(cs: CharSet) -> str:
    """The exact class, as a regex class (for the hover text and the raw toggle)."""
    chars, negated = cs
    if not negated and len(chars) == 1:
        return next(iter(chars))  # the character itself (a graph shows a space as \u2423)
    body = "".join(_ranges(chars, _regex_char, "")) if chars else ""
    return f"[{'^' if negated else ''}{body}]"
