"""Why a run did not end: the parts of a constraint with no upper bound (an array with no
`maxItems`, a string with no `maxLength`, a number with no limit on its digits, flexible
whitespace, a regex repeat with no maximum), and which of them an output stopped at
`max_new_tokens` was inside. A constrained run can only go on to the token limit through
such a part, so naming it says what would bound the run."""

from __future__ import annotations

import re

from ..constraint import Constraint
from ..schema.objects import extra_schema_of
from ..schema.pointer import Located, choosing_key, locate_scan, schema_nodes, walkable
from .json_scan import scan_json

WS_RUN = re.compile(r"\s{8,}$")
MAX_PARTS = 24  # unbounded places the doctor lists


def _node_at(root: dict, stack: list) -> tuple[dict, str]:
    """The schema node of the value in progress on a JSON scan stack, and its pointer (the
    node the schema has: engine/schema/pointer.py's stopping rule)."""
    got = locate_scan(root, stack)
    return (got.node if isinstance(got.node, dict) else {}), got.pointer


# what bounds a value of each kind; without any of these a run can stay in it
_BOUNDED_BY = {
    "string": {"maxLength", "enum", "const"},
    "number": {"maximum", "exclusiveMaximum", "enum", "const"},
    "array": {"maxItems"},
    "object": {"maxProperties"},
}
_BOUND_IT = {
    "string": ("a string{fmt} with no maxLength", "set maxLength on it"),
    "number": ("a number with no maximum", "set minimum and maximum on it"),
    "array": ("an array with no maxItems", "set maxItems on it"),
    "object": (
        "an object with free keys (additionalProperties or patternProperties) and no maxProperties",
        "list its keys in properties, or set maxProperties on it",
    ),
}
_OPEN_OBJECT = (
    "an open object{why}: it admits keys it does not list, and has no maxProperties",
    "set additionalProperties: false on it (or maxProperties)",
)
# a format fixes the characters, not the length; fsm refuses maxLength together with a
# format whose length has no bound, so the advice names what can be enforced instead
_FORMAT_BOUND = (
    "maxLength cannot be enforced together with format {fmt}: give it an enum of the values "
    "you expect, or replace the format by a pattern whose repeats have a maximum, or drop "
    "the format and set maxLength"
)


def _unbounded(node: dict, kind: str, where: str, name_format: bool = False) -> dict | None:
    """Why a `kind` value at `where` has no upper bound, or None when it has one."""
    if _BOUNDED_BY[kind] & set(node):
        return None
    what, bound = _BOUND_IT[kind]
    fmt = f" (format {node['format']})" if name_format and "format" in node else ""
    if kind == "string" and "format" in node:
        bound = _FORMAT_BOUND.format(fmt=node["format"])
    return _reason(where, what.format(fmt=fmt), bound)


def _is_object(node: dict) -> bool:
    """Whether a schema node describes an object (states it, or lists keys)."""
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if "object" in types:
        return True
    keys = ("properties", "additionalProperties", "patternProperties")
    return types == [None] and any(k in node for k in keys)


def _free_keys(node: dict, spec: bool = False) -> bool:
    """Whether an object schema admits keys it does not list, with no maxProperties: a
    schema or `true` for other keys, patterns, or no word on them where the reading (the
    compiler's own: `extra_schema_of`) leaves it open."""
    if "maxProperties" in node or not _is_object(node):
        return False
    return bool(node.get("patternProperties")) or extra_schema_of(node, spec) is not False


def _free_keys_reason(node: dict, where: str, spec: bool) -> dict:
    """Why an object with free keys has no upper bound, and what would give it one."""
    if isinstance(node.get("additionalProperties"), dict) or node.get("patternProperties"):
        return _unbounded(node, "object", where)
    why = " (the Spec reading)" if spec and "additionalProperties" not in node else ""
    return _reason(where, _OPEN_OBJECT[0].format(why=why), _OPEN_OBJECT[1])


def _unlisted(got: Located, spec: bool) -> dict:
    """Why a run in the value of a key the schema does not list (an open object) had no
    upper bound: any JSON may be written there."""
    return {
        **_reason(
            got.pointer,
            "the value of a key the schema does not list (the object is open: any key, any value)",
            "set additionalProperties: false on it"
            + (", or leave the Spec reading off" if spec else ""),
        ),
        "key": got.label,
    }


REPEATED_ITEMS = 3  # an array with this many items around a short value is what runs on
LONG_VALUE = 64  # characters of a string in progress that make it, not its array, the cause


