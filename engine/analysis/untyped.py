"""Schema nodes that look typed but are not: keywords of one type (`properties`, `items`,
`maxLength`, `minimum`, ...) with no `type` beside them. JSON Schema applies such keywords
only to values of their type, so any other JSON value is valid there: the model may write
a number where the author meant an object (a real Github schema's `shipment`), and the
doctor's samples do."""

from __future__ import annotations

from ..constraint import Constraint
from ..schema.pointer import follow_refs, join_raw, subschema_parts, walkable

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
    if constraint.kind != "schema":
        return []
    root = walkable(constraint.text)
    out: list[dict] = []
    if root is not None:
        _walk(root, root, "/", out, set())
    return out[:MAX_NOTES]


def _walk(root: dict, node, ptr: str, out: list, seen: set) -> None:
    node, ptr = follow_refs(root, node, ptr)
    if not isinstance(node, dict) or ptr in seen or len(out) >= MAX_NOTES:
        return
    seen.add(ptr)
    note = _note(node, ptr)
    if note is not None:
        out.append(note)
    for part, sub in subschema_parts(node):
        _walk(root, sub, join_raw(ptr.rstrip("/"), part), out, seen)
