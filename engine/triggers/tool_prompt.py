"""The tools as a model reads them when its chat template does not render them (SmolLM2's,
the embedded model's, ignores `tools`), as vLLM and llama-server do for such templates: a
system block listing each tool and saying how to call one with this request's own tags,
then one example exchange (a user turn asking for the first tool, the assistant's call to
it), so the model writes the start tag the trigger waits for. The embedded 135M model
ignores the block alone (0 of 5 prompts that ask for a tool called one) but copies the
exchange (5 of 5, and 0 of 3 prompts that ask for no tool). docs/api.md ("Tools a model
can see") shows the text."""

from __future__ import annotations

import json

from .tools import Tool, tool_format

MAX_EXAMPLE_DEPTH = 3  # deeper objects are shown as {} in the example call


def call_text(start: str, end: str, name: str, arguments: str) -> str:
    """One call with these tags, in the shape the call's constraint holds it to."""
    if tool_format(start) == "function":
        return f"{start}{name}>{arguments}{end}"
    return f'{start}{{"name": "{name}", "arguments": {arguments}}}{end}'


def tools_block(tools: tuple[Tool, ...], start: str, end: str) -> str:
    """The system text: each tool's name, description and parameters schema (compact
    JSON), then the one way to call a tool."""
    lines = ["You can call these tools:"]
    for t in tools:
        params = json.dumps(t.schema(), ensure_ascii=False, separators=(",", ":"))
        about = f" - {t.description}" if t.description else ""
        lines.append(f"{t.name}{about}. Parameters: {params}")
    shape = call_text(start, end, "TOOL_NAME", "ARGUMENTS")
    lines.append(
        f"To call a tool, write {shape}, ARGUMENTS being a JSON object valid for the "
        "tool's parameters."
    )
    return "\n".join(lines)


def placeholder(schema, depth: int = 0):
    """A value of the schema's shape for the example call: an enum's or const's first
    value, "..." for a string, 0, false, [], and an object's properties in turn."""
    if not isinstance(schema, dict):
        return "..."
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if depth >= MAX_EXAMPLE_DEPTH or not isinstance(props, dict):
            return {}
        return {k: placeholder(v, depth + 1) for k, v in props.items()}
    simple = {"integer": 0, "number": 0, "boolean": False, "array": [], "null": None}
    return simple.get(kind, "...")


def example_exchange(tool: Tool, start: str, end: str) -> list[dict]:
    """A user turn asking for the tool and the assistant's call to it."""
    args = json.dumps(placeholder(tool.schema()), ensure_ascii=False)
    call = call_text(start, end, tool.name, args)
    ask = {"role": "user", "content": f"Use {tool.name}."}
    return [ask, {"role": "assistant", "content": call}]


def with_tools(messages: list[dict], tools: tuple[Tool, ...], start: str, end: str) -> list[dict]:
    """The messages with the block at the head of the system message (a new one when the
    chat has none or its first is not plain text), then the example exchange."""
    block = tools_block(tools, start, end)
    first = messages[0] if messages else {}
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        merged = block + "\n\n" + first["content"] if first["content"] else block
        head, rest = [{**first, "content": merged}], messages[1:]
    else:
        head, rest = [{"role": "system", "content": block}], messages
    return [*head, *example_exchange(tools[0], start, end), *rest]
