"""JSON pointers (RFC 6901) into a schema, built and resolved in this one module.

A place in a document is a path of keys and item indices. Its schema pointer names the
schema node that governs the value there, walked the way a validator would:

- a key: `properties/<key>` when the object lists it, else `patternProperties/<pattern>`
  for the first pattern the key matches, else `additionalProperties` when that is a schema;
- an item index: `prefixItems/<i>` for a listed position, else `items`;
- a local `$ref` on the way is followed: the pointer goes on from its target
  (`/$defs/node/properties/next`), so it can be resolved in the schema as written.

The stopping rule: a pointer names the deepest node that the path reaches without
guessing, so it never names a node the schema does not have. It stops at a key that no
keyword admits (a closed or open object: the object is the place), at `anyOf`/`oneOf`/
`allOf` whose branch the path does not decide, and at a reference that is not local.
Without a schema (a caller that has only the text), a path is spelled `properties/<key>`
and `items`, as the old places were.

A key the pointer does not spell (a free key under `additionalProperties` or
`patternProperties`, or one no keyword admits, where the walk stops at its object) travels
beside it as `Located.label` (`key "app"`): `locate`/`locate_scan` are the one way the
places, the Doctor and why-unfinished turn a document position into a schema place."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from ..lazy import lazy_module

regex = lazy_module("regex")  # Python-syntax patterns with a time limit per match

MAX_REF_HOPS = 32  # a chain of references longer than this is left where it is
# A schema's patternProperties are the user's regexes and keys can be the user's text: a
# backtracking pattern such as `(a+)+$` must not hold the server on one key
PATTERN_MATCH_S = 0.05


def escape(key: str) -> str:
    """A key as one pointer segment (`~` -> `~0`, `/` -> `~1`)."""
    return key.replace("~", "~0").replace("/", "~1")


def unescape(segment: str) -> str:
    """One pointer segment back to its key."""
    return segment.replace("~1", "/").replace("~0", "~")


def split(pointer: str) -> list[str]:
    """A pointer's segments, unescaped (`/` and `` are the root: no segments)."""
    return [unescape(p) for p in pointer.strip("/").split("/") if p] if pointer else []


def join(pointer: str, *segments: str | int) -> str:
    """`pointer` with segments appended, each escaped (`join("/a", "b/c") == "/a/b~1c"`)."""
    parts = [p for p in pointer.strip("/").split("/") if p] if pointer else []
    parts += [escape(str(s)) for s in segments]
    return "/" + "/".join(parts)


def join_raw(pointer: str, part: str) -> str:
    """`pointer` with an already escaped part (`properties/a~1b`) appended."""
    return f"{pointer}/{part}" if part else (pointer or "/")


def resolve(doc, pointer: str):
    """(found, value) for the node at `pointer` in `doc` (lists take decimal indices)."""
    cur = doc
    for p in split(pointer):
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and p.isdigit() and int(p) < len(cur):
            cur = cur[int(p)]
        else:
            return False, None
    return True, cur


def resolve_ref(root, ref: str):
    """The target of a local `$ref` (`#`, `#/…`, percent-encoded as URI fragments are), or
    None where it is not local (an `$anchor` or another document) or points at nothing."""
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        return None
    found, node = resolve(root, ref_pointer(ref))
    return node if found else None


def ref_pointer(ref: str) -> str:
    """The pointer (escaped, as `resolve` takes it) of a local `$ref`'s target."""
    return "/" + unquote(ref[1:]).strip("/")


def follow_refs(root, node, pointer: str) -> tuple[object, str]:
    """(node, pointer) with `node`'s `$ref` chain followed to where it ends (`pointer` is
    where `node` sits; a reference that is not local leaves both as they are)."""
    for _ in range(MAX_REF_HOPS):
        ref = node.get("$ref") if isinstance(node, dict) else None
        target = resolve_ref(root, ref) if ref is not None else None
        if target is None:
            return node, pointer
        node, pointer = target, ref_pointer(ref)
    return node, pointer


BRANCHES = ("anyOf", "oneOf", "allOf")


