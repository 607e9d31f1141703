"""Schema nodes that look typed but are not: keywords of one type (`properties`, `items`,
`maxLength`, `minimum`, ...) with no `type` beside them. JSON Schema applies such keywords
only to values of their type, so any other JSON value is valid there: the model may write
a number where the author meant an object (a real Github schema's `shipment`), and the
doctor's samples do."""

from __future__ import annotations

import itertools

from ..constraint import Constraint
from ..schema.pointer import schema_nodes, walkable

MAX_NOTES = 12
_IMPLIES = (  # the type a keyword belongs to, in the order the note names them
    ("object", ("properties", "required", "additionalProperties", "patternProperties")),
    ("array", ("items", "prefixItems", "minItems", "maxItems")),
    ("string", ("maxLength", "minLength", "pattern", "format")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")),
)
# keywords that give a node its values some other way: a note would be wrong there
_TYPED_OTHERWISE = ("type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "if")


def _note(node: dict, ptr: str) -> dict | None:
    if any(k in node for k in _TYPED_OTHERWISE):
        return None
    for kind, words in _IMPLIES:
        used = [w for w in words if w in node]
        if used:
            return {
                "where": ptr,
                "what": f"has `{used[0]}` but no `type`, so any JSON value is valid there "
                f"(`{used[0]}` only applies to {'an' if kind[0] in 'ao' else 'a'} {kind})",
                "fix": f'add "type": "{kind}"',
            }
    return None


def untyped_places(constraint: Constraint) -> list[dict]:
    """Every such node of a schema constraint (at most MAX_NOTES): where, what, the fix."""
    root = walkable(constraint.text) if constraint.kind == "schema" else None
    if root is None:
        return []
    notes = (_note(node, ptr) for node, ptr in schema_nodes(root))
    return list(itertools.islice((n for n in notes if n is not None), MAX_NOTES))
