"""Exact regexes for JSON numbers within bounds: integer ranges digit by digit, decimal
bounds by comparing fraction digits, `multipleOf` where a regular language can say it.
Every function returns None for an empty language. Values are compared exactly as
decimals (the schema's bounds are read from their shortest decimal spelling)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

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