def _repeating_array(schema: dict, sc) -> dict | None:
    """The outermost enclosing array with no maxItems that already holds REPEATED_ITEMS
    items: a model that keeps adding items is stopped by the limit inside whichever
    small value it was writing, and that value is not what to bound."""
    for i, (kind, index) in enumerate(sc.stack):
        if kind == "arr" and isinstance(index, int) and index >= REPEATED_ITEMS:
            arr, ptr = _node_at(schema, sc.stack[:i])
            why = _unbounded(arr, "array", ptr)
            if why is not None:
                return {**why, "what": f"{why['what']} ({index + 1} items so far)"}
    return None


def _schema_reason(schema: dict, text: str, spec: bool = False) -> dict | None:
    """Where in `schema` a text stopped at the token limit was, and what is unbounded
    there (None: nothing there is); a free key's name travels as the reason's "key"."""
    sc = scan_json(text, len(text))
    got = locate_scan(schema, sc.stack)  # the value being written at the end
    if not got.listed:
        return _unlisted(got, spec)
    if not (sc.in_str and not sc.str_is_key and sc.str_chars >= LONG_VALUE):
        repeating = _repeating_array(schema, sc)
        if repeating is not None:
            return repeating
    why = _reason_at(schema, sc, text, spec)
    return why and {**why, "key": got.label}


def _reason_at(schema: dict, sc, text: str, spec: bool) -> dict | None:
    """What is unbounded at the end of a scanned text: the string, number or array being
    written, or the object whose next key is being chosen."""
    number = bool(text) and text[-1] in "-0123456789.eE+" and sc.last_struct in (":", "[", ",")
    node, where = _node_at(schema, sc.stack)
    if sc.in_str and not sc.str_is_key:
        return _unbounded(node, "string", where, name_format=True)
    if not sc.in_str and number:
        return _unbounded(node, "number", where)
    if not sc.in_str and sc.stack and sc.stack[-1][0] == "arr":
        arr, ptr = _node_at(schema, sc.stack[:-1])  # between items: the array itself
        return _unbounded(arr, "array", ptr)
    if sc.stack and sc.stack[-1][0] == "obj" and (sc.str_is_key or sc.expecting_key):
        obj, ptr = _node_at(schema, choosing_key(sc.stack))
        if _free_keys(obj, spec):
            return _free_keys_reason(obj, ptr, spec)
    return None


def _reason(where: str, what: str, bound: str) -> dict:
    return {"where": where, "what": what, "bound": bound}


def _schema_of(constraint: Constraint | None) -> dict | None:
    """The schema of a schema constraint as an object (None otherwise)."""
    if constraint is None or constraint.kind != "schema":
        return None
    return walkable(constraint.text)


def _flexible(what: str) -> dict:
    return _reason("the whitespace between JSON tokens", what, "use compact or spaced whitespace")


# an atom (class, escape, group, character) followed by a repeat with no maximum
_REPEAT = re.compile(
    r"(\[(?:\\.|[^\]])*\]|\\.|\((?:\\.|[^()])*\)|[^\\()\[\]|*+?{}])(\*|\+|\{\d+,\})"
)


def _repeat_reason(m: re.Match, bound: str) -> dict:
    return _reason(
        f"regex characters {m.start()}-{m.end()} `{m.group(0)}`",
        f"a repeat with no maximum (`{m.group(2)}`)",
        bound,
    )


def _regex_reason(pattern: str, text: str) -> dict | None:
    """The unbounded repeat the output's last characters match (best effort: the first
    such repeat in the pattern whose atom matches the last character)."""
    last = text[-1:] or " "
    for m in _REPEAT.finditer(pattern):
        try:
            if re.fullmatch(m.group(1), last):
                return _repeat_reason(m, f"give it a maximum, e.g. `{m.group(1)}{{0,40}}`")
        except re.error:
            continue
    return None


def why_unfinished(constraint: Constraint | None, text: str) -> dict | None:
    """For an output stopped at the token limit: where in the constraint it was, what is
    unbounded there and what would bound it; None when that cannot be told."""
    if constraint is None:
        return None
    if constraint.whitespace == "flexible" and WS_RUN.search(text):
        return _flexible(
            "flexible whitespace, which allows a run of spaces and newlines of any length"
        )
    schema = _schema_of(constraint)
    if schema is not None:
        return _schema_reason(schema, text, constraint.spec)
    if constraint.kind == "regex":
        return _regex_reason(constraint.text, text)
    return None


_KINDS = (
    ("string", {"string"}),
    ("number", {"integer", "number"}),
    ("array", {"array"}),
    ("object", {"object", None}),
)


def _unbounded_at(node: dict, ptr: str, spec: bool = False) -> list[dict]:
    """What has no upper bound at one schema node (per type it allows)."""
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    out = []
    for kind, names in _KINDS:
        if not names & set(types):
            continue
        why = (
            (_free_keys_reason(node, ptr, spec) if _free_keys(node, spec) else None)
            if kind == "object"
            else _unbounded(node, kind, ptr, name_format=True)
        )
        if why is not None:
            out.append(why)
    return out


