"""How each native library spells this lab's JSON settings (the whitespace policy, JSON
Schema's own reading), read by its adapter and by its trigger grammars alike."""

from __future__ import annotations

import copy

from ..constraint import Constraint
from ..schema.pointer import ref_pointer, resolve, resolve_ref
from ..schema.refs import NAMED_SCHEMA_MAPS, subschemas

_OPENERS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
# Subschemas that test a value rather than describe it: closing an object under them would
# change what they accept or reject (a `not` would refuse more, an `if` would match less)
_TESTS = {"not", "if", "then", "else", "contains", "propertyNames", "dependentSchemas"}


def _under_a_test(ptr: str) -> bool:
    """Whether a subschema's pointer passes through one of the `_TESTS` keywords (a
    segment after a named map, such as a property called `not`, is a name, not one)."""
    parts = ptr.strip("/").split("/")
    return any(
        p in _TESTS and (i == 0 or parts[i - 1] not in NAMED_SCHEMA_MAPS)
        for i, p in enumerate(parts)
    )


def xgrammar_json_options(constraint: Constraint) -> dict:
    """xgrammar's JSON options for our whitespace policy; objects closed unless JSON
    Schema's own reading is asked for."""
    ws = constraint.ws
    return {
        "any_whitespace": ws.flexible,
        "separators": None if ws.flexible else ws.separators,
        "max_whitespace_cnt": 1 if ws.flexible else None,
        "strict_mode": not constraint.spec,
    }


def llguidance_json_overrides(constraint: Constraint) -> dict:
    """llguidance's JSON options for our whitespace policy."""
    ws = constraint.ws
    opts = {"item_separator": ws.item, "key_separator": ws.key, "whitespace_flexible": ws.flexible}
    if ws.flexible:
        opts["whitespace_pattern"] = ws.pattern
    return opts


def closed_reading(schema):
    """`schema` read as generation reads it (the default, not `--spec`): an object schema
    that lists `properties` and says nothing of other keys gets `additionalProperties:
    false`, as fsm and xgrammar (strict mode) close it; llguidance has no closed mode, so it
    is given the schema closed. An object assembled by `allOf` stays open (closing each
    member would refuse the other members' keys): its members, and the targets of members
    that are references, are left as they are; so is every object under `not`, `if`,
    `contains` and the like, which test a value rather than describe it."""
    if not isinstance(schema, dict):
        return schema
    out = copy.deepcopy(schema)
    keep_open = set()
    for ptr, node in subschemas(out):
        for i, member in enumerate(node.get("allOf") or []):
            keep_open.add(f"{ptr.rstrip('/')}/allOf/{i}")
            target = resolve_ref(out, member.get("$ref")) if isinstance(member, dict) else None
            if target is not None:
                keep_open.add(ref_pointer(member["$ref"]))
    for ptr, node in list(subschemas(out)):
        if ptr in keep_open or _under_a_test(ptr) or not isinstance(node.get("properties"), dict):
            continue
        if not any(k in node for k in _OPENERS):
            node["additionalProperties"] = False
    return out


def llguidance_schema(constraint: Constraint):
    """The schema object llguidance is given for a schema constraint: closed as the other
    backends read it by default (`closed_reading`), as written with `spec`; the backend and
    its trigger grammars both take it from here, so they hold the same language."""
    obj = constraint.schema_obj()
    return obj if constraint.spec else closed_reading(obj)


def open_objects(schema, backend: str, spec: bool) -> list[str]:
    """Pointers of the object schemas that list `properties`, say nothing of other keys,
    and that `backend` still reads as open (any key, any value): every one in the spec
    reading; on llguidance the ones `closed_reading` leaves open (allOf members, objects
    under a test). The page names them, so a key the schema does not list is expected."""
    if not isinstance(schema, dict):
        return []
    closed = None if spec or backend != "llguidance" else closed_reading(schema)
    out = []
    for ptr, node in subschemas(schema):
        if not isinstance(node.get("properties"), dict) or any(k in node for k in _OPENERS):
            continue
        if closed is not None:
            node = resolve(closed, ptr)[1]
        if spec or (closed is not None and node.get("additionalProperties") is not False):
            out.append(ptr)
    return out