def defining_pointer(root, pointer: str) -> str:
    """`pointer` as a place the raw schema has: the lowering names places by the path it
    walked, which runs through `$ref`s and through branches merged with their parent's
    keywords (`/anyOf/0/properties/x` where `properties` is the parent's). Walked here
    segment by segment: a segment the node lacks is looked for through the node's local
    `$ref` (the pointer then continues at the target, where it is written), and a branch
    step (`anyOf/0`) the rest of the path is not under is skipped. The pointer unchanged
    where it resolves already, or where no such walk reaches its end."""
    if resolve(root, pointer)[0]:
        return pointer
    parts, node, at, i = split(pointer), root, "/", 0
    for _ in range(4 * len(parts) + 8):
        if i >= len(parts):
            return at
        p = parts[i]
        if p in BRANCHES and _merged_branch(root, node, parts, i):
            i += 2  # a branch the lowering merged with its parent: the parent has the rest
            continue
        child = _step(node, p)
        if child is not None:
            node, at, i = child, join(at, p), i + 1
            continue
        ref = node.get("$ref") if isinstance(node, dict) else None
        target = resolve_ref(root, ref) if ref is not None else None
        if target is not None and target is not node:
            node, at = target, ref_pointer(ref)
            continue
        inside = _branch_with(root, node, at, p)
        if inside is not None:  # a branch's keyword the lowering merged into its parent
            node, at = inside
            continue
        if p in BRANCHES and i + 1 < len(parts):
            i += 2  # the branch's keywords merged into its parent's: the parent has the rest
            continue
        return pointer
    return pointer


def _merged_branch(root, node, parts: list[str], i: int) -> bool:
    """Is `parts[i:i+2]` a branch step whose next segment is the parent's, not the
    branch's (`anyOf/0` holding only `required`, then `properties` of the parent)?"""
    if i + 2 >= len(parts):
        return False
    branch = _step(_step(node, parts[i]), parts[i + 1])
    branch = follow_refs(root, branch, "/")[0]
    nxt = parts[i + 2]
    return (
        isinstance(node, dict) and nxt in node and not (isinstance(branch, dict) and nxt in branch)
    )


def _branch_with(root, node, at: str, part: str):
    """(branch, its pointer) of the first `allOf`/`anyOf`/`oneOf` member of `node` (a
    local `$ref` member followed) that has `part`; None where none has it."""
    if not isinstance(node, dict):
        return None
    for kw in BRANCHES:
        members = node.get(kw)
        for j, member in enumerate(members if isinstance(members, list) else []):
            here = join(at, kw, j)
            member, here = follow_refs(root, member, here)
            if isinstance(member, dict) and part in member:
                return member, here
    return None


def _step(node, part: str):
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def _key_step(node: dict, key: str) -> str | None:
    """Which keyword of an object schema governs `key`, as an escaped pointer part."""
    props = node.get("properties")
    if isinstance(props, dict) and key in props:
        return "properties/" + escape(key)
    patterns = node.get("patternProperties")
    if isinstance(patterns, dict):
        for pat in patterns:
            try:
                if regex.search(pat, key, timeout=PATTERN_MATCH_S):
                    return "patternProperties/" + escape(pat)
            except (regex.error, TimeoutError, RecursionError, OverflowError):
                continue  # an unreadable or runaway pattern governs nothing here
    if isinstance(node.get("additionalProperties"), dict):
        return "additionalProperties"
    return None


def _index_step(node: dict, index: int) -> str | None:
    prefix = node.get("prefixItems")
    if isinstance(prefix, list) and index < len(prefix):
        return f"prefixItems/{index}"
    items = node.get("items")
    if isinstance(items, list):  # draft-4 tuple form
        return f"items/{index}" if index < len(items) else None
    return "items" if isinstance(items, dict) else None


# keywords beside which an object's own keywords do not tell every key it admits
_UNDECIDED = ("anyOf", "oneOf", "allOf", "$ref", "$dynamicRef", "if", "dependentSchemas")


@dataclass(frozen=True)
class Located:
    """Where a document path lands in a schema: the node and its pointer, and the key the
    pointer does not spell, so a page can show it beside the pointer instead of inventing
    a node: a free key (under additionalProperties or patternProperties), or a key the
    schema does not list, where the walk stops at the (open) object."""

    node: object
    pointer: str
    key: str | None = None
    listed: bool = True  # False: `key` is one no keyword of the object admits

    @property
    def label(self) -> str:
        """The key as the page shows it beside the pointer ('' when the pointer says it)."""
        if self.key is None:
            return ""
        return f"key {json.dumps(self.key, ensure_ascii=False)}" + (
            ", not in the schema" if not self.listed else ""
        )


