"""Character sets as sorted code-point ranges, and Python's own regex parser: what the two
regex rewriters (`regex_normalize` for user regexes, `json_string_regex` for schema
patterns) share. They differ in what a shorthand class means, so that is a parameter."""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..errors import CfsmError

try:  # Python >= 3.11
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older Pythons
    pass  # type: ignore[no-redef]

MAXCODE = sys.maxunicode
Ranges = list[tuple[int, int]]


def norm(ranges: Ranges) -> Ranges:
    """Sorted, merged ranges."""
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def complement(ranges: Ranges) -> Ranges:
    out, nxt = [], 0
    for a, b in norm(ranges):
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= MAXCODE:
        out.append((nxt, MAXCODE))
    return out


def intersect(x: Ranges, y: Ranges) -> Ranges:
    return complement(complement(x) + complement(y))


def of_chars(chars: str) -> Ranges:
    return norm([(ord(c), ord(c)) for c in chars])


def class_ranges(
    items, category: Callable[[str], Ranges], fold: Callable[[Ranges], Ranges] | None = None
) -> Ranges:
    """The characters of a parsed `[...]` class. `category` gives a shorthand's set (by
    sre's name, e.g. CATEGORY_NOT_DIGIT); `fold` (for `(?i)`) is applied before a
    negation complements the set."""
    neg, out = False, []
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            neg = True
        elif name == "LITERAL":
            out.append((av, av))
        elif name == "RANGE":
            out.append(tuple(av))
        elif name == "CATEGORY":
            out += category(str(av))
        else:
            raise CfsmError(
                "unsupported_feature", f"the class item {name.lower()} is not supported"
            )
    out = fold(out) if fold else norm(out)
    return complement(out) if neg else out


__all__ = [
    "MAXCODE",
    "Ranges",
    "class_ranges",
    "complement",
    "intersect",
    "norm",
    "of_chars",
    "sre_c",
    "sre_parse",
]
