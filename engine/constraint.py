"""What the user constrains with (regex, JSON schema, grammar) and the one whitespace
policy that every backend applies to a JSON schema in a run."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import CfsmError
from .limits import MAX_GRAMMAR_CHARS, MAX_REGEX_CHARS, MAX_SCHEMA_CHARS
from .schema.to_regex import schema_regex
from .schema.whitespace import FLEXIBLE_WS, WHITESPACE_POLICIES, WhitespacePolicy

KINDS = ("regex", "schema", "grammar")


@dataclass(frozen=True)
class Constraint:
    kind: str
    text: str
    whitespace: str = "compact"
    lenient: bool = False  # compile keywords a backend cannot enforce, with a warning
    # JSON Schema's own reading: objects stay open unless `additionalProperties` closes
    # them, and an integer value may be written `1.0`. The default is generation's
    # reading: objects that list `properties` are closed, each number has one spelling.
    spec: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CfsmError(
                "invalid_input", f"constraint kind must be one of {KINDS}, not {self.kind!r}"
            )
        WhitespacePolicy.of(self.whitespace)  # an unknown policy says so

    @property
    def ws(self) -> WhitespacePolicy:
        return WhitespacePolicy.of(self.whitespace)

    @classmethod
    def from_inputs(
        cls,
        kind: str,
        text: str,
        whitespace: str = "compact",
        lenient: bool = False,
        spec: bool = False,
        require_text: bool = True,
    ) -> Constraint:
        """A constraint from what a user typed (page, API, CLI, a requests line): lenient and
        the spec reading apply to schemas only; an empty field and an oversized grammar are
        refused by name."""
        if kind not in KINDS:
            raise CfsmError(
                "invalid_input", f"constraint kind must be one of {KINDS}, not {kind!r}"
            )
        if not isinstance(text, str):
            raise CfsmError("invalid_input", f"the {kind} must be text, not {type(text).__name__}")
        if require_text and not text.strip():
            raise CfsmError("invalid_input", f"the {kind} is empty")
        if kind == "grammar" and len(text) > MAX_GRAMMAR_CHARS:
            raise CfsmError(
                "input_too_large", f"grammar is longer than {MAX_GRAMMAR_CHARS} characters"
            )
        schema = kind == "schema"
        return cls(
            kind, text, whitespace or "compact", bool(lenient) and schema, bool(spec) and schema
        )

    @property
    def key(self) -> str:
        h = hashlib.sha256(
            f"{self.kind}\x00{self.whitespace}\x00{int(self.lenient)}{int(self.spec)}\x00{self.text}".encode(
                "utf-8", "surrogatepass"
            )
        )
        return h.hexdigest()[:20]

    @property
    def max_regex_chars(self) -> int:
        """How long its regex may be: a typed regex is held to the input limit, a schema's
        compiled regex to what the schema limit can produce."""
        return MAX_REGEX_CHARS if self.kind == "regex" else 25 * MAX_SCHEMA_CHARS

    def schema_obj(self) -> dict | bool:
        return parse_schema(self.text)

    def regex(self) -> str | None:
        """The regex behind the FSM view (None for grammars, which have no finite automaton)."""
        if self.kind == "regex":
            return self.text
        if self.kind == "schema":
            return schema_to_regex(self.text, self.whitespace, self.lenient, self.spec)
        return None

    def regex_warnings(self) -> list[str]:
        """What the regex path leaves unenforced (only ever non-empty when lenient)."""
        if self.kind != "schema":
            return []
        return list(
            compile_schema_regex(self.text, self.whitespace, self.lenient, self.spec).warnings
        )


def load_schema_arg(arg: str) -> str:
    """`--schema` takes a path or inline JSON."""
    s = arg.strip()
    if s.startswith("{") or s in ("true", "false"):
        return s
    p = Path(arg)
    if p.exists():
        if p.stat().st_size > MAX_SCHEMA_CHARS:
            raise CfsmError(
                "input_too_large", f"schema file {arg} is larger than {MAX_SCHEMA_CHARS} bytes"
            )
        return p.read_text(encoding="utf-8")
    raise CfsmError(
        "invalid_schema", f"--schema {arg!r} is neither inline JSON nor an existing file"
    )


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


def parse_schema(text: str) -> dict | bool:
    obj = load_json(text, "schema", "invalid_schema")
    if not isinstance(obj, (dict, bool)):
        raise CfsmError("invalid_schema", "a JSON schema must be an object or a boolean")
    import jsonschema

    try:
        jsonschema.validators.validator_for(obj).check_schema(obj)
    except jsonschema.SchemaError as exc:
        raise CfsmError("invalid_schema", f"invalid JSON schema: {exc.message}") from exc
    if obj is False:
        raise CfsmError("unsatisfiable", "the schema `false` admits no value")
    return obj


def schema_to_regex(
    text: str, whitespace: str = "compact", lenient: bool = False, spec: bool = False
) -> str:
    """JSON schema -> regex by the project's own exact compiler (engine/schema_regex.py)."""
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


def dump_as_generated(doc, schema=None, whitespace: str = "compact", allow_nan: bool = True) -> str:
    """A document written the way generation writes it: keys in the schema's order,
    separators by the whitespace policy (flexible writes compact), non-ASCII as is.
    With allow_nan False, NaN/Infinity (not JSON) raise ValueError."""
    seps = WhitespacePolicy.of(whitespace).separators
    ordered = reorder_like_schema(doc, schema) if schema is not None else doc
    return json.dumps(ordered, separators=seps, ensure_ascii=False, allow_nan=allow_nan)


def reorder_like_schema(doc, schema):
    """A document with its keys in the schema's property order (the order generation
    follows: own `properties`, then those of `allOf`/`anyOf`/`oneOf` members, as the
    compiler merges them), recursively; keys the schema does not list keep their place at
    the end."""
    if isinstance(doc, dict) and isinstance(schema, dict):
        props = _property_order(schema)
        out = {k: reorder_like_schema(doc[k], props[k]) for k in props if k in doc}
        out.update({k: v for k, v in doc.items() if k not in out})
        return out
    if isinstance(doc, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        return [reorder_like_schema(x, schema["items"]) for x in doc]
    return doc


def _property_order(schema: dict) -> dict:
    props = (
        dict(schema.get("properties") or {}) if isinstance(schema.get("properties"), dict) else {}
    )
    for kw in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(kw) or []:
            if isinstance(sub, dict):
                for k, v in _property_order(sub).items():
                    props.setdefault(k, v)
    return props


__all__ = [
    "FLEXIBLE_WS",
    "KINDS",
    "WHITESPACE_POLICIES",
    "Constraint",
    "WhitespacePolicy",
    "compile_schema_regex",
    "dump_as_generated",
    "load_json",
    "load_schema_arg",
    "parse_schema",
    "reorder_like_schema",
    "schema_to_regex",
]
