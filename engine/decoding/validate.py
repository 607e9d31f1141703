"""Is a finished output valid? Checked independently of the backend that produced it:
JSON schemas with the `jsonschema` library, `format` included (its own checkers, except
`time` and `date-time`, whose RFC 3339 leap seconds it rejects: those are checked here)
and `pattern` read as ECMA-262 (engine/ecma_pattern.py),
regexes with Python's `re.fullmatch`, grammars by the backend's own acceptance (there is
no second grammar engine to ask)."""

from __future__ import annotations

import datetime
import functools
import json
import re

from ..constraint import Constraint
from ..lazy import lazy_module
from ..schema.ecma import ecma_schema

jsonschema = lazy_module("jsonschema")

_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?([zZ]|([+-])(\d\d):(\d\d))", re.ASCII)


def rfc3339_time(text: str) -> bool:
    """RFC 3339 `full-time`: a leap second (:60) only where it is 23:59:60 in UTC."""
    m = _TIME.fullmatch(text)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    oh, om = (int(m[7]), int(m[8])) if m[6] else (0, 0)
    if h > 23 or mi > 59 or sec > 60 or oh > 23 or om > 59:
        return False
    if sec == 60:
        utc = (
            (h * 60 + mi - (1 if m[6] == "+" else -1) * (oh * 60 + om)) % 1440
            if m[6]
            else h * 60 + mi
        )
        return utc == 23 * 60 + 59
    return True


def rfc3339_date_time(text: str) -> bool:
    if (
        len(text) < 11
        or text[10] not in "tT"
        or not re.fullmatch(r"\d{4}-\d\d-\d\d", text[:10], re.ASCII)
    ):
        return False
    try:
        datetime.date.fromisoformat(text[:10])
    except ValueError:
        return False
    return rfc3339_time(text[11:])


@functools.lru_cache(maxsize=1)
def format_checker():
    checker = jsonschema.FormatChecker()  # every format jsonschema can check with what is installed
    checker.checks("time")(lambda x: not isinstance(x, str) or rfc3339_time(x))
    checker.checks("date-time")(lambda x: not isinstance(x, str) or rfc3339_date_time(x))
    return checker


def validate_output(
    constraint: Constraint | None, text: str, finished: bool, reason: str, accepted: bool | None
) -> tuple[bool | None, str]:
    """(valid, one-line message). `valid` is None when there is nothing to check against
    (free decoding, or a regex Python cannot compile), False for an unfinished output."""
    if constraint is None:
        return None, "free decoding: no constraint to validate against"
    if not finished:
        return False, f"not finished ({reason}): the output is incomplete"
    if constraint.kind == "schema":
        return _check_schema(constraint, text)
    if constraint.kind == "regex":
        try:
            # ASCII: the engine spells \w \d \s (and their negations) in ASCII for every backend
            pattern = re.compile(constraint.text, re.ASCII)
        except (re.error, OverflowError, RecursionError) as exc:
            return None, f"Python's re cannot check this regex ({exc})"
        if pattern.fullmatch(text):
            return True, "matches the regex (re.fullmatch)"
        return False, "does not match the regex (re.fullmatch)"
    return (
        bool(accepted),
        "the grammar accepts it (backend)"
        if accepted
        else "the grammar does not accept it (backend)",
    )


def _check_schema(constraint: Constraint, text: str) -> tuple[bool, str]:
    try:
        doc = json.loads(text)
    except (
        ValueError,
        RecursionError,
    ) as exc:  # JSONDecodeError is a ValueError; so are huge integers
        return False, " ".join(f"not JSON: {exc}".split())[:300]
    try:
        schema = constraint.schema_obj()
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        checked = ecma_schema(schema)  # `pattern` as ECMA-262 reads it, as the compiler does
        err = jsonschema.exceptions.best_match(
            cls(checked, format_checker=format_checker()).iter_errors(doc)
        )
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref: say so, do not fail the run
        return None, " ".join(f"could not check against the schema: {exc}".split())[:300]
    if err is None:
        return True, f"valid against the schema ({cls.__name__.replace('Validator', '')})"
    where = "/" + "/".join(str(p) for p in err.absolute_path)
    return False, " ".join(f"at {where}: {err.message}".split())[:300]
