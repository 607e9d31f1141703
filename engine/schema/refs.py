"""Local `$ref`s (JSON pointers and `$anchor`s into the same document) expanded in place
with a recursion depth, and `allOf` members merged keyword by keyword where the merge is
exact (else the conflict is named, so the caller can refuse it)."""

from __future__ import annotations

import contextlib
from fractions import Fraction
from urllib.parse import unquote

from ..errors import CfsmError
from .pointer import escape, ref_pointer, unescape


class RefResolver:
    def __init__(self, root, depth: int) -> None:
        self.root = root
        self.depth = depth
        self.stack: list[str] = []
        self.anchors = _anchors(root)
        self.nested_ids = _has_nested_id(root)

    def target(self, ref: str, ptr: str):
        if not ref.startswith("#"):
            raise CfsmError(
                "unsupported_feature",
                f"`$ref` at {ptr or '/'}: only references inside the schema "
                f"(starting with #) can be followed, not {ref!r}",
            )
        if self.nested_ids:
            raise CfsmError(
                "unsupported_feature",
                f"`$ref` at {ptr or '/'}: references under a nested `$id` are not supported",
            )
        frag = unquote(ref[1:])
        if frag and not frag.startswith("/"):
            if frag not in self.anchors:
                raise CfsmError(
                    "invalid_schema", f"`$ref` at {ptr or '/'}: no `$anchor` named {frag!r}"
                )
            return self.anchors[frag]
        node = self.root
        for part in [p for p in frag.split("/")[1:]]:
            part = unescape(part)
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise CfsmError(
                    "invalid_schema", f"`$ref` at {ptr or '/'}: {ref!r} points at nothing"
                ) from None
        return node

    def inline(self, s, ptr: str):
        """`s` with a top-level $ref replaced by its target merged with the siblings (no
        depth accounting: used to see through references when merging)."""
        for _ in range(16):
            if not isinstance(s, dict) or "$ref" not in s:
                return s
            target = self.target(s["$ref"], ptr)
            rest = {k: v for k, v in s.items() if k != "$ref"}
            if target is False:
                return False
            if target is True or not rest:
                s = target if target is not True else (rest or True)
                continue
            merged, conflict = merge_all([target, rest])
            if conflict or any(
                isinstance(x, dict)
                and any(k in x for k in ("unevaluatedProperties", "unevaluatedItems"))
                for x in (target, rest)
            ):
                return {"allOf": [target, rest]}
            s = merged
        raise CfsmError(
            "unsupported_feature",
            f"`$ref` at {ptr or '/'}: a chain of references that does not end",
        )

    @contextlib.contextmanager
    def entering(self, s: dict, ptr: str):
        """Yield (schema, pointer) with `$ref` resolved; (None, ptr) once a reference has
        been expanded `depth` times on this path (recursion stops there: no deeper values)."""
        ref = s.get("$ref")
        if ref is None:
            yield s, ptr
            return
        if self.stack.count(ref) >= self.depth:
            yield None, ptr
            return
        self.stack.append(ref)
        try:
            yield self.inline(s, ptr), self.defined_at(s, ptr)
        finally:
            self.stack.pop()

    def defined_at(self, s, ptr: str) -> str:
        """Where the schema a reference stands for is written: its target's pointer, a
        chain of references followed (a pointer through `$ref`s such as a CRD's
        `/properties/versions/items/.../properties/allOf/items` resolves nowhere in the raw
        schema; `/definitions/...JSONSchemaProps/properties/allOf/items` does). A reference
        with sibling keywords that constrain (not only annotations such as `description`),
        or one by `$anchor`, stays where it is written."""
        for _ in range(16):
            ref = s.get("$ref") if isinstance(s, dict) else None
            if not isinstance(ref, str) or not ref.startswith("#/"):
                return ptr
            if any(k != "$ref" and not is_annotation(k) for k in s):
                return ptr
            ptr = ref_pointer(ref)
            s = self.target(ref, ptr)
        return ptr


