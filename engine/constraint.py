"""What the user constrains with (regex, JSON schema, grammar) and the one whitespace
policy that every backend applies to a JSON schema in a run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import CfsmError
from .limits import MAX_GRAMMAR_CHARS, MAX_SCHEMA_CHARS  # noqa: F401 - MAX_GRAMMAR_CHARS is re-exported

KINDS = ("regex", "schema", "grammar")
WHITESPACE_POLICIES = ("compact", "spaced", "flexible")
FLEXIBLE_WS = "[ ]?"
_SENTINEL = "\ue000"  # private-use char marking where outlines-core puts whitespace


@dataclass(frozen=True)
class Constraint:
    kind: str
    text: str
    whitespace: str = "compact"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CfsmError("invalid_input", f"constraint kind must be one of {KINDS}, not {self.kind!r}")
        if self.whitespace not in WHITESPACE_POLICIES:
            raise CfsmError(
                "invalid_input",
                f"whitespace policy must be one of {WHITESPACE_POLICIES}, not {self.whitespace!r}",
            )

    @property
    def key(self) -> str:
        h = hashlib.sha256(f"{self.kind}\x00{self.whitespace}\x00{self.text}".encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:20]

    def schema_obj(self) -> dict | bool:
        return parse_schema(self.text)

    def regex(self) -> str | None:
        """The regex behind the FSM view (None for grammars, which have no finite automaton)."""
        if self.kind == "regex":
            return self.text
        if self.kind == "schema":
            return schema_to_regex(self.text, self.whitespace)
        return None


def load_schema_arg(arg: str) -> str:
    """`--schema` takes a path or inline JSON."""
    s = arg.strip()
    if s.startswith("{") or s in ("true", "false"):
        return s
    p = Path(arg)
    if p.exists():
        if p.stat().st_size > MAX_SCHEMA_CHARS:
            raise CfsmError("input_too_large", f"schema file {arg} is larger than {MAX_SCHEMA_CHARS} bytes")
        return p.read_text(encoding="utf-8")
    raise CfsmError("invalid_schema", f"--schema {arg!r} is neither inline JSON nor an existing file")


def parse_schema(text: str) -> dict | bool:
    if len(text) > MAX_SCHEMA_CHARS:
        raise CfsmError("input_too_large", f"schema is {len(text)} characters; the limit is {MAX_SCHEMA_CHARS}")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CfsmError("invalid_schema", f"schema is not valid JSON: {exc}") from exc
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


def _walk_schema(node, pointer: str = ""):
    """Yield (json pointer, sub-schema) for every object in the schema."""
    if isinstance(node, dict):
        yield pointer or "/", node
        for k, v in node.items():
            yield from _walk_schema(v, f"{pointer}/{k.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_schema(v, f"{pointer}/{i}")


def _unanchor_patterns(obj):
    """String `pattern`s are embedded in the document's regex, where ^ and $ would be
    anchors in the middle of it; a generated string matches its pattern in full anyway."""
    import copy

    obj = copy.deepcopy(obj)
    for _ptr, node in _walk_schema(obj):
        pat = node.get("pattern")
        if isinstance(pat, str):
            if pat.startswith("^"):
                pat = pat[1:]
            if pat.endswith("$") and not pat.endswith("\\$"):
                pat = pat[:-1]
            node["pattern"] = pat
    return obj


def _check_regexable(obj) -> None:
    """Reject what outlines-core's converter would get silently wrong."""
    for ptr, node in _walk_schema(obj):
        if node.get("enum") == [] and "properties" not in ptr.split("/")[-1:]:
            raise CfsmError("unsatisfiable", f"`enum` at {ptr} lists no values, so no document can match")
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) > 1:
            raise CfsmError(
                "unsupported_feature",
                f"`allOf` with {len(all_of)} subschemas at {ptr} cannot be turned into a regex "
                "(use the xgrammar or llguidance backend)",
            )


def schema_to_regex(text: str, whitespace: str = "compact") -> str:
    """JSON schema -> regex through outlines-core, then place whitespace by policy:
    compact `,` `:`; spaced `, ` `: ` (json.dumps style); flexible `[ ]?` everywhere."""
    obj = _unanchor_patterns(parse_schema(text))
    _check_regexable(obj)
    from outlines_core.json_schema import build_regex_from_schema

    try:
        rx = build_regex_from_schema(json.dumps(obj), whitespace_pattern=_SENTINEL)
    except Exception as exc:  # noqa: BLE001 - outlines-core raises ValueError/TypeError
        msg = " ".join(str(exc).split())
        kind = "unsupported_feature" if "support" in msg.lower() else "invalid_schema"
        raise CfsmError(kind, f"cannot turn the schema into a regex: {msg}") from exc
    if len(rx) > 25 * MAX_SCHEMA_CHARS:
        raise CfsmError("input_too_large", f"the schema's regex is {len(rx):,} characters long")
    if whitespace == "flexible":
        return rx.replace(_SENTINEL, FLEXIBLE_WS)
    if whitespace == "spaced":
        rx = rx.replace(_SENTINEL + "," + _SENTINEL, ", ").replace(_SENTINEL + ":" + _SENTINEL, ": ")
        rx = rx.replace("," + _SENTINEL, ", ")
    return rx.replace(_SENTINEL, "")


def reorder_like_schema(doc, schema):
    """A document with its keys in the schema's property order (the order generation
    follows), recursively; keys the schema does not list keep their place at the end."""
    if isinstance(doc, dict) and isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        props = schema["properties"]
        out = {k: reorder_like_schema(doc[k], props[k]) for k in props if k in doc}
        out.update({k: v for k, v in doc.items() if k not in out})
        return out
    if isinstance(doc, list) and isinstance(schema, dict) and isinstance(schema.get("items"), dict):
        return [reorder_like_schema(x, schema["items"]) for x in doc]
    return doc
