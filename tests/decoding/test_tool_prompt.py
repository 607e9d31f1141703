"""Tools a model can see (issue 42, part 4): a chat template that ignores `tools` (the
embedded SmolLM2's) gets them as a system block and one example call in the request's own
tags; a template that renders them is left to do so. No weights: the embedded tokenizer
and a tiny tokenizer built offline."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import jsonschema
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
    example = '<tool_call>{"name": "get_weather", "arguments": {"city": "...", "unit": "celsius"}}'
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
    assert '<function=get_weather>{"city": "...", "unit": "celsius"}</function>' in text
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
def test_the_example_call_is_valid_for_simple_parameters(tool):
    jsonschema.validate(placeholder(tool.schema()), tool.schema())


def test_placeholders_follow_the_schemas_shape():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"const": "fast"},
            "at": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    }
    want = {"n": 0, "ok": False, "tags": [], "mode": "fast", "at": {"x": 0}}
    assert placeholder(schema) == want


def _doc_block(doc: Path) -> str:
    """The code block docs/api.md marks as checked here."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    at = lines.index("<!-- test: checked by tests/decoding/test_tool_prompt.py -->")
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
