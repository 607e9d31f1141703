"""Documents written as generation writes them (keys in the schema's order, separators by
the whitespace policy): how checks and benchmarks spell an instance."""

from __future__ import annotations

import json

from .whitespace import WhitespacePolicy


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
