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


def placeholder(schema, name: str = "value", depth: int = 0) -> str:
    """The example call's arguments as a shape, not values: an object's properties each
    with `<its name>` (nested objects in turn), so there is no value the model could copy
    into its own call (an enum's first value did: "in fahrenheit" gave `unit: celsius`).
    A const is shown as it is: it is the only value there is."""
    if not isinstance(schema, dict):
        return f"<{name}>"
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    props = schema.get("properties")
    if (kind == "object" or props) and isinstance(props, dict) and depth < MAX_EXAMPLE_DEPTH:
        inner = ", ".join(f"{json.dumps(k)}: {placeholder(v, k, depth + 1)}"
                          for k, v in props.items())  # fmt: skip
        return "{" + inner + "}"
    return f"<{name}>"


def _call_of(tool: Tool, start: str, end: str) -> dict:
    call = call_text(start, end, tool.name, placeholder(tool.schema(), "arguments"))
    return {"role": "assistant", "content": call}


def example_exchange(tools: tuple[Tool, ...], start: str, end: str, called: str = "") -> list[dict]:
    """A user turn asking for a tool and the assistant's call to it (its arguments as their
    shape). Where the chat already called `called` and holds its result, the example goes
    on past a result as an agent loop must: the result, then the next tool's call (another
    tool, as an output tool such as pydantic-ai's `final_result`) or, with one tool, an
    answer in words. Without it the model copied its own last call on every turn."""
    first = next((t for t in tools if t.name == called), tools[0])
    out = [{"role": "user", "content": f"Use {first.name}."}, _call_of(first, start, end)]
    if not called:
        return out
    out.append({"role": "user", "content": f"Result of {first.name}: <result>"})
    others = [t for t in tools if t.name != first.name]
    if others:
        return [*out, _call_of(others[0], start, end)]
    return [*out, {"role": "assistant", "content": "The result says <result>."}]


def last_called(messages: list[dict]) -> str:
    """The name of the last tool the chat called and got a result of ("" if none)."""
    names = {c.get("id"): (c.get("function") or {}).get("name")
             for m in messages for c in m.get("tool_calls") or []}  # fmt: skip
    for m in reversed(messages):
        if m.get("role") == "tool":
            return str(names.get(m.get("tool_call_id")) or m.get("name") or "")
    return ""


PROBE_TOOL = "cfsm_probe_tool"  # a name no template writes unless it renders the call


def probe_call_turns() -> list[dict]:
    """A chat whose assistant turn is one call of PROBE_TOOL: a template that renders past
    calls writes its name."""
    call = {"type": "function", "id": "call_probe", "function": {"name": PROBE_TOOL,
            "arguments": {}}}  # fmt: skip
    return [{"role": "user", "content": "?"},
            {"role": "assistant", "content": "", "tool_calls": [call]}]  # fmt: skip


def has_past_calls(messages: list[dict]) -> bool:
    return any(m.get("tool_calls") or m.get("role") == "tool" for m in messages)


def with_past_calls(messages: list[dict], start: str, end: str) -> list[dict]:
    """The chat for a template that does not render past calls (SmolLM2's wrote an
    assistant turn with `tool_calls` as an empty turn, so the model never saw that it had
    called the tool, and called it again): each call written into its turn in the format
    the model is asked to call in, and each tool result as a user turn that names the tool
    it answers, as llama.cpp's template polyfills do for such templates."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        calls = m.get("tool_calls") or []
        if calls:
            text = "".join(_past_call(c, start, end, names) for c in calls)
            head = m.get("content") or ""
            out.append({"role": m["role"], "content": head + ("\n" if head else "") + text})
        elif m.get("role") == "tool":
            name = names.get(m.get("tool_call_id") or "", m.get("name") or "the tool")
            out.append({"role": "user", "content": f"Result of {name}: {m.get('content') or ''}"})
        else:
            out.append({k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")})
    return out


def _past_call(c: dict, start: str, end: str, names: dict[str, str]) -> str:
    fn = c.get("function") or {}
    name = str(fn.get("name"))
    if c.get("id"):
        names[c["id"]] = name
    args = fn.get("arguments", {})
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return call_text(start, end, name, text)


def with_tools(
    messages: list[dict], tools: tuple[Tool, ...], start: str, end: str, called: str = ""
) -> list[dict]:
    """The messages with the block at the head of the system message (a new one when the
    chat has none or its first is not plain text), then the example exchange (`called`:
    the tool whose result the chat holds last)."""
    block = tools_block(tools, start, end)
    first = messages[0] if messages else {}
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        merged = block + "\n\n" + first["content"] if first["content"] else block
        head, rest = [{**first, "content": merged}], messages[1:]
    else:
        head, rest = [{"role": "system", "content": block}], messages
    return [*head, *example_exchange(tools, start, end, called), *rest]