DATA_KEYWORDS = (
    "enum",
    "const",
    "examples",
    "default",
)  # keywords whose values are instances, not schemas
NAMED_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def subschemas(node, ptr: str = ""):
    """(pointer, subschema) for every subschema: maps of named subschemas (`properties`,
    `$defs`, ...) are walked into, not taken for schemas (a property may be named
    `default`), and data (`enum`, `default`) is skipped."""
    if isinstance(node, dict):
        yield ptr or "/", node
        for k, v in node.items():
            if k in DATA_KEYWORDS:
                continue
            if k in NAMED_SCHEMA_MAPS and isinstance(v, dict):
                for name, sub in v.items():
                    yield from subschemas(sub, f"{ptr}/{escape(k)}/{escape(name)}")
            else:
                yield from subschemas(v, f"{ptr}/{escape(k)}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from subschemas(v, f"{ptr}/{i}")


def _anchors(root) -> dict:
    return {n["$anchor"]: n for _, n in subschemas(root) if isinstance(n.get("$anchor"), str)}


def _has_nested_id(root) -> bool:
    return any(isinstance(n.get("$id"), str) for ptr, n in subschemas(root) if ptr != "/")


_MAX = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"}
_MIN = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"}
_ANNOT = {
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$id",
    "$schema",
    "$defs",
    "definitions",
    "$anchor",
    "deprecated",
    "readOnly",
    "writeOnly",
}


def is_annotation(k: str) -> bool:
    """A keyword that describes a value without constraining it: JSON Schema's own, and
    vendor extensions (`x-intellij-html-description`: two different ones refused an
    `allOf` that merges exactly)."""
    return k in _ANNOT or k.startswith("x-")


def json_equal(a, b) -> bool:
    """Equality as JSON Schema means it: 1 == 1.0, but true is not 1, at any depth."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _types(t) -> set[str]:
    ts = {t} if isinstance(t, str) else set(t)
    return ts | ({"integer"} if "number" in ts else set())


def _merge_key(k: str, a, b):
    """(merged value, conflict message or None)."""
    if json_equal(a, b):
        return a, None
    if is_annotation(k):
        return a, None
    if k in _MAX:
        return min(a, b), None
    if k in _MIN:
        return max(a, b), None
    if k == "type":
        return sorted(_types(a) & _types(b)), None  # [] when they share none: nothing matches
    if k == "required":
        return list(dict.fromkeys(list(a) + list(b))), None
    if k in ("properties", "dependentRequired"):
        out = dict(a)
        for name, sub in b.items():
            out[name] = (
                sub
                if name not in out
                else (
                    {"allOf": [out[name], sub]}
                    if k == "properties"
                    else list(dict.fromkeys(out[name] + sub))
                )
            )
        return out, None
    if k in ("items", "additionalProperties", "propertyNames", "contains", "unevaluatedProperties"):
        return {"allOf": [a, b]}, None
    if k == "enum":
        return [x for x in a if any(json_equal(x, y) for y in b)], None
    if k == "uniqueItems":
        return bool(a or b), None
    if k == "pattern":  # both hold: the string lowering intersects them
        listed = [*(a if isinstance(a, list) else [a]), *(b if isinstance(b, list) else [b])]
        return list(dict.fromkeys(listed)), None
    if k == "multipleOf":
        fa, fb = Fraction(str(a)), Fraction(str(b))
        big, small = max(fa, fb), min(fa, fb)
        if (big / small).denominator == 1:
            return max(a, b), None
        return a, f"`multipleOf` {a} and {b} together"
    return a, f"two different `{k}`s"


def merge_all(parts: list) -> tuple[dict, str | None]:
    """Merge `allOf` members; a conflict that has no exact merge is named."""
    out: dict = {}
    for p in parts:
        if p is True:
            continue
        for k, v in p.items():
            if k not in out:
                out[k] = v
                continue
            out[k], conflict = _merge_key(k, out[k], v)
            if conflict:
                return out, conflict
    return out, _closed_conflict(parts, out)


def _closed_conflict(parts: list, merged: dict) -> str | None:
    """A member that closes its object (`additionalProperties`) must list every property
    another member adds, else the merge would let those through."""
    if "prefixItems" in merged and any(
        isinstance(p, dict) and "items" in p and p.get("prefixItems") != merged["prefixItems"]
        for p in parts
    ):
        return (
            "`items` in one member and `prefixItems` in another (items applies after its own "
            "prefixItems only)"
        )
    names = set((merged.get("properties") or {}).keys())
    for p in parts:
        if (
            isinstance(p, dict)
            and "additionalProperties" in p
            and p["additionalProperties"] is not True
        ):
            own = set((p.get("properties") or {}).keys())
            if names - own or (merged.get("patternProperties") and not p.get("patternProperties")):
                return (
                    "members that close the object (`additionalProperties`) while others add "
                    "properties"
                )
    return None
