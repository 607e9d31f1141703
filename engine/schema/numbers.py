"""Exact regexes for JSON numbers within bounds: integer ranges digit by digit, decimal
bounds by comparing fraction digits, `multipleOf` where a regular language can say it.
Every function returns None for an empty language. Values are compared exactly as
decimals (the schema's bounds are read from their shortest decimal spelling)."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING

from ..errors import CfsmError

if TYPE_CHECKING:  # a compile's separators (to_regex.py), a type only
    from .to_regex import Separators

MAX_ENUMERATED = 1000  # multiples of `multipleOf` spelled out one by one
_SHORT = 10**15 - 1  # integers of at most 15 digits: exact as floats, so `7.0` reads as 7

NAT = "(0|[1-9][0-9]*)"
FRAC = r"(\.[0-9]+)?"
EXP = "([eE][+-]?[0-9]+)?"
JSON_NUMBER = f"-?{NAT}{FRAC}{EXP}"
JSON_INTEGER = f"-?{NAT}"


def alt(parts: list[str | None]) -> str | None:
    """Alternation of the non-empty languages (None when there are none)."""
    got = [p for p in parts if p is not None]
    if not got:
        return None
    uniq = list(dict.fromkeys(got))
    return uniq[0] if len(uniq) == 1 else "(" + "|".join(uniq) + ")"


def _digit_class(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"[{lo}-{hi}]"


def _same_len(lo: str, hi: str) -> str:
    """Digit strings of one length between lo and hi (inclusive, lo <= hi)."""
    n = len(lo)
    if n == 0:
        return ""
    if lo == hi:
        return lo
    if lo[1:] == "0" * (n - 1) and hi[1:] == "9" * (n - 1):
        rest = f"[0-9]{{{n - 1}}}" if n > 2 else ("[0-9]" if n == 2 else "")
        return _digit_class(int(lo[0]), int(hi[0])) + rest
    if lo[0] == hi[0]:
        return lo[0] + _same_len(lo[1:], hi[1:])
    parts = [lo[0] + _same_len(lo[1:], "9" * (n - 1))]
    a, b = int(lo[0]) + 1, int(hi[0]) - 1
    if a <= b:
        parts.append(_same_len(str(a) + "0" * (n - 1), str(b) + "9" * (n - 1)))
    parts.append(hi[0] + _same_len("0" * (n - 1), hi[1:]))
    return alt(parts) or ""


def nat_range(lo: int, hi: int | None) -> str | None:
    """Non-negative integers in [lo, hi] (hi None: no upper bound), without leading zeros."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return None
    parts: list[str | None] = []
    if lo == 0:
        parts.append("0")
        lo = 1
    if hi is not None and hi < lo:
        return alt(parts)
    n = len(str(lo))
    while hi is None or lo <= hi:
        top = 10**n - 1
        if hi is None and lo == 10 ** (n - 1):
            parts.append(f"[1-9][0-9]{{{n - 1},}}" if n > 1 else "[1-9][0-9]*")
            break
        end = top if hi is None else min(top, hi)
        parts.append(_same_len(str(lo), str(end)))
        lo, n = end + 1, n + 1
    return alt(parts)