def unbounded_parts(constraint: Constraint) -> list[dict]:
    """Every part of the constraint a run could stay in until the token limit (at most
    MAX_PARTS), for the doctor: what it is, where, and what would bound it."""
    out: list[dict] = (
        [_flexible("flexible whitespace")] if constraint.whitespace == "flexible" else []
    )
    schema = _schema_of(constraint)
    if schema is not None:  # each node named by a pointer the schema resolves
        for node, ptr in schema_nodes(schema):
            out += _unbounded_at(node, ptr, constraint.spec)
            if len(out) >= MAX_PARTS:
                break
    elif constraint.kind == "regex":
        out += [_repeat_reason(m, "give it a maximum") for m in _REPEAT.finditer(constraint.text)]
    return out[:MAX_PARTS]


_NUMBER_BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
_NUMBER_CHARS = "-0123456789.eE+"
_NUMBER_TAIL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$")


def limit_reached(constraint: Constraint | None, prefix: str, nxt: str = "") -> str:
    """Which schema bound refused a text where it leaves the language, given the JSON
    prefix before it and the refused character `nxt`: a string's maxLength or minLength,
    an array's maxItems or minItems, a number's range. '' when none did (the checker's
    "expected ..." alone did not say that 3601 is over a maximum of 3600)."""
    schema = _schema_of(constraint)
    if schema is None:
        return ""
    sc = scan_json(prefix, len(prefix))
    if sc.in_str:
        return "" if sc.str_is_key else _string_bound(schema, sc, nxt)
    return _number_bound(schema, sc, prefix, nxt) or _items_bound(schema, sc, prefix, nxt)


def _string_bound(schema: dict, sc, nxt: str) -> str:
    node, where = _node_at(schema, sc.stack)
    used = sc.str_chars
    if nxt == '"':  # the string may not end yet
        low = node.get("minLength")
        if isinstance(low, int) and used < low:
            return f"minLength {low} of {where} not reached ({_count(used, 'character')} so far)"
        return ""
    if "maxLength" in node and used >= node["maxLength"]:
        return f"maxLength {node['maxLength']} of {where} reached"
    return ""


def _number_bound(schema: dict, sc, prefix: str, nxt: str) -> str:
    """A number's range: where the refused character would go on writing a number, every
    bound it has; where the number has ended, the bounds its value is outside."""
    if not nxt:
        return ""
    node, where = _node_at(schema, sc.stack)
    if nxt in _NUMBER_CHARS:
        bounds = [f"{k} {node[k]}" for k in _NUMBER_BOUNDS if k in node]
        return f"the number would leave {', '.join(bounds)} of {where}" if bounds else ""
    m = _NUMBER_TAIL.search(prefix)
    if m is None or (m.start() > 0 and prefix[m.start() - 1] not in ":,[ \t\n\r"):
        return ""
    value = float(m.group())
    broken = [f"{k} {node[k]}" for k in _NUMBER_BOUNDS if _breaks(k, node.get(k), value)]
    return f"the number {m.group()} is outside {', '.join(broken)} of {where}" if broken else ""


def _breaks(keyword: str, bound: object, value: float) -> bool:
    if isinstance(bound, bool) or not isinstance(bound, int | float):
        return False  # absent, or draft-04's boolean exclusive flags
    return {
        "minimum": value < bound,
        "exclusiveMinimum": value <= bound,
        "maximum": value > bound,
        "exclusiveMaximum": value >= bound,
    }[keyword]


def _items_bound(schema: dict, sc, prefix: str, nxt: str) -> str:
    """An array's length: a ',' (or a value after one) past maxItems, a ']' before
    minItems."""
    if not sc.stack or sc.stack[-1][0] != "arr":
        return ""
    arr, where = _node_at(schema, sc.stack[:-1])
    tail = prefix.rstrip()[-1:]
    done = 0 if tail == "[" else sc.stack[-1][1] + (tail != ",")
    top = arr.get("maxItems")
    if isinstance(top, int) and done >= top and (tail == "," or nxt == ","):
        return f"maxItems {top} of {where} reached"
    low = arr.get("minItems")
    if nxt == "]" and tail != "," and isinstance(low, int) and done < low:
        return f"minItems {low} of {where} not reached ({_count(done, 'item')} so far)"
    return ""


def _count(k: int, word: str) -> str:
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def unfinished_line(u: dict | None) -> str:
    """The run summary's sentence: where (with the key the model wrote, where the pointer
    names a keyword rather than the key), what is unbounded, and what would bound it."""
    if not u:
        return ""
    key = f" ({u['key']})" if u.get("key") else ""
    return (
        f"It stopped at the token limit in {u['where']}{key}: {u['what']}. "
        f"To let it end, {u['bound']}."
    )
