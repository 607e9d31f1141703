"""JSON Schema's `pattern` is an ECMA-262 regex; `jsonschema` runs it with Python's `re`.
The two read a few things differently: `\\s` (ECMA takes U+FEFF and the Unicode spaces,
Python other characters), `.` (ECMA stops at \\r, U+2028 and U+2029 too), `$` (Python
also matches before a final newline) and, in Unicode mode, `\\d \\w \\b`. `to_python`
rewrites a pattern so that Python's `re` reads it as ECMA-262 does; the output validator
and the schema compiler both use it, so what is generated and what is checked agree."""

from __future__ import annotations

import functools

from ..regex.sets import MAXCODE, Ranges, complement, norm, of_chars
from .refs import DATA_KEYWORDS, NAMED_SCHEMA_MAPS

# ECMA-262 WhiteSpace and LineTerminator: what \s means there
SPACES: Ranges = norm(
    of_chars("\t\n\v\f\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff") + [(0x2000, 0x200A)]
)
DIGITS: Ranges = of_chars("0123456789")
WORD: Ranges = norm([(48, 57), (65, 90), (95, 95), (97, 122)])
LINE_TERMINATORS = "\n\r\u2028\u2029"
_SETS = {"d": DIGITS, "w": WORD, "s": SPACES}
_W = "[0-9A-Z_a-z]"
_BOUNDARY = f"(?:(?<={_W})(?!{_W})|(?<!{_W})(?={_W}))"
_NOT_BOUNDARY = f"(?:(?<={_W})(?={_W})|(?<!{_W})(?!{_W}))"


@functools.lru_cache(maxsize=1024)
def to_python(pattern: str) -> str:
    """The pattern for Python's `re.search`, with ECMA-262's meaning: \\d \\w \\s (and
    their negations), \\b \\B, `.` and `$` are spelled out (a scoped `(?a:...)` flag
    would not do: Python's search shortcut for a leading class ignores it)."""
    out, i, in_class = ["(?:"], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in "dDwWsS":
                out.append(_shorthand(nxt, in_class))
            elif nxt in "bB" and not in_class:  # in a class \b is a backspace in both dialects
                out.append(_BOUNDARY if nxt == "b" else _NOT_BOUNDARY)
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
            out.append(ch)
        elif ch == "[":
            in_class = True
            out.append(ch)
            for lead in ("^", "]"):  # `[^]...` and `[]...`: the first `]` is a member
                if pattern[i + 1 : i + 2] == lead:
                    out.append(lead)
                    i += 1
        elif ch == ".":
            out.append(f"[^{_body(of_chars(LINE_TERMINATORS))}]")
        elif ch == "$":
            out.append(r"\Z")
        else:
            out.append(ch)
        i += 1
    return "".join(out) + ")"  # a group: jsonschema joins patternProperties keys with `|`


def _shorthand(letter: str, in_class: bool) -> str:
    ranges = _SETS[letter.lower()]
    if letter.isupper():
        ranges = complement(ranges)
    return _body(ranges) if in_class else f"[{_body(ranges)}]"


def _body(ranges: Ranges) -> str:
    return "".join(_esc(a) if a == b else f"{_esc(a)}-{_esc(b)}" for a, b in ranges)


def _esc(cp: int) -> str:
    if cp > MAXCODE:
        cp = MAXCODE
    return f"\\U{cp:08x}"


def ecma_schema(node):
    """A schema whose `pattern`s and `patternProperties` keys are rewritten by to_python
    (data under enum/const is left alone; maps of named subschemas are walked into)."""
    if isinstance(node, list):
        return [ecma_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in DATA_KEYWORDS:
            out[k] = v
        elif k == "pattern" and isinstance(v, str):
            out[k] = to_python(v)
        elif k == "patternProperties" and isinstance(v, dict):
            out[k] = {to_python(p): ecma_schema(s) for p, s in v.items()}
        elif k in NAMED_SCHEMA_MAPS and isinstance(v, dict):  # patternProperties is caught above
            out[k] = {name: ecma_schema(s) for name, s in v.items()}
        else:
            out[k] = ecma_schema(v)
    return out