def int_range(lo: int | None, hi: int | None) -> str | None:
    """JSON integers in [lo, hi]; None bounds are open. `-0` is never produced."""
    parts: list[str | None] = []
    if hi is None or hi >= 0:
        parts.append(nat_range(max(lo or 0, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        top = -1 if hi is None else min(hi, -1)
        neg = nat_range(-top, None if lo is None else -lo)
        parts.append(
            None
            if neg is None
            else "-" + (neg if neg.startswith("(") or len(neg) == 1 else f"({neg})")
        )
    return alt(parts)


def _digits(x: Fraction) -> tuple[int, str]:
    """(integer part, fraction digits without trailing zeros) of a non-negative decimal."""
    whole = int(x)
    f = x - whole
    d = ""
    while f and len(d) < 400:
        f *= 10
        d += str(int(f))
        f -= int(f)
    return whole, d


def _class(ds: list[int]) -> str:
    return (
        _digit_class(ds[0], ds[-1])
        if ds == list(range(ds[0], ds[-1] + 1))
        else "[" + "".join(map(str, ds)) + "]"
    )


class _Frac:
    """Fraction digit strings d with 0.d within bounds. Bounds are digit strings (None:
    open); strict excludes the bound itself; `cap` limits the number of digits. A state is
    (position, still equal to lo's digits, still equal to hi's digits)."""

    def __init__(
        self, lo: str | None, lo_strict: bool, hi: str | None, hi_strict: bool, cap: int | None
    ) -> None:
        self.lo, self.hi = lo or "", hi or ""
        self.lo_strict, self.hi_strict, self.cap = lo_strict, hi_strict, cap
        self.start = (0, lo is not None, hi is not None)
        self.memo: dict = {}

    def end_ok(self, i: int, lt: bool, ht: bool) -> bool:
        if lt and (self.lo_strict or any(c != "0" for c in self.lo[i:])):
            return False
        return not (ht and self.hi_strict and not any(c != "0" for c in self.hi[i:]))

    def moves(self, i: int, lt: bool, ht: bool) -> dict[tuple[bool, bool], list[int]]:
        out: dict[tuple[bool, bool], list[int]] = {}
        lo_d = int(self.lo[i]) if lt and i < len(self.lo) else 0
        hi_d = (int(self.hi[i]) if i < len(self.hi) else 0) if ht else 9
        for c in range(lo_d if lt else 0, (hi_d if ht else 9) + 1):
            out.setdefault((lt and c == lo_d, ht and c == hi_d), []).append(c)
        return out

    def nonempty(self, i: int, lt: bool, ht: bool) -> str | None:
        """Regex of the non-empty digit strings that may follow position i (None: none)."""
        key = (i, lt, ht)
        if key not in self.memo:
            self.memo[key] = self._nonempty(i, lt, ht)
        return self.memo[key]

    def _past_bounds(self, lt: bool, ht: bool) -> str | None:
        """Uncapped, past every bound digit: only zeros keep a bound tight."""
        if lt and ht:
            return None if (self.lo_strict or self.hi_strict) else "0+"
        if lt:
            return "0*[1-9][0-9]*" if self.lo_strict else "[0-9]+"
        return None if self.hi_strict else "0+"

    def _nonempty(self, i: int, lt: bool, ht: bool) -> str | None:
        if self.cap is not None and i >= self.cap:
            return None
        if not lt and not ht:
            left = None if self.cap is None else self.cap - i
            return "[0-9]+" if left is None else ("[0-9]" if left == 1 else f"[0-9]{{1,{left}}}")
        if self.cap is None and (not lt or i >= len(self.lo)) and (not ht or i >= len(self.hi)):
            return self._past_bounds(lt, ht)
        parts = []
        for (lt2, ht2), ds in self.moves(i, lt, ht).items():
            rest, end = self.nonempty(i + 1, lt2, ht2), self.end_ok(i + 1, lt2, ht2)
            if rest is None and not end:
                continue
            parts.append(
                _class(ds) if rest is None else _class(ds) + (rest if not end else f"({rest})?")
            )
        return alt(parts)


def _frac_regex(
    lo: str | None, lo_strict: bool, hi: str | None, hi_strict: bool, cap: int | None
) -> tuple[bool, str | None]:
    """(may the fraction be absent, regex of a present fraction `\\.d`)."""
    f = _Frac(lo, lo_strict, hi, hi_strict, cap)
    body = f.nonempty(*f.start)
    return f.end_ok(*f.start), None if body is None else r"\." + body


# A document's number with a fraction is parsed as a float: with at most 15 significant
# digits (9 before the point, 6 after) distinct decimals stay distinct and in order as
# floats, so comparing decimals exactly decides what jsonschema decides. Numbers written
# without a fraction are parsed as exact integers and may be any length.
FRAC_DIGITS = 6
FRAC_BELOW = 10**9


def _magnitude(
    lo: Fraction | None, lo_strict: bool, hi: Fraction | None, hi_strict: bool, cap: int | None
) -> str | None:
    """Non-negative decimals `n(.d)?` (no sign, no exponent) within the bounds (lo >= 0)."""
    lo = lo if lo is not None else Fraction(0)
    if hi is not None and (hi < lo or (hi == lo and (lo_strict or hi_strict))):
        return None
    cap = FRAC_DIGITS if cap is None else min(cap, FRAC_DIGITS)
    L, lf = _digits(lo)

    def with_frac(n: int, lo_d: str | None, lo_s: bool, hi_d: str | None, hi_s: bool) -> str | None:
        absent, present = _frac_regex(lo_d, lo_s, hi_d, hi_s, cap if n < FRAC_BELOW else 0)
        if present is None:
            return str(n) if absent else None
        return f"{n}({present})?" if absent else str(n) + present

    def middle(a: int, b: int | None) -> list[str | None]:
        """Integer parts a..b (None: open), any fraction where one may be written."""
        small = nat_range(a, FRAC_BELOW - 1 if b is None else min(b, FRAC_BELOW - 1))
        frac = "(\\.[0-9]{1,K})?".replace("K", str(cap)) if cap else ""
        return [None if small is None else small + frac, nat_range(max(a, FRAC_BELOW), b)]

    if hi is None:
        return alt([with_frac(L, lf, lo_strict, None, False), *middle(L + 1, None)])
    H, hf = _digits(hi)
    if L == H:
        return with_frac(L, lf, lo_strict, hf, hi_strict)
    return alt(
        [
            with_frac(L, lf, lo_strict, None, False),
            *middle(L + 1, H - 1),
            with_frac(H, None, False, hf, hi_strict),
        ]
    )


def decimal_range(
    lo: Fraction | None,
    lo_strict: bool,
    hi: Fraction | None,
    hi_strict: bool,
    cap: int | None = None,
) -> str | None:
    """JSON numbers (no exponent) in the interval; `cap` limits fraction digits."""
    parts: list[str | None] = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):
        nonneg_lo = lo if lo is not None and lo >= 0 else Fraction(0)
        strict = lo_strict if lo is not None and lo >= 0 else False
        parts.append(_magnitude(nonneg_lo, strict, hi, hi_strict, cap))
    if lo is None or lo < 0:
        m_lo = -hi if hi is not None and hi < 0 else Fraction(0)
        m_lo_strict = hi_strict if hi is not None and hi < 0 else True
        neg = _magnitude(m_lo, m_lo_strict, None if lo is None else -lo, lo_strict, cap)
        parts.append(None if neg is None else f"-({neg})")
    return alt(parts)


def to_fraction(x) -> Fraction:
    """A schema number as the decimal it was written as (floats by their shortest repr)."""
    if isinstance(x, bool):
        raise TypeError("boolean is not a number")
    if isinstance(x, int):
        return Fraction(x)
    return Fraction(Decimal(repr(float(x))))


class NumberKeywords:
    """The number keywords of a schema compile (type number/integer, minimum/maximum and
    their exclusive forms, multipleOf), mixed into the schema compiler: it reads `sep`,
    `spec`, `draft4` and `refuse` from it."""

    def number(self, s: dict, ptr: str, integer: bool) -> str | None:
        lo, lo_strict, hi, hi_strict = self.bounds(s, ptr)
        mult = s.get("multipleOf")
        if mult is not None:
            return self.multiple_of(to_fraction(mult), lo, lo_strict, hi, hi_strict, integer, ptr)
        if not integer:
            return _bounded(lo, lo_strict, hi, hi_strict, integer)
        return self.integers(_int_lo(lo, lo_strict), _int_hi(hi, hi_strict))

    def integers(self, lo: int | None, hi: int | None) -> str | None:
        """Integers in [lo, hi]; with `spec` those of at most 15 digits also as `7.0` (the
        same number to JSON Schema; a float keeps them exact, where a longer one may round
        across a bound or overflow to infinity)."""
        ints = int_range(lo, hi)
        if not self.point_zero(True) or ints is None:
            return ints
        lo2, hi2 = (
            max(-_SHORT, lo if lo is not None else -_SHORT),
            min(_SHORT, hi if hi is not None else _SHORT),
        )
        if lo2 > hi2:
            return ints
        if (lo2, hi2) == (lo, hi):
            return f"({ints})(\\.0+)?"
        return alt([ints, f"({int_range(lo2, hi2)})\\.0+"])

    def point_zero(self, integer: bool) -> bool:
        """May an integral value be written `7.0` here? With `spec`, except for `integer`
        under draft-04, where 7.0 is no integer."""
        return self.spec and not (integer and self.draft4)

    def bounds(self, s: dict, ptr: str):
        """The bounds, refused when their decimal spelling is too long for a float to keep
        order with the documents' numbers (jsonschema compares floats)."""
        got = _bounds(s)
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            v = s.get(kw)
            if (
                isinstance(v, float)
                and len(repr(v).lstrip("-0.").replace(".", "").split("e")[0]) > 15
            ):
                self.refuse(kw, ptr, f"{v!r} has more than 15 significant digits")
                return None, False, None, False
        return got

    def multiple_of(
        self, m: Fraction, lo, lo_strict, hi, hi_strict, integer: bool, ptr: str
    ) -> str | None:
        if m <= 0:
            raise CfsmError("invalid_schema", f"`multipleOf` at {ptr or '/'} must be positive")
        if m.denominator == 1:  # integer steps: integers only (a number `4.0` is left out)
            return self.int_multiples(
                int(m), _int_lo(lo, lo_strict), _int_hi(hi, hi_strict), ptr, integer
            )
        # a fractional step is checked by float division in jsonschema (0.3 is no multiple
        # of 0.1 there): only a bounded range, each value checked the same way, is exact
        return self.enumerate_multiples(m, lo, lo_strict, hi, hi_strict, integer, ptr)

    def int_multiples(
        self, m: int, lo: int | None, hi: int | None, ptr: str, integer: bool
    ) -> str | None:
        if lo is not None and hi is not None and (hi - lo) // m <= MAX_ENUMERATED:
            first = -(-lo // m) * m
            return alt(
                [_spelled(str(v), self.point_zero(integer)) for v in range(first, hi + 1, m)]
            )
        a, b = _two_five(m)
        d = max(a or 0, b, 1)
        if lo in (None, 0, 1) and hi is None and a is not None and 10**d // m <= 200:
            small = [
                str(v)
                for v in range(0, 10**d, m)
                if v >= (lo or 0) and v != 0 or (v == 0 and lo in (None, 0))
            ]
            big = f"[1-9][0-9]*{alt([re.escape(str(v).zfill(d)) for v in range(0, 10**d, m)])}"
            pos = alt(small + [big])
            if lo is None:
                neg = alt([x for x in small if x != "0"] + [big])
                return alt([pos, f"-{neg}" if neg else None])
            return pos
        self.refuse(
            "multipleOf", ptr, f"multiples of {m} over this range are not a small regular language"
        )
        return int_range(lo, hi)

    def enumerate_multiples(
        self, m: Fraction, lo, lo_strict, hi, hi_strict, integer: bool, ptr: str
    ) -> str | None:
        if lo is not None and hi is not None and (hi - lo) / m <= MAX_ENUMERATED:
            vals = []
            for i in range(math.ceil(lo / m), math.floor(hi / m) + 1):
                v = i * m
                if (
                    (lo_strict and v == lo)
                    or (hi_strict and v == hi)
                    or (integer and v.denominator != 1)
                ):
                    continue
                text = _decimal_text(v)
                q = float(text) / float(m)
                if int(q) == q:  # what jsonschema computes
                    vals.append(text)
            return alt([_spelled(x, self.point_zero(integer)) for x in vals])
        self.refuse(
            "multipleOf",
            ptr,
            f"multiples of {float(m)} over an unbounded range: jsonschema divides floats, "
            "which no regex can follow",
        )
        return _bounded(lo, lo_strict, hi, hi_strict, integer)


def _spelled(text: str, spec: bool) -> str:
    """A decimal's text as a regex: as written, or with `spec` also with trailing zeros
    (an integer only when it is short: see SchemaCompiler.integers)."""
    if not spec:
        return re.escape(text)
    if "." in text:
        return re.escape(text) + "0*"
    return re.escape(text) + (r"(\.0+)?" if abs(int(text)) <= _SHORT else "")


def number_spellings(v: int | float, sep: Separators) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("not JSON")
    if isinstance(v, float) and v.is_integer() and abs(v) <= _SHORT:
        v = int(v)
    if isinstance(v, int):
        return _spelled(str(v), True)
    return _spelled(repr(v), "e" not in repr(v)) if "e" not in repr(v) else sep.dumps(v)


def _bounded(lo, lo_strict: bool, hi, hi_strict: bool, integer: bool) -> str | None:
    """Integers or numbers within the bounds (none: any JSON number)."""
    if integer:
        return int_range(_int_lo(lo, lo_strict), _int_hi(hi, hi_strict))
    if lo is None and hi is None:
        return JSON_NUMBER
    return decimal_range(lo, lo_strict, hi, hi_strict)


def _bounds(s: dict):
    lo = lo_strict = hi = hi_strict = None
    # draft-04 writes an exclusive bound as a boolean next to minimum/maximum
    cands_lo = (
        [(to_fraction(s["minimum"]), s.get("exclusiveMinimum") is True)] if "minimum" in s else []
    )
    if "exclusiveMinimum" in s and not isinstance(s["exclusiveMinimum"], bool):
        cands_lo.append((to_fraction(s["exclusiveMinimum"]), True))
    cands_hi = (
        [(to_fraction(s["maximum"]), s.get("exclusiveMaximum") is True)] if "maximum" in s else []
    )
    if "exclusiveMaximum" in s and not isinstance(s["exclusiveMaximum"], bool):
        cands_hi.append((to_fraction(s["exclusiveMaximum"]), True))
    if cands_lo:
        lo, lo_strict = max(cands_lo, key=lambda x: (x[0], x[1]))
    if cands_hi:
        hi, hi_strict = min(cands_hi, key=lambda x: (x[0], not x[1]))
    return lo, bool(lo_strict), hi, bool(hi_strict)


def _int_lo(lo: Fraction | None, strict: bool) -> int | None:
    """Smallest integer above (strict) or at the bound."""
    if lo is None:
        return None
    return math.floor(lo) + 1 if strict else math.ceil(lo)


def _int_hi(hi: Fraction | None, strict: bool) -> int | None:
    if hi is None:
        return None
    return math.ceil(hi) - 1 if strict else math.floor(hi)


def _two_five(m: int) -> tuple[int | None, int]:
    a = b = 0
    while m % 2 == 0:
        m, a = m // 2, a + 1
    while m % 5 == 0:
        m, b = m // 5, b + 1
    return (a, b) if m == 1 else (None, 0)


def _decimal_places(m: Fraction) -> int | None:
    for k in range(0, 20):
        if (m * 10**k).denominator == 1:
            return k
    return None


def _decimal_text(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    k = _decimal_places(v) or 0
    sign = "-" if v < 0 else ""
    n = abs(v) * 10**k
    digits = str(n.numerator).rjust(k + 1, "0")
    return f"{sign}{digits[:-k]}.{digits[-k:]}"
