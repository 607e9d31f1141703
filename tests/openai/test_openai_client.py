"""`cfsm serve`'s /v1 API called as its users call it: the official `openai` client (sync,
async, streaming, `parse` with a pydantic model, tools) and instructor on top of it, against
the served embedded model. Every output is checked against its constraint."""

from __future__ import annotations

import asyncio
import json
import re

import instructor
import jsonschema
import openai
import pytest

from app.presets import TOOLS as WEATHER  # the tools preset: get_weather(city, unit)

pytestmark = pytest.mark.model

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def client(app_url):
    return openai.OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0)


def test_json_schema_response_format_is_valid_and_carries_its_figures(client, app_url):
    r = client.chat.completions.create(
        model="embedded",
        messages=ASK,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )  # fmt: skip
    msg = r.choices[0].message.content
    jsonschema.validate(json.loads(msg), PERSON)
    assert r.choices[0].finish_reason == "stop"
    cf = r.model_extra["cfsm"]
    assert cf["valid"] is True and cf["jumps"] >= 1
    # jump-forward: fewer forward passes than output tokens, as the usage counts them
    assert cf["forward_passes"] < r.usage.completion_tokens
    toks = r.choices[0].logprobs.content
    assert "".join(t.token for t in toks) == msg and len(toks) == r.usage.completion_tokens
    picked = [t for t in toks if t.top_logprobs]
    assert picked and all(len(t.top_logprobs) <= 3 and t.logprob <= 0 for t in picked)
    # the trace id opens this very run: the store holds it
    import urllib.request

    page = urllib.request.urlopen(f"{app_url}{cf['trace_url']}").read().decode()
    assert "<html" in page.lower()


def test_structured_outputs_regex_choice_and_the_older_guided_names(client):
    for extra in ({"structured_outputs": {"regex": PHONE}}, {"guided_regex": PHONE}):
        r = client.chat.completions.create(
            model="embedded",
            messages=[{"role": "user", "content": "A phone number?"}],
            extra_body=extra,
            temperature=0,
        )
        assert re.fullmatch(PHONE, r.choices[0].message.content), r.choices[0].message.content
    choices = ["red", "green (light)", "blue"]
    r = client.chat.completions.create(
        model="embedded",
        messages=[{"role": "user", "content": "A colour?"}],
        extra_body={"structured_outputs": {"choice": choices}, "mode": "masked"},
        temperature=0.7,
        seed=3,
    )
    assert r.choices[0].message.content in choices and r.model_extra["cfsm"]["mode"] == "masked"


def test_a_stream_reassembles_to_the_same_message(client):
    kw = dict(model="embedded", messages=ASK, temperature=0, max_tokens=60,
              response_format={"type": "json_schema",
                               "json_schema": {"name": "person", "schema": PERSON}})  # fmt: skip
    whole = client.chat.completions.create(**kw).choices[0].message.content
    usage = {"include_usage": True}
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options=usage))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole and len([c for c in chunks if c.choices]) > 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens > 0 and not chunks[-1].choices


def test_tools_required_answer_with_valid_tool_calls_streamed_or_not(client):
    kw = dict(model="embedded", messages=[{"role": "user", "content": "Weather in Oslo?"}],
              tools=WEATHER, tool_choice="required", temperature=0)  # fmt: skip
    r = client.chat.completions.create(**kw)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and calls
    for c in calls:
        assert c.function.name == "get_weather" and c.id
        jsonschema.validate(json.loads(c.function.arguments), WEATHER[0]["function"]["parameters"])
    parts: dict = {}
    for ch in client.chat.completions.create(**kw, stream=True):
        for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            p = parts.setdefault(tc.index, {"name": "", "arguments": ""})
            p["name"] += tc.function.name or ""
            p["arguments"] += tc.function.arguments or ""
    assert [p["name"] for p in parts.values()] == [c.function.name for c in calls]
    assert [json.loads(p["arguments"]) for p in parts.values()] == [
        json.loads(c.function.arguments) for c in calls
    ]


def test_parse_with_a_pydantic_model_and_instructor(client):
    from pydantic import BaseModel, Field

    class Person(BaseModel):
        name: str = Field(max_length=12)
        age: int = Field(ge=0, le=120)

    r = client.chat.completions.parse(model="embedded", messages=ASK, response_format=Person,
                                      temperature=0)  # fmt: skip
    assert isinstance(r.choices[0].message.parsed, Person)
    ic = instructor.from_openai(client, mode=instructor.Mode.JSON_SCHEMA)
    p = ic.chat.completions.create(model="embedded", response_model=Person, messages=ASK,
                                   temperature=0, max_retries=0)  # fmt: skip
    assert isinstance(p, Person) and 0 <= p.age <= 120


