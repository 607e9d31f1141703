"""Regexes for the common string `format`s, each a subset of what the format's RFC (and
the JSON-Schema test suite) calls valid: what cannot be said exactly in a regular
language is left out (leap seconds other than 23:59:60Z: with an offset, the local time
that is a leap second depends on the offset written after it; `xn--` A-labels, whose
punycode needs decoding; hostnames past four labels) rather than let something invalid
through."""

from __future__ import annotations

from .numbers import alt

_2 = "[0-9]{2}"
_DAY_BY_MONTH = alt(
    [
        "(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])",
        "(0[13-9]|1[0-2])-(29|30)",
        "(0[13578]|1[02])-31",
    ]
)
_LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
# not 0000: most date libraries start at year 1
_YEAR = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
DATE = alt([f"{_YEAR}-{_DAY_BY_MONTH}", f"{_LEAP_YEAR}-02-29"])
_HMS = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
_OFFSET = "([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_SECFRAC = r"(\.[0-9]+)?"
TIME = alt([f"{_HMS}{_SECFRAC}{_OFFSET}", f"23:59:60{_SECFRAC}[zZ]"])
DATE_TIME = f"{DATE}[tT]{TIME}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
_H16 = "[0-9a-fA-F]{1,4}"


def _ipv6() -> str:
    """All RFC 4291 text forms: eight groups, or `::` standing for one or more groups."""
    forms = [f"({_H16}:){{7}}{_H16}", f"({_H16}:){{6}}{IPV4}"]
    for tail_v4 in (False, True):
        total = 6 if tail_v4 else 8
        end = IPV4 if tail_v4 else None
        for left in range(0, total):
            for right in range(0, total - left):
                if left + right > total - 1:
                    continue
                lpart = (
                    "" if left == 0 else (_H16 if left == 1 else f"({_H16}:){{{left - 1}}}{_H16}")
                )
                rgroups = (
                    []
                    if right == 0
                    else [_H16 if right == 1 else f"({_H16}:){{{right - 1}}}{_H16}"]
                )
                rpart = "".join(rgroups)
                if end is not None:
                    rpart = (rpart + ":" + end) if rpart else end
                forms.append(f"{lpart}::{rpart}")
    return alt(forms) or ""


IPV6 = _ipv6()
UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_A, _H = "[A-Za-z0-9]", "[A-Za-z0-9-]"


def _label(most: int) -> str:
    """1..most characters, letters/digits at both ends, no `--` in positions 3-4 (those
    are A-labels, whose punycode a regex cannot check)."""
    return (
        alt(
            [
                _A,
                _A + _A,
                _A + _H + _A,
                _A + _H + _H + _A,
                f"{_A}{_H}({_A}{_H}|-{_A}){_H}{{0,{most - 5}}}{_A}",
            ]
        )
        or ""
    )


# four labels at most, the last one shorter, so the whole name stays within 253 characters
HOSTNAME = rf"{_label(63)}(\.{_label(63)}){{0,2}}(\.{_label(59)})?"
_ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_QUOTED = (
    '\\\\"[ !#-\\[\\]-~]*\\\\"'  # a quoted local part, its quotes escaped inside the JSON string
)
EMAIL = (
    alt([rf"{_ATOM}(\.{_ATOM})*", _QUOTED])
    + "@"
    + alt([HOSTNAME, rf"\[{IPV4}\]", rf"\[IPv6:{IPV6}\]"])
)
_PCT = "%[0-9A-Fa-f]{2}"
_UNRESERVED = r"A-Za-z0-9._~!$&'()*+,;=\-"
_PCHAR = f"([{_UNRESERVED}:@]|{_PCT})"
_REGNAME = f"([{_UNRESERVED}]|{_PCT})*"
_QUERY = f"([{_UNRESERVED}:@/?]|{_PCT})*"
URI = (
    "[A-Za-z][A-Za-z0-9+.-]*:"
    + alt(
        [
            f"//(([{_UNRESERVED}:]|{_PCT})*@)?({_REGNAME}|\\[{IPV6}\\])(:[0-9]*)?(/{_PCHAR}*)*",
            f"/({_PCHAR}+(/{_PCHAR}*)*)?",
            f"{_PCHAR}+(/{_PCHAR}*)*",
        ]
    )
    + rf"(\?{_QUERY})?(#{_QUERY})?"
)

# OpenAPI's `byte`: base64 (RFC 4648 section 4), padded to whole quanta.
_B64 = "[A-Za-z0-9+/]"
BYTE = f"({_B64}{{4}})*({_B64}{{2}}==|{_B64}{{3}}=)?"
# RFC 6570 (level 4) as the `uri_template` checker reads it: literals and
# `{op? var(:prefix|*)?, ...}` expressions, without the reserved operators (=,!@|) and with
# prefixes of 1-3 digits. A literal is anything but controls, space and "%'<>\\^`{|}, or a
# %-escape.
_UT_LITERAL = f"([^\\x00-\\x20\"%'<>\\\\^`{{|}}\\x7f-\\x9f]|{_PCT})"
_UT_VARCHAR = "[A-Za-z0-9_]"
_UT_VARSPEC = f"{_UT_VARCHAR}(\\.?{_UT_VARCHAR})*(:[1-9][0-9]{{0,2}}|\\*)?"
URI_TEMPLATE = f"({_UT_LITERAL}|\\{{[+#./;?&]?{_UT_VARSPEC}(,{_UT_VARSPEC})*\\}})*"

FORMATS = {
    "date": DATE,
    "time": TIME,
    "date-time": DATE_TIME,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "uuid": UUID,
    "hostname": HOSTNAME,
    "email": EMAIL,
    "uri": URI,
    "uri-template": URI_TEMPLATE,
    "byte": BYTE,
}