def locate(schema, path: Sequence[str | int]) -> Located:
    """The deepest schema node `path` reaches (the stopping rule above), with the key the
    pointer leaves out; without a schema the path is spelled as `text_pointer` spells it."""
    if not isinstance(schema, dict):
        return Located(None, text_pointer(path))
    node, pointer = follow_refs(schema, schema, "/")
    key: str | None = None
    for step in path:
        if not isinstance(node, dict):
            break
        part = _index_step(node, step) if isinstance(step, int) else _key_step(node, str(step))
        if part is None:
            if isinstance(step, int):
                break
            listed = any(k in node for k in _UNDECIDED)  # a branch may list it
            return Located(node, pointer or "/", str(step), listed=listed)
        if part.startswith(("additionalProperties", "patternProperties/")):
            key = str(step)  # a free key: the pointer names its keyword, not the key
        child = _child(node, part)
        node, pointer = follow_refs(schema, child, join_raw(pointer.rstrip("/"), part))
    return Located(node, pointer or "/", key)


def locate_scan(schema, stack: list, key: str | None = None) -> Located:
    """`locate` for a JSON scan's stack (`scan_path`): the one way the places, the Doctor
    and why-unfinished turn a position in a text into a place in the schema."""
    return locate(schema, scan_path(stack, key))


def choosing_key(stack: list) -> list:
    """A scan stack whose innermost object is choosing its next key (its place is the
    object itself, whatever key was in progress)."""
    return [*stack[:-1], ["obj", None]] if stack and stack[-1][0] == "obj" else stack


def _child(node: dict, part: str):
    """The subschema an escaped pointer part (`properties/a~1b`, `items`) names in `node`."""
    return resolve(node, "/" + part)[1]


def subschema_parts(node: dict):
    """(escaped pointer part, subschema) for each subschema a value under `node` can be
    governed by: properties, patternProperties, additionalProperties, prefixItems, items
    and the branches of anyOf/oneOf/allOf."""
    for kw in ("properties", "patternProperties"):
        for name, sub in (node.get(kw) or {}).items() if isinstance(node.get(kw), dict) else ():
            yield f"{kw}/{escape(name)}", sub
    for kw in ("additionalProperties", "items"):
        if isinstance(node.get(kw), dict):
            yield kw, node[kw]
    for kw in ("prefixItems", "items", "anyOf", "oneOf", "allOf"):
        if isinstance(node.get(kw), list):
            for i, sub in enumerate(node[kw]):
                yield f"{kw}/{i}", sub


def schema_nodes(root, node=None, pointer: str = "/", seen: set | None = None):
    """(node, pointer) for each object node of the schema in document order, depth first
    through `subschema_parts`, references followed to their targets and each target given
    once: the walk the doctor's lists (unbounded parts, untyped nodes) share. Lazy: a
    caller that has enough stops early."""
    seen = set() if seen is None else seen
    node, pointer = follow_refs(root, root if node is None else node, pointer)
    if not isinstance(node, dict) or pointer in seen:
        return
    seen.add(pointer)
    yield node, pointer
    for part, sub in subschema_parts(node):
        yield from schema_nodes(root, sub, join_raw(pointer.rstrip("/"), part), seen)


def schema_pointer(schema, path: Sequence[str | int]) -> str:
    """The schema pointer of a document path; `properties/…`/`items` without a schema."""
    return locate(schema, path).pointer


def text_pointer(path: Iterable[str | int]) -> str:
    """A document path spelled as a schema pointer with no schema to walk."""
    parts = ["items" if isinstance(s, int) else "properties/" + escape(str(s)) for s in path]
    return "/" + "/".join(parts)


def scan_path(stack: list, key: str | None = None) -> list[str | int]:
    """The document path of a JSON scan's stack (`["obj", key] / ["arr", index]`): the value
    whose key is known; where a key is being chosen (None) the path ends at the object.
    `key` names the key being written in the innermost object, when the caller knows it."""
    path: list[str | int] = []
    for depth, (kind, v) in enumerate(stack):
        if kind == "arr":
            path.append(v)
            continue
        name = key if depth == len(stack) - 1 and key is not None else v
        if name is None:
            break
        path.append(str(name))
    return path


def walkable(schema_text: str) -> dict | None:
    """A schema's text parsed for walking pointers in it; None where it is not a JSON
    object (pointers are then spelled as `text_pointer` spells them)."""
    try:
        obj = json.loads(schema_text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
