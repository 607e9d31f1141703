"""Agent loops run to their end on the embedded model, through the frameworks users run
(LangChain's `create_agent`, pydantic-ai): the model calls the tool, the framework sends
the chat back with the call and its result, and the model answers from the result. Before,
the template dropped the past call (an empty assistant turn) and the model called the tool
again on every turn (pydantic-ai: 50 requests in 524 s)."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.model

ASK = "Use the get_weather tool: what is the weather in Oslo?"
RESULT = "12 degrees celsius in Oslo"
MAX_REQUESTS = 3


class Recorder:
    """The chat bodies a framework sent (an httpx request hook)."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> None:
        self.bodies.append(json.loads(request.content))

    async def on_async(self, request: httpx.Request) -> None:
        self(request)


def the_loop_went_round(rec: Recorder, answer: str) -> None:
    """Two requests: the call, then the chat with the call and its result; the answer is
    the result's."""
    assert 2 <= len(rec.bodies) <= MAX_REQUESTS, [b["messages"][-1] for b in rec.bodies]
    second = rec.bodies[1]["messages"]
    calls = [m for m in second if m.get("tool_calls")]
    assert calls and calls[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert any(m["role"] == "tool" and m["content"] == RESULT for m in second)
    assert "12 degrees" in answer


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"12 degrees celsius in {city}"


def test_a_langchain_agent_calls_the_tool_then_answers(app_url):
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    rec = Recorder()
    http = httpx.Client(event_hooks={"request": [rec]})
    llm = ChatOpenAI(
        model="embedded",
        base_url=f"{app_url}/v1",
        api_key="unused",
        temperature=0,
        http_client=http,
    )
    agent = create_agent(llm, [tool(get_weather)])
    out = agent.invoke({"messages": [{"role": "user", "content": ASK}]}, {"recursion_limit": 8})
    the_loop_went_round(rec, out["messages"][-1].content)


def test_a_pydantic_ai_agent_calls_the_tool_then_answers(app_url):
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    rec = Recorder()
    http = httpx.AsyncClient(event_hooks={"request": [rec.on_async]})
    client = openai.AsyncOpenAI(base_url=f"{app_url}/v1", api_key="unused", http_client=http)
    model = OpenAIChatModel("embedded", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, model_settings={"temperature": 0})
    agent.tool_plain(get_weather)
    out = agent.run_sync(ASK, usage_limits=UsageLimits(request_limit=MAX_REQUESTS))
    the_loop_went_round(rec, out.output)
