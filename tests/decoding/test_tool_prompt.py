"""Tools a model can see (issue 42, part 4): a chat template that ignores `tools` (the
embedded SmolLM2's) gets them as a system block and one example call in the request's own
tags; a template that renders them is left to do so. No weights: the embedded tokenizer
and a tiny tokenizer built offline."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.presets import TOOLS
from cfsm.bench.tiny_models import build_tokenizer
from engine.decoding.decoder import Decoder, chat_text
from engine.triggers.tool_prompt import placeholder
from engine.triggers.tools import parse_tools

ROOT = Path(__file__).resolve().parents[2]
ASK = [{"role": "user", "content": "Weather in Oslo?"}]
TOOLS_TEXT = json.dumps(TOOLS)
# a template that renders the tools itself, as Qwen's and Llama 3.1's do (in its own words)
RENDERS_TOOLS = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>\n"
    "{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def _prompt_ids(tok, prompt: str, raw: bool, tools: str, tags=("<tool_call>", "</tool_call>")):
    """Decoder.prompt_ids on a tokenizer alone (it reads nothing else of the model)."""
    fake = SimpleNamespace(lm=SimpleNamespace(tokenizer=tok))
    return Decoder.prompt_ids(fake, prompt, raw, "", tools, tags)


def test_a_template_that_ignores_tools_gets_each_tools_name_and_parameters(tokenizer):
    plain = tokenizer.apply_chat_template(ASK, tokenize=False, add_generation_prompt=True)
    assert tokenizer.apply_chat_template(ASK, tools=TOOLS, tokenize=False,
                                         add_generation_prompt=True) == plain  # fmt: skip
    text = chat_text(tokenizer, ASK, TOOLS_TEXT)
    assert text != plain and text.endswith(plain.split("<|im_start|>user")[-1])
    for tool in TOOLS:
        fn = tool["function"]
        assert fn["name"] in text and fn["description"] in text
        for prop in fn["parameters"]["properties"]:
            assert f'"{prop}"' in text
    # how to call one, with the trigger's tags, and one example call to copy
    assert '<tool_call>{"name": "TOOL_NAME", "arguments": ARGUMENTS}</tool_call>' in text
    example = '<tool_call>{"name": "get_weather", "arguments": {"city": <city>, "unit": <unit>}}'
    assert example in text
    assert text.count("<|im_start|>system") == 1  # the template's default system message went
    assert chat_text(tokenizer, ASK) == plain  # without tools: the template's own text


def test_the_block_heads_an_existing_system_message_and_follows_the_tags(tokenizer):
    chat = [{"role": "system", "content": "Be brief."}, *ASK]
    text = chat_text(tokenizer, chat, TOOLS_TEXT, ("<function=", "</function>"))
    assert text.count("<|im_start|>system") == 1
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou can call these tools:")
    assert system.endswith("\n\nBe brief.")
    assert '<function=get_weather>{"city": <city>, "unit": <unit>}</function>' in text
    assert text.index("Use get_weather.") < text.index("Weather in Oslo?")


def test_a_template_that_renders_tools_is_left_to_render_them():
    tok = build_tokenizer("byte_level")
    tok.chat_template = RENDERS_TOOLS
    own = tok.apply_chat_template(ASK, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert own.startswith("<tools>get_weather;get_time;</tools>")
    assert chat_text(tok, ASK, TOOLS_TEXT) == own
    assert _prompt_ids(tok, "Weather in Oslo?", False, TOOLS_TEXT) == tok.encode(
        own, add_special_tokens=False
    )


def test_every_prompt_that_takes_a_template_gets_the_tools_a_raw_one_does_not(tokenizer):
    """The page and the CLI send a prompt, /v1 messages: both are rendered by one code."""
    as_chat = tokenizer.encode(chat_text(tokenizer, ASK, TOOLS_TEXT), add_special_tokens=False)
    assert _prompt_ids(tokenizer, "Weather in Oslo?", False, TOOLS_TEXT) == as_chat
    raw = _prompt_ids(tokenizer, "Weather in Oslo?", True, TOOLS_TEXT)
    assert raw == tokenizer.encode("Weather in Oslo?", add_special_tokens=True)


def test_a_tokenizer_without_a_template_gets_the_block_in_its_plain_chat():
    tok = build_tokenizer("byte_level")
    tok.chat_template = None
    text = chat_text(tok, ASK, TOOLS_TEXT)
    assert text.startswith("system: You can call these tools:") and "get_time" in text
    assert text.endswith("user: Weather in Oslo?\n")


@pytest.mark.parametrize("tool", parse_tools(TOOLS_TEXT), ids=lambda t: t.name)
def test_the_example_call_holds_no_value_the_model_could_copy(tool):
    """Each argument is shown by its name (`<unit>`), never by a value: the enum's first
    value in the example became the model's answer ("in fahrenheit" gave celsius)."""
    shape = placeholder(tool.schema(), "arguments")
    for name, prop in tool.schema()["properties"].items():
        assert f'"{name}": <{name}>' in shape
        for value in prop.get("enum", []):
            assert value not in shape


