"""Tools as a user gives them (OpenAI style) and the constraint a call is held to: the
Hermes / Qwen body `{"name": NAME, "arguments": ARGS}`, NAME one of the tools' names and
ARGS valid for that tool's `parameters`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..constraint import Constraint
from ..decoding.validate import validate_output
from ..errors import CfsmError
from ..schema import load_json, parse_schema, schema_to_regex

MAX_TOOLS = 32
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: str  # the JSON schema of the arguments, as JSON text

    def schema(self) -> dict:
        return json.loads(self.parameters)


def parse_tools(text: str) -> tuple[Tool, ...]:
    """`[{"type": "function", "function": {"name", "description", "parameters"}}, ...]`;
    CfsmError naming the first thing wrong (an invalid `parameters` schema included)."""
    obj = load_json(text, "the tools list", "invalid_input")
    if isinstance(obj, dict):
        obj = [obj]
    if not isinstance(obj, list) or not obj:
        raise CfsmError("invalid_input", "tools must be a non-empty JSON list of tool objects")
    if len(obj) > MAX_TOOLS:
        raise CfsmError("input_too_large", f"{len(obj)} tools; the limit is {MAX_TOOLS}")
    tools = tuple(_tool(i, t) for i, t in enumerate(obj))
    names = [t.name for t in tools]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CfsmError("invalid_input", f"tool names must be unique: {', '.join(dup)}")
    return tools


def _tool(i: int, t) -> Tool:
    where = f"tool {i + 1}"
    if not isinstance(t, dict):
        raise CfsmError("invalid_input", f"{where} is not an object")
    fn = t.get("function", t) if t.get("type", "function") == "function" else None
    if not isinstance(fn, dict):
        raise CfsmError("invalid_input", f"{where}: only type 'function' tools are supported")
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CfsmError(
            "invalid_input",
            f"{where}: its name must be 1-64 letters, digits, _ . or -, not {name!r}",
        )
    params = fn.get("parameters", EMPTY_PARAMETERS)
    if not isinstance(params, dict):
        raise CfsmError("invalid_input", f"tool {name!r}: parameters must be a JSON schema object")
    text = json.dumps(params, ensure_ascii=False)
    try:
        parse_schema(text)
    except CfsmError as exc:
        raise CfsmError(exc.kind, f"tool {name!r}: {exc.message}") from exc
    return Tool(name, str(fn.get("description") or ""), text)


def call_schema(tools: tuple[Tool, ...]) -> dict:
    """One call: the name first (as the Hermes format writes it), then its arguments."""
    bodies = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.schema()},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return bodies[0] if len(bodies) == 1 else {"anyOf": bodies}


FORMATS = ("hermes", "function")


def tool_format(start_tag: str) -> str:
    """A start tag ending in `=` (`<function=`) takes the tool's name right after it, then
    `>` and the arguments (the Llama 3.1 template); any other holds the Hermes body."""
    return "function" if start_tag.endswith("=") else "hermes"


def call_constraint(tools: tuple[Tool, ...], fmt: str = "hermes") -> Constraint:
    """The constraint of a call's body: the Hermes JSON, spaced as that template writes it,
    or `NAME>ARGS` (one alternative per tool, each with its own arguments' regex)."""
    if fmt == "hermes":
        return Constraint("schema", json.dumps(call_schema(tools), ensure_ascii=False), "spaced")

    parts = [re.escape(t.name) + ">" + schema_to_regex(t.parameters, "spaced") for t in tools]
    return Constraint("regex", "(" + "|".join(parts) + ")")


def split_call(text: str, fmt: str):
    """(name, arguments) of a call's body, or the reason it has none."""
    if fmt == "function":
        name, sep, args = text.partition(">")
        if not sep:
            return f"no '>' after the tool's name in {text[:40]!r}"
        try:
            return name, json.loads(args)
        except ValueError as exc:
            return f"arguments are not JSON: {exc}"
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(doc, dict):
        return "not a JSON object"
    return doc.get("name"), doc.get("arguments")


def check_call(tools: tuple[Tool, ...], text: str, fmt: str = "hermes") -> tuple[bool, str]:
    """A call's body checked on its own: the tool it names and its arguments."""

    got = split_call(text, fmt)
    if isinstance(got, str):
        return False, got
    name, arguments = got
    match = [t for t in tools if t.name == name]
    if not match:
        return False, f"names no tool of the list ({name!r})"
    args = json.dumps(arguments, ensure_ascii=False)
    ok, why = validate_output(Constraint("schema", match[0].parameters), args, True, "eos", None)
    return bool(ok), f"{name}: arguments {why}"
