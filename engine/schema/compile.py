"""A schema text as its regex, memoized: the page, the backends and the doctor ask for the
same schema's regex many times."""

from __future__ import annotations

import functools

from ..errors import CfsmError
from ..limits import MAX_SCHEMA_CHARS
from .parse import parse_schema
from .to_regex import schema_regex


def schema_to_regex(
    text: str, whitespace: str = "compact", lenient: bool = False, spec: bool = False
) -> str:
    """JSON schema -> regex by the project's own exact compiler (engine/schema/to_regex.py)."""
    return compile_schema_regex(text, whitespace, lenient, spec).regex


@functools.lru_cache(maxsize=64)
def compile_schema_regex(
    text: str, whitespace: str = "compact", lenient: bool = False, spec: bool = False
):
    """The regex and the warnings of what `lenient` let through unenforced (memoized: the
    page, the backends and the doctor ask for the same schema's regex many times)."""
    rx = schema_regex(parse_schema(text), whitespace, lenient, spec)
    if len(rx.regex) > 25 * MAX_SCHEMA_CHARS:
        raise CfsmError(
            "input_too_large", f"the schema's regex is {len(rx.regex):,} characters long"
        )
    return rx