def test_placeholders_follow_the_schemas_shape():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"const": "fast"},
            "at": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    }
    want = '{"n": <n>, "tags": <tags>, "mode": "fast", "at": {"x": <x>}}'
    assert placeholder(schema) == want


CALLED = [
    ASK[0],
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "12 degrees celsius in Oslo"},
]  # fmt: skip


def test_a_past_call_and_its_result_are_in_the_prompt(tokenizer):
    """SmolLM2's template wrote the assistant's `tool_calls` turn as an empty turn, so the
    model never saw it had called the tool and called it again: the call is now written in
    the call format and its result as a user turn naming the tool, after an example that
    goes on past a result (the next tool's call)."""
    assert "get_weather" not in tokenizer.apply_chat_template(
        CALLED, tokenize=False, add_generation_prompt=True
    )  # the template's own rendering drops the call
    text = chat_text(tokenizer, CALLED, TOOLS_TEXT)
    past = (
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n<tool_call>"
        '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}</tool_call>'
        "<|im_end|>\n<|im_start|>user\nResult of get_weather: 12 degrees celsius in Oslo"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert text.endswith(past)
    example = text[: text.index(past)]
    assert example.index("Use get_weather.") < example.index("Result of get_weather: <result>")
    assert example.index("<result>") < example.index('{"name": "get_time"')


def test_with_one_tool_the_example_answers_from_the_result(tokenizer):
    one = json.dumps(TOOLS[:1])
    text = chat_text(tokenizer, CALLED, one)
    assert "Result of get_weather: <result><|im_end|>\n<|im_start|>assistant\nThe result " in text
    # without a past call the example stops at the call
    assert "<result>" not in chat_text(tokenizer, ASK, one)


def test_a_template_that_renders_past_calls_is_left_to_render_them():
    tok = build_tokenizer("byte_level")
    tok.chat_template = (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}"
        "{% for c in m.tool_calls or [] %}[call {{ c.function.name }}]{% endfor %}\n"
        "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
    )
    text = chat_text(tok, CALLED)
    assert "assistant: [call get_weather]" in text and "tool: 12 degrees" in text
    assert "Result of" not in text


def _doc_block(doc: Path, n: int = 0) -> str:
    """The `n`th code block docs/api.md marks as checked here."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    mark = "<!-- test: checked by tests/decoding/test_tool_prompt.py -->"
    at = [i for i, line in enumerate(lines) if line == mark][n]
    end = lines.index("```", at + 2)
    return "\n".join(lines[at + 2 : end]) + "\n"


def test_docs_api_md_shows_the_prompt_the_code_writes(tokenizer):
    """docs/api.md's "Tools a model can see" is this code's output, word for word."""
    weather = dict(TOOLS[0]["function"])
    weather["parameters"] = {
        k: v for k, v in weather["parameters"].items() if k != "additionalProperties"
    }
    ask = [{"role": "user", "content": "What is the weather in Oslo? Use the get_weather tool."}]
    text = chat_text(tokenizer, ask, json.dumps([{"type": "function", "function": weather}]))
    assert text == _doc_block(ROOT / "docs" / "api.md")


def test_docs_api_md_shows_how_a_past_call_is_written(tokenizer):
    """docs/api.md's "Agent loops" block is the end of this code's prompt, word for word."""
    assert chat_text(tokenizer, CALLED, TOOLS_TEXT).endswith(
        _doc_block(ROOT / "docs" / "api.md", 1)
    )
