"""A user's JSON schema read, bounded and checked: not JSON, too large, nested too deep,
not a valid schema for its metaschema, or `false`: each a one-line error by name."""

from __future__ import annotations

import json

from ..errors import CfsmError
from ..lazy import lazy_module
from ..limits import MAX_SCHEMA_CHARS
from .pointer import join

jsonschema = lazy_module("jsonschema")  # format checkers, referencing: ~0.3 s to import


def load_json(text: str, what: str, kind: str):
    """A user's JSON (a schema, a tools list), bounded: `input_too_large` past the schema
    limit or nested deeper than Python's parser goes, `kind` where it is not JSON."""
    if len(text) > MAX_SCHEMA_CHARS:
        raise CfsmError(
            "input_too_large", f"{what} is {len(text)} characters; the limit is {MAX_SCHEMA_CHARS}"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CfsmError(kind, f"{what} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise CfsmError("input_too_large", f"{what} is nested too deeply") from None


def _metaschema_error(exc) -> str:
    """Where the schema breaks its metaschema and how, in one line (a long value cut)."""
    where = join("/", *exc.path) if exc.path else "/"
    what = exc.message
    if len(what) > 160:
        what = f"{what[:100]} ... {what[-50:]}"
    return f"invalid JSON schema at {where}: {what} (the metaschema's `{exc.validator}`)"


def parse_schema(text: str) -> dict | bool:
    obj = load_json(text, "schema", "invalid_schema")
    if not isinstance(obj, (dict, bool)):
        raise CfsmError("invalid_schema", "a JSON schema must be an object or a boolean")
    try:
        jsonschema.validators.validator_for(obj).check_schema(obj)
    except jsonschema.SchemaError as exc:
        raise CfsmError("invalid_schema", _metaschema_error(exc)) from exc
    if obj is False:
        raise CfsmError("unsatisfiable", "the schema `false` admits no value")
    return obj