def test_errors_raise_the_clients_own_exceptions(client):
    bad_regex = {"structured_outputs": {"regex": "(ab"}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="embedded", messages=ASK, extra_body=bad_regex)
    assert e.value.body["code"] == "invalid_regex" and e.value.body["param"] == "structured_outputs"
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no"}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="embedded", messages=ASK, response_format=bad_schema)
    assert e.value.body["code"] == "invalid_schema"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="embedded", messages=ASK, n=2)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=ASK)
    # an oversized chat is a 400 before any stream starts (the client raises, not the stream)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="embedded", stream=True, messages=[
            {"role": "user", "content": "x" * 30_000}])  # fmt: skip
    assert e.value.body["code"] == "input_too_large"
    # the server goes on serving
    r = client.chat.completions.create(model="embedded", messages=ASK, temperature=0,
                                       extra_body={"guided_regex": "(yes|no)"})  # fmt: skip
    assert r.choices[0].message.content in ("yes", "no")


def test_completions_stop_strings_and_reasoning(client):
    r = client.completions.create(model="embedded", prompt="Count: one two three", max_tokens=12,
                                  temperature=0, logprobs=2,
                                  extra_body={"guided_regex": r"( [a-z]{1,6}){1,8}"})  # fmt: skip
    ch = r.choices[0]
    assert re.fullmatch(r"( [a-z]{1,6}){1,8}", ch.text)
    assert "".join(ch.logprobs.tokens) == ch.text
    person = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}
    kw = dict(model="embedded", messages=ASK, temperature=0, response_format=person,
              logprobs=True)  # fmt: skip
    whole = client.chat.completions.create(**kw)
    r = client.chat.completions.create(**kw, stop=[","])
    c = r.choices[0]
    assert c.message.content == whole.choices[0].message.content.split(",")[0]
    assert c.finish_reason == "stop" and c.message.content.startswith('{"name":"')
    # the run stopped at the stop string, and the logprobs are the content's tokens (the
    # last one, which holds the stop string, runs past the cut)
    assert r.usage.completion_tokens < whole.usage.completion_tokens
    toks = [t.token for t in c.logprobs.content]
    assert "".join(toks).startswith(c.message.content)
    assert "".join(toks[:-1]) == c.message.content[: len("".join(toks[:-1]))]
    assert len("".join(toks)) - len(c.message.content) < len(toks[-1])
    r = client.chat.completions.create(model="embedded", messages=ASK, temperature=0,
                                       max_tokens=80, logprobs=True, extra_body={"reasoning": True,
                                       "think_budget": 12, "guided_regex": "(yes|no)"})  # fmt: skip
    m = r.choices[0].message
    assert m.content in ("yes", "no") and m.model_extra["reasoning_content"]
    assert "<think>" not in m.model_extra["reasoning_content"]
    assert "".join(t.token for t in r.choices[0].logprobs.content) == m.content


def test_a_cjk_stream_reassembles_to_the_message(client):
    say = [{"role": "user", "content": "Say Japan in Japanese."}]
    pick = {"structured_outputs": {"choice": ["日本語です", "日本"]}}
    kw = dict(model="embedded", messages=say, temperature=0, extra_body=pick)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(**kw, stream=True))
    parts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(parts) == whole and all("<E" not in p for p in parts)


def test_eight_concurrent_async_clients_get_their_own_answers(app_url):
    async def one(i: int) -> str:
        ac = openai.AsyncOpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0)
        r = await ac.chat.completions.create(
            model="embedded",
            messages=[{"role": "user", "content": f"Write code {i}."}],
            extra_body={"guided_regex": f"client-{i}-[a-z]{{3,8}}"},
            temperature=0.8,
            seed=i,
        )
        await ac.close()
        return r.choices[0].message.content

    async def all_of():
        return await asyncio.gather(*(one(i) for i in range(8)))

    outs = asyncio.run(all_of())
    for i, out in enumerate(outs):
        assert re.fullmatch(f"client-{i}-[a-z]{{3,8}}", out), (i, out)


@pytest.mark.usefixtures("jsonschemabench")
def test_real_schemas_through_v1_are_compiled_by_auto_or_refused_naming_the_place(client):
    """Schemas from JSONSchemaBench sent as `response_format` (as `cfsm bench schemas-api`
    sends the whole sample): one that fsm cannot build goes to llguidance, one that no
    backend enforces is a 400 naming the keyword and its JSON pointer, a Kubernetes one
    compiles on fsm; every answer in OpenAI's shape."""
    from cfsm.bench.jsonschemabench import sample
    from cfsm.bench.schemas_api import ask

    items = {i.subset: i for i in sample(1, ["Kubernetes", "Snowplow", "WashingtonPost"])}
    k8s = ask(client, items["Kubernetes"].schema_text, 8)
    snow = ask(client, items["Snowplow"].schema_text, 8)
    wp = ask(client, items["WashingtonPost"].schema_text, 8)
    assert (k8s["status"], k8s["backend"]) == (200, "fsm")
    assert (snow["status"], snow["backend"]) == (200, "llguidance")
    assert (wp["status"], wp["kind"]) == (400, "unsupported_feature")
    assert "`oneOf` at /oneOf" in wp["message"] and "lenient" in wp["message"]
