"""What each backend cannot enforce in a JSON schema, found by the conformance benchmark
and checked before compiling: refused with `unsupported_feature` naming the keyword and
its JSON pointer, or (lenient) compiled with a warning that travels with the run."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ..constraint import Constraint
from ..errors import CfsmError
from ..schema.pointer import join
from ..schema.refs import subschemas

if TYPE_CHECKING:
    from .base import GrammarBackend


def native_gaps(backend: GrammarBackend, schema) -> list[tuple[str, str, str]]:
    """(keyword, pointer, why) for each construct `backend` is known to mishandle."""
    rules = COMMON + list(backend.known_gaps)
    out = []
    for ptr, node in subschemas(schema):
        for rule in rules:
            hit = rule(node)
            if hit:
                out.append((hit[0], ptr, hit[1]))
    return out


_TYPED = {
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "additionalProperties",
}
_XG_NEVER = {
    "multipleOf": "ignored",
    "propertyNames": "ignored",
    "patternProperties": "ignored",
    "not": "ignored",
    "if": "ignored",
    "then": "ignored",
    "else": "ignored",
    "contains": "ignored",
    "minContains": "ignored",
    "maxContains": "ignored",
    "dependentRequired": "ignored",
    "dependentSchemas": "ignored",
    "dependencies": "ignored",
    "unevaluatedProperties": "not followed through applicators",
    "unevaluatedItems": "not followed through applicators",
    "minProperties": "ignored",
    "maxProperties": "ignored",
    "$dynamicRef": "not resolved",
    "format": "not checked",
    "oneOf": "treated as anyOf (overlaps accepted)",
}
_ANNOTATION = {
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$schema",
    "$id",
    "$defs",
    "definitions",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$anchor",
}


def _lookaround(node):
    pat = node.get("pattern")
    if isinstance(pat, str) and any(x in pat for x in ("(?=", "(?!", "(?<=", "(?<!")):
        return "pattern", "look-around in a pattern is dropped silently"
    return None


def _xg_keywords(node):
    for kw, why in _XG_NEVER.items():
        vacuous = node.get(kw) is True or node.get(kw) == {}
        if kw in node and not (
            vacuous and kw in ("propertyNames", "unevaluatedProperties", "unevaluatedItems")
        ):
            return kw, why
    if node.get("uniqueItems") is True:
        return "uniqueItems", "ignored"
    if "allOf" in node and len(node["allOf"]) > 1:
        return "allOf", "only partly merged"
    return None


def _xg_untyped(node):
    """xgrammar applies type keywords only when `type` says which type they are for."""
    if "type" not in node and "$ref" not in node:
        hit = sorted(k for k in node if k in _TYPED)
        if hit:
            return hit[0], "ignored without a `type`"
    return None


def _xg_siblings(node):
    """anyOf next to other constraints: xgrammar compiles the branches alone."""
    if "anyOf" in node:
        extra = sorted(k for k in node if k not in _ANNOTATION | {"anyOf", "type"})
        if extra:
            return "anyOf", f"`{extra[0]}` next to it is ignored"
    return None


def _xg_refs(node):
    ref = node.get("$ref")
    if isinstance(ref, str) and not (ref == "#" or ref.startswith("#/")):
        return "$ref", f"{ref!r} is not resolved"
    if (
        isinstance(ref, str)
        and len(node) > 1
        and any(k not in _ANNOTATION for k in node if k != "$ref")
    ):
        return "$ref", "keywords next to it are ignored"
    return None


def _xg_required(node):
    req = node.get("required") or []
    props = node.get("properties") or {}
    missing = [r for r in req if r not in props]
    if missing:
        return "required", f"{missing[0]!r} is not in `properties` and is not enforced"
    return None


_JSON_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _of_type(value, t: str) -> bool:
    if t in ("integer", "number"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok and (t == "number" or float(value).is_integer())
    return isinstance(value, _JSON_TYPES.get(t, object))


def _xg_enum_type(node):
    """An `enum`/`const` beside a `type` some of its values do not have: xgrammar writes the
    values as they are (a real Github schema's `builtin` is `type: object` with string
    values, so no document may have it, and xgrammar accepted `"builtin":"MODIFIABLE"`)."""
    types = node.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else None
    values = node.get("enum") if isinstance(node.get("enum"), list) else None
    if "const" in node:
        values = [node["const"]]
    if types and values is not None:
        for v in values:
            if not any(_of_type(v, t) for t in types):
                kw = "const" if "const" in node else "enum"
                shown = json.dumps(v)[:40]
                return kw, f"its value {shown} is not of type {types}: it is written anyway"
    return None


def _llg_formats(node):
    if node.get("format") in ("date", "time", "date-time", "hostname"):
        return (
            "format",
            f"{node['format']!r} lets invalid values through (leap days, leap seconds, hostnames)",
        )
    return None


def _llg_space_class(node):
    pat = node.get("pattern")
    if isinstance(pat, str) and ("\\S" in pat or "\\s" in pat):
        return "pattern", "its \\s and \\S differ from ECMA-262 (U+FEFF)"
    return None


_STANDARD_META = re.compile(
    r"https?://json-schema\.org/(draft/(2020-12|2019-09)/schema|draft-0[4-7]/schema)#?"
)


def _llg_prefix_items_next_to_additional_items(node):
    """Draft mixing: with `additionalItems` beside it, llguidance does not check the
    `prefixItems` item schemas (it accepted `[{...}, "test", 42]` where item 1 must be an
    integer)."""
    if isinstance(node.get("prefixItems"), list) and "additionalItems" in node:
        return "prefixItems", "item schemas not checked next to `additionalItems`"
    return None


def _custom_metaschema(node):
    meta = node.get("$schema")
    if isinstance(meta, str) and not _STANDARD_META.fullmatch(meta):
        return (
            "$schema",
            "a custom metaschema may turn vocabularies off; only the standard drafts are read",
        )
    return None


COMMON = [_custom_metaschema]  # for every backend, ours included
# Each adapter names its own list (`GrammarBackend.known_gaps`).
XGRAMMAR_GAPS = (
    _lookaround,
    _xg_keywords,
    _xg_untyped,
    _xg_siblings,
    _xg_refs,
    _xg_required,
    _xg_enum_type,
)
LLGUIDANCE_GAPS = (_llg_formats, _llg_space_class, _llg_prefix_items_next_to_additional_items)


def audit(backend: GrammarBackend, c: Constraint) -> list[str]:
    """Raise for a gap (unless lenient); return the warnings of what lenient let through."""
    if c.kind != "schema":
        return []
    warnings = []
    gaps = native_gaps(backend, c.schema_obj())
    name = backend.name
    if gaps and not c.lenient:
        kw, ptr, why = gaps[0]
        where = join(ptr, kw)
        raise CfsmError(
            "unsupported_feature",
            f"`{kw}` at {where} is not enforced by {name}: {why} "
            "(--lenient compiles it unenforced with a warning"
            + ("; the fsm backend may enforce it)" if backend.known_gaps else ")"),
        )
    for kw, ptr, why in gaps:
        where = join(ptr, kw)
        warnings.append(f"`{kw}` at {where} is NOT enforced by {name}: {why}")
    return warnings


# a keyword a library names: quoted (`Unimplemented keys: ["not"]`) or camel-cased
_NAMED_KEYWORD = re.compile(r'"([a-zA-Z$]+)"|\b([a-z]+[A-Z][a-zA-Z]*)\b')
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
POINTER_NAMED = re.compile(r"(?:^|[\s(])/[^\s,;)]*")  # a JSON pointer named in a message


def place_of(schema, message: str) -> str:
    """` (at /pointer)` of the first schema node using the keyword a library's refusal
    names (`Unimplemented keys: ["not"]`, `oneOf constraints are not supported`, `Unknown
    format: byte`), for a message that names no place; "" when none is found."""
    if POINTER_NAMED.search(message):
        return ""
    fmt = _UNKNOWN_FORMAT.search(message)
    wanted = [("format", fmt.group(1).strip("\"'"))] if fmt else []
    wanted += [(a or b, None) for a, b in _NAMED_KEYWORD.findall(message)]
    nodes = [(p, n) for p, n in subschemas(schema) if isinstance(n, dict)]
    for kw, value in wanted:
        for ptr, node in nodes:
            if kw in node and (value is None or node[kw] == value):
                return f" (at {join(ptr, kw)})"
    return ""
