"""`tool_choice: "auto"` with the embedded model, through the official `openai` client: the
SmolLM2 template ignores `tools`, so the prompt shows them (engine.triggers.tool_prompt);
a prompt that plainly asks for a tool gets a valid call, one that asks for none gets text.
(Greedy: 5 of 5 such prompts call, 0 of 3 without; docs/api.md gives the figures.)"""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from app.presets import TOOLS  # get_weather(city, unit), get_time(city)

pytestmark = pytest.mark.model

PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def client(app_url):
    return openai.OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0)


def _ask(client, text: str):
    return client.chat.completions.create(
        model="embedded",
        messages=[{"role": "user", "content": text}],
        tools=TOOLS,
        tool_choice="auto",
        temperature=0,
        max_tokens=64,
    )


@pytest.mark.parametrize(
    ("prompt", "tool"),
    [
        ("What is the weather in Oslo? Use the get_weather tool.", "get_weather"),
        ("What time is it in London? Call the get_time tool.", "get_time"),
    ],
)
def test_auto_calls_the_tool_a_prompt_asks_for(client, prompt, tool):
    r = _ask(client, prompt)
    choice = r.choices[0]
    calls = choice.message.tool_calls
    assert choice.finish_reason == "tool_calls" and calls, choice.message.content
    assert calls[0].function.name == tool and calls[0].id
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), PARAMS[c.function.name])
    assert r.model_extra["cfsm"]["valid"] is True


def test_auto_answers_in_text_where_no_tool_is_asked_for(client):
    r = _ask(client, "What is 2 + 2?")
    choice = r.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert "4" in choice.message.content
