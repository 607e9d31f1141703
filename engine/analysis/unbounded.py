"""Why a run did not end: the parts of a constraint with no upper bound (an array with no
`maxItems`, a string with no `maxLength`, a number with no limit on its digits, flexible
whitespace, a regex repeat with no maximum), and which of them an output stopped at
`max_new_tokens` was inside. A constrained run can only go on to the token limit through
such a part, so naming it says what would bound the run."""

from __future__ import annotations

import json
import re

from ..constraint import Constraint
from .json_scan import pointer_of, scan_json

WS_RUN = re.compile(r"\s{8,}$")


def _resolve(root: dict, node: dict, depth: int = 0) -> dict:
    ref = node.get("$ref") if isinstance(node, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#") or depth > 20:
        return node if isinstance(node, dict) else {}
    target: object = root
    for part in ref[1:].strip("/").split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        target = target.get(part, {}) if isinstance(target, dict) else {}
    return _resolve(root, target if isinstance(target, dict) else {}, depth + 1)


def _node_at(root: dict, stack: list) -> tuple[dict, str]:
    """The schema node of the innermost container on a JSON scan stack, and its pointer."""
    node = _resolve(root, root)
    for kind, v in stack:
        if kind == "obj":
            if v is None:
                break
            props = node.get("properties") or {}
            node = _resolve(root, props.get(str(v), node.get("additionalProperties") or {}))
        else:
            prefix = node.get("prefixItems") or []
            node = _resolve(root, prefix[v] if v < len(prefix) else node.get("items") or {})
    return node, pointer_of(stack)


# what bounds a value of each kind; without any of these a run can stay in it
_BOUNDED_BY = {
    "string": {"maxLength", "enum", "const"},
    "number": {"maximum", "exclusiveMaximum", "enum", "const"},
    "array": {"maxItems"},
}
_BOUND_IT = {
    "string": ("a string{fmt} with no maxLength", "set maxLength on it"),
    "number": ("a number with no maximum", "set minimum and maximum on it"),
    "array": ("an array with no maxItems", "set maxItems on it"),
}


def _unbounded(node: dict, kind: str, where: str, name_format: bool = False) -> dict | None:
    """Why a `kind` value at `where` has no upper bound, or None when it has one."""
    if _BOUNDED_BY[kind] & set(node):
        return None
    what, bound = _BOUND_IT[kind]
    fmt = f" (format {node['format']})" if name_format and "format" in node else ""
    return _reason(where, what.format(fmt=fmt), bound)


def _schema_reason(schema: dict, text: str) -> dict | None:
    sc = scan_json(text, len(text))
    number = bool(text) and text[-1] in "-0123456789.eE+" and sc.last_struct in (":", "[", ",")
    node, where = _node_at(schema, sc.stack)  # the value being written at the end
    if sc.in_str and not sc.str_is_key:
        return _unbounded(node, "string", where, name_format=True)
    if not sc.in_str and number:
        return _unbounded(node, "number", where)
    if not sc.in_str and sc.stack and sc.stack[-1][0] == "arr":
        arr, ptr = _node_at(schema, sc.stack[:-1])  # between items: the array itself
        return _unbounded(arr, "array", ptr)
    return None


def _reason(where: str, what: str, bound: str) -> dict:
    return {"where": where, "what": what, "bound": bound}


def _schema_of(constraint: Constraint | None) -> dict | None:
    """The schema of a schema constraint as an object (None otherwise)."""
    if constraint is None or constraint.kind != "schema":
        return None
    try:
        schema = json.loads(constraint.text)
    except ValueError:
        return None
    return schema if isinstance(schema, dict) else None


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
        return _schema_reason(schema, text)
    if constraint.kind == "regex":
        return _regex_reason(constraint.text, text)
    return None


def _walk(root: dict, node: dict, ptr: str, out: list, depth: int = 0) -> None:
    node = _resolve(root, node)
    if depth > 12 or len(out) >= 12:
        return
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    for kind, names in (
        ("string", {"string"}),
        ("number", {"integer", "number"}),
        ("array", {"array"}),
    ):
        why = _unbounded(node, kind, ptr) if names & set(types) else None
        if why is not None:
            out.append(why)
    for key, sub in (node.get("properties") or {}).items():
        _walk(root, sub, f"{ptr.rstrip('/')}/properties/{key}", out, depth + 1)
    for i, sub in enumerate(node.get("prefixItems") or []):
        _walk(root, sub, f"{ptr.rstrip('/')}/prefixItems/{i}", out, depth + 1)
    if isinstance(node.get("items"), dict):
        _walk(root, node["items"], f"{ptr.rstrip('/')}/items", out, depth + 1)
    for kw in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(node.get(kw) or []):
            _walk(root, sub, f"{ptr.rstrip('/')}/{kw}/{i}", out, depth + 1)


def unbounded_parts(constraint: Constraint) -> list[dict]:
    """Every part of the constraint a run could stay in until the token limit (at most
    12), for the doctor: what it is, where, and what would bound it."""
    out: list[dict] = (
        [_flexible("flexible whitespace")] if constraint.whitespace == "flexible" else []
    )
    schema = _schema_of(constraint)
    if schema is not None:
        _walk(schema, schema, "/", out)
    elif constraint.kind == "regex":
        out += [_repeat_reason(m, "give it a maximum") for m in _REPEAT.finditer(constraint.text)]
    return out[:12]


def limit_reached(constraint: Constraint | None, prefix: str) -> str:
    """Which schema bound a JSON prefix has used up where a text leaves the language (a
    string at its maxLength, an array at its maxItems): '' when none is."""
    schema = _schema_of(constraint)
    if schema is None:
        return ""
    sc = scan_json(prefix, len(prefix))
    if sc.in_str and not sc.str_is_key:
        node, where = _node_at(schema, sc.stack)
        used = sc.str_chars
        if "maxLength" in node and used >= node["maxLength"]:
            return f"maxLength {node['maxLength']} of {where} reached"
    elif sc.stack and sc.stack[-1][0] == "arr" and sc.last_struct == ",":
        arr, where = _node_at(schema, sc.stack[:-1])
        if "maxItems" in arr and sc.stack[-1][1] >= arr["maxItems"]:
            return f"maxItems {arr['maxItems']} of {where} reached"
    return ""


def unfinished_line(u: dict | None) -> str:
    if not u:
        return ""
    return (
        f"It stopped at the token limit in {u['where']}: {u['what']}. To let it end, {u['bound']}."
    )
