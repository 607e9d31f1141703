"""The OpenAI wire format without a model: requests read as the engine's, refusals named
by field, chunks that add up to the message, the trace store's bounds, and the routes'
503 and 429 with Retry-After."""

from __future__ import annotations

import json
import re
from dataclasses import asdict

import pytest
from made_traces import totals as made_totals

from engine.errors import CfsmError
from engine.openai.errors import ApiError
from engine.openai.request import read_request, regex_literal
from engine.openai.stream import ChunkWriter, live_parts
from engine.serving.trace_store import TraceStore

M = ["embedded"]
USER = [{"role": "user", "content": "hi"}]


def chat(**body):
    return read_request({"model": "embedded", "messages": USER, **body}, "chat", M)


def refused(status: int, param: str | None, **body) -> ApiError:
    with pytest.raises(ApiError) as e:
        chat(**body)
    assert e.value.status == status and e.value.param == param, e.value.body()
    return e.value


def test_each_constraint_field_becomes_the_engines_constraint():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    c = chat(response_format=rf).gen.constraint
    assert c.kind == "schema" and json.loads(c.text) == schema
    assert json.loads(chat(response_format={"type": "json_object"}).gen.constraint.text) == {
        "type": "object"
    }
    for body, kind, text in (
        ({"structured_outputs": {"regex": "[0-9]+"}}, "regex", "[0-9]+"),
        ({"guided_regex": "[0-9]+"}, "regex", "[0-9]+"),
        ({"structured_outputs": {"grammar": 'root ::= "a"'}}, "grammar", 'root ::= "a"'),
        ({"guided_grammar": 'root ::= "a"'}, "grammar", 'root ::= "a"'),
        ({"regex": "[0-9]+"}, "regex", "[0-9]+"),  # SGLang's
        ({"ebnf": 'root ::= "a"'}, "grammar", 'root ::= "a"'),
        ({"grammar": 'root ::= "a"'}, "grammar", 'root ::= "a"'),  # llama-server's
    ):
        c = chat(**body).gen.constraint
        assert (c.kind, c.text) == (kind, text)
    assert json.loads(chat(json_schema=schema).gen.constraint.text) == schema
    g = chat(guided_json=schema, mode="masked", backend="xgrammar", whitespace="flexible").gen
    assert (g.mode, g.backend, g.constraint.whitespace) == ("masked", "xgrammar", "flexible")
    assert chat().gen.mode == "free" and chat().gen.constraint is None


def test_a_choice_matches_exactly_its_strings():
    choices = ["yes", "no (maybe)", "a.b*c", "x|y"]
    c = chat(structured_outputs={"choice": choices}).gen.constraint
    pat = re.compile(c.text)
    assert all(pat.fullmatch(x) for x in choices)
    assert not pat.fullmatch("no maybe") and not pat.fullmatch("aXb*c") and not pat.fullmatch("x")
    assert re.fullmatch(regex_literal("(1+1)?"), "(1+1)?")


def test_what_is_not_supported_is_a_400_naming_the_field():
    refused(400, "n", n=2)
    refused(400, "logit_bias", logit_bias={"1": 5})
    refused(400, "frequency_penalty", frequency_penalty=0.5)
    refused(400, "top_logprobs", top_logprobs=3)  # without logprobs
    refused(400, "top_logprobs", logprobs=True, top_logprobs=50)
    refused(400, "stop", stop=["a", "b", "c", "d", "e"])
    refused(400, "messages[0]", messages=[{"role": "robot", "content": "x"}])
    refused(400, "messages[0]", messages=[{"role": "user", "content": [{"type": "image_url"}]}])
    e = refused(400, "structured_outputs", response_format={"type": "json_object"},
                structured_outputs={"regex": "a"})  # fmt: skip
    assert "give one constraint" in e.message
    refused(400, "tools", tools=[{"type": "function", "function": {"name": "f"}}],
            guided_regex="a")  # fmt: skip
    refused(400, "max_tokens", max_tokens=0)
    e = refused(404, "model", model="gpt-4o")
    assert e.body()["error"]["code"] == "model_not_found" and "embedded" in e.message
    big = refused(400, "max_tokens", max_tokens=10**6)
    assert "max_tokens must be between 1 and" in big.message  # the name the body used
    assert "max_new_tokens" not in big.message
    refused(400, "temperature", temperature=3)  # OpenAI's range is 0 to 2
    assert chat(temperature=2).gen.temperature == 2
    # as vLLM: a body without `model` is for the served model
    no_model = read_request({"messages": USER}, "chat", M)
    assert no_model.model == "embedded"


def test_an_unknown_key_inside_a_constraint_object_is_a_400_naming_it():
    """A typo inside a constraint object decoded unconstrained (200, cfsm.valid false);
    every constraint object is read strictly, an unknown `guided_*` field too."""
    schema = {"type": "object"}
    for body, param, near in (
        ({"structured_outputs": {"regx": "[0-9]+"}}, "structured_outputs.regx", "regex"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
          "schema": schema, "scheme": 1}}}, "response_format.json_schema.scheme", "schema"),
        ({"response_format": {"type": "json_object", "shema": schema}},
         "response_format.shema", "schema"),
        ({"guided_regx": "[0-9]+"}, "guided_regx", "guided_regex"),
    ):  # fmt: skip
        e = refused(400, param, **body)
        assert f"did you mean {near!r}" in e.message, e.message
    e = refused(400, "structured_outputs.structural_tag", structured_outputs={
        "regex": "a", "structural_tag": "{}"})  # fmt: skip
    assert "not supported" in e.message
    # vLLM's options that change nothing here are accepted and listed as ignored
    got = chat(structured_outputs={"regex": "a", "disable_fallback": True})
    assert got.gen.constraint.text == "a"
    assert got.ignored == ["structured_outputs.disable_fallback"]


def test_every_other_servers_constraint_form_is_honoured():
    """llama-server's `response_format: {"type": "json_object", "schema": ...}` was
    ignored (unconstrained output); vLLM's `guided_decoding_backend` picks the backend."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for rf in ({"type": "json_object", "schema": schema}, {"type": "json_schema",
               "schema": schema}):  # fmt: skip
        c = chat(response_format=rf).gen.constraint
        assert c.kind == "schema" and json.loads(c.text) == schema
    g = chat(guided_json=schema, guided_decoding_backend="guidance").gen
    assert g.backend == "llguidance" and json.loads(g.constraint.text) == schema
    assert chat(guided_regex="a", guided_decoding_backend="xgrammar:no-fallback").gen.backend == (
        "xgrammar"
    )
    assert chat(guided_json_object=True).gen.constraint.text == '{"type": "object"}'
    refused(400, "guided_decoding_backend", guided_regex="a",
            guided_decoding_backend="lm-format-enforcer")  # fmt: skip


def test_tools_tool_choice_and_messages():
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    named = {"type": "function", "function": {"name": "get"}}
    for choice, want in (("auto", "auto"), ("required", "required"), (named, "get")):
        api = chat(tools=tools, tool_choice=choice)
        assert api.tools and api.gen.tool_choice == want and api.gen.mode == "jump"
        assert json.loads(api.gen.tools) == tools
    none = chat(tools=tools, tool_choice="none")
    assert not none.tools and none.gen.mode == "free"
    msgs = [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
    ]  # fmt: skip
    g = chat(messages=msgs).gen
    sent = json.loads(g.messages)
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    assert sent[3]["tool_call_id"] == "c1" and g.prompt == "Weather?"
    assert chat(user="me", store=False, foo=1).ignored == ["foo"]


def test_completions_take_one_prompt_and_legacy_logprobs():
    api = read_request({"model": "embedded", "prompt": ["Hi"], "logprobs": 0}, "completions", M)
    assert api.gen.prompt == "Hi" and api.gen.raw_prompt and api.logprobs and api.top_logprobs == 0
    with pytest.raises(ApiError) as e:
        read_request({"model": "embedded", "prompt": [1, 2]}, "completions", M)
    assert e.value.param == "prompt"


def _trace(text: str, segments=None, reason="eos") -> dict:
    return {"text": text, "segments": segments or [], "steps": [], "tokens": [],
            "prompt_tokens": 3, "mode": "jump", "backend": "fsm", "valid": True,
            "totals": asdict(made_totals(
                forward_passes=2, output_tokens=4, jumps=1, jumped_tokens=2, compile_s=0.01,
                decode_s=0.1, finished=reason == "eos", reason=reason))}  # fmt: skip


def _reassemble(chunks: list[dict]) -> dict:
    out = {"content": "", "reasoning_content": "", "calls": {}}
    for c in chunks:
        for ch in c["choices"]:
            d = ch["delta"]
            for k in ("content", "reasoning_content"):
                out[k] += d.get(k) or ""
            for tc in d.get("tool_calls") or []:
                call = out["calls"].setdefault(tc["index"], {"name": "", "arguments": ""})
                call["name"] += tc.get("function", {}).get("name") or ""
                call["arguments"] += tc.get("function", {}).get("arguments") or ""
    return out


def test_streamed_deltas_hold_back_a_tag_and_add_up_to_the_message():
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    api = chat(tools=tools, stream=True)
    w = ChunkWriter(api, "id", chat=True)
    chunks = w.start()
    for text in ("Sure", "Sure <tool", "Sure <tool_call>", 'Sure <tool_call>{"name"'):
        chunks += w.live(text)
    assert _reassemble(chunks)["content"] == "Sure "  # "<tool" never went out as content
    call = '{"name": "get", "arguments": {"q": 1}}'
    segs = [  # as the model writes it: the start tag ends the free text
        {"index": 0, "kind": "free", "label": "text", "text": "Sure <tool_call>", "char_start": 0},
        {"index": 1, "kind": "constrained", "label": "tool call", "text": call, "char_start": 16},
        {"index": 2, "kind": "tag", "label": "tool call end", "text": "</tool_call>",
         "char_start": 16 + len(call)},
    ]  # fmt: skip
    fin = w.finish(_trace("Sure <tool_call>" + call + "</tool_call>", segs), "tid")
    got = _reassemble(chunks + fin)
    assert got["calls"] == {0: {"name": "get", "arguments": '{"q": 1}'}}
    assert fin[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert fin[-1]["cfsm"]["trace_url"] == "/?trace=tid"


def test_a_stop_string_cuts_the_streamed_and_the_final_text_alike():
    api = chat(stop=["END"])
    w = ChunkWriter(api, "id", chat=True)
    chunks = []
    for text in ("abc E", "abc EN", "abc END and more"):
        chunks += w.live(text)
    assert _reassemble(chunks)["content"] == "abc "
    fin = w.finish(_trace("abc END and more"), None)
    assert _reassemble(chunks + fin)["content"] == "abc "
    assert fin[-1]["choices"][0]["finish_reason"] == "stop"
    api = chat(structured_outputs={"regex": "a+"}, reasoning=True)
    assert live_parts("<think>hmm</th", api) == ("hmm", "")
    assert live_parts("<think>hmm</think>aa", api) == ("hmm", "aa")


def test_the_trace_store_keeps_the_newest_within_its_bounds():
    store = TraceStore(max_traces=3, max_bytes=10_000)
    ids = [store.put({"n": i, "pad": "x" * 100}) for i in range(5)]
    assert [store.get(i) for i in ids[:2]] == [None, None]
    assert [store.get(i)["n"] for i in ids[2:]] == [2, 3, 4]
    assert store.put({"pad": "x" * 20_000}) is None  # alone over the budget: not kept
    big = [store.put({"pad": "y" * 4000}) for _ in range(3)]
    assert store.stats()["bytes"] <= 10_000 and store.get(big[-1]) is not None


def test_the_routes_answer_503_while_loading_and_429_when_full():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from app.openai_routes import openai_router
    from app.state import EngineHub

    hub = EngineHub("some/model-that-is-not-here")
    hub.start = lambda name=None: None  # nothing loads: the hub stays "not loaded yet"
    hub.load_wait_s = 0.2  # a request waits this long for the model
    app = FastAPI()
    app.include_router(openai_router(hub))
    client = TestClient(app)
    body = {"model": "some/model-that-is-not-here", "messages": USER}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert r.json()["error"]["code"] == "model_loading"
    assert client.get("/v1/models").status_code == 503  # not listed before it can be used
    # a bad request is refused at once, without waiting for the model
    r = client.post("/v1/chat/completions", json={**body, "n": 3})
    assert r.status_code == 400
    hub._engines[hub.default] = object()  # loaded (the engine is never reached: full first)
    full = FastAPI()
    full.include_router(openai_router(hub, max_in_flight=0))
    r = TestClient(full).post("/v1/chat/completions", json=body)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "rate_limit_error"
    r = client.post("/v1/chat/completions", content=b"{nope")
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == "invalid_json"


def test_the_openai_client_retries_a_full_server_and_unknown_paths_are_openai_errors():
    """429 (full) is retried by the official client as its docs say (after Retry-After);
    every other /v1 path answers in OpenAI's error shape (404, or 405 for a known path)."""
    import openai
    from fastapi import FastAPI, Request
    from fastapi.testclient import TestClient

    from app.openai_routes import openai_router
    from app.state import EngineHub

    hub = EngineHub("m")
    hub._engines[hub.default] = object()  # loaded; never reached: the server is full first
    app = FastAPI()
    app.include_router(openai_router(hub, max_in_flight=0))
    seen: list[str] = []

    @app.middleware("http")
    async def count(request: Request, call_next):
        seen.append(request.url.path)
        return await call_next(request)

    http = TestClient(app)
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=http,
                           max_retries=1)  # fmt: skip
    with pytest.raises(openai.RateLimitError) as got:
        client.chat.completions.create(model="m", messages=USER)
    assert seen == ["/v1/chat/completions"] * 2  # asked again once
    assert got.value.response.headers["retry-after"] == "1"
    assert got.value.body["code"] == "busy"
    r = http.post("/v1/embeddings", json={"model": "m", "input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_endpoint"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = http.get("/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert http.get("/v1/models").json()["data"][0]["id"] == "m"  # the real routes first


def test_a_trigger_the_model_wrote_is_not_part_of_the_answer():
    from engine.openai.response import split_output

    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    api = chat(tools=tools, tool_choice="auto")
    call = '{"name": "get", "arguments": {}}'
    segs = [  # auto: the model writes the start tag inside its free text
        {"index": 0, "kind": "free", "label": "text", "text": "Sure <tool_call>", "char_start": 0},
        {"index": 1, "kind": "constrained", "label": "tool call", "text": call, "char_start": 16},
        {"index": 2, "kind": "tag", "label": "tool call end", "text": "</tool_call>",
         "char_start": 16 + len(call)},
    ]  # fmt: skip
    parts = split_output(_trace("Sure <tool_call>" + call + "</tool_call>", segs), api)
    assert parts["content"] == "Sure " and parts["spans"] == [(0, 5)]
    assert parts["calls"][0]["function"] == {"name": "get", "arguments": "{}"}
    api = chat(guided_regex="(yes|no)", reasoning=True)
    segs = [
        {"index": 0, "kind": "tag", "label": "thinking start", "text": "<think>", "char_start": 0},
        {"index": 1, "kind": "free", "label": "thinking", "text": "hmm</think>", "char_start": 7},
        {"index": 2, "kind": "constrained", "label": "answer", "text": "yes", "char_start": 18},
    ]
    parts = split_output(_trace("<think>hmm</think>yes", segs), api)
    assert (parts["reasoning"], parts["content"], parts["spans"]) == ("hmm", "yes", [(18, 21)])
    assert live_parts("<thi", api) == ("", "")  # a start tag still being written shows nothing


def test_logprobs_cover_the_contents_tokens_only():
    from engine.openai.response import answer_parts, token_logprobs

    api = chat(stop=["!"], logprobs=True)
    tr = _trace("ab!cd")
    tr["tokens"] = [{"id": i, "text": t, "origin": "model", "step": i}
                    for i, t in enumerate(["a", "b", "!", "cd"])]  # fmt: skip
    tr["steps"] = [{"token_id": i, "raw_prob": 0.5, "top_raw": [[i, "x", 0.25]]} for i in range(4)]
    parts = answer_parts(tr, api)
    lps = token_logprobs(tr, 1, parts["spans"])
    assert parts["content"] == "ab" and "".join(t["token"] for t in lps) == "ab"
    assert lps[0]["top_logprobs"][0]["token"] == "x" and lps[0]["logprob"] < 0


def test_malformed_fields_are_400s_not_500s():
    refused(400, "messages[1]", messages=[*USER, {"role": "assistant", "tool_calls": ["x"]}])
    refused(400, "messages[1]", messages=[*USER, {"role": "assistant",
                                                   "tool_calls": [{"function": "f"}]}])  # fmt: skip
    tools = [{"type": "function", "function": {"name": "get"}}]
    refused(400, "tool_choice", tools=tools, tool_choice={"type": "function", "function": "get"})
    refused(400, "seed", seed=2**70)
    refused(400, "seed", seed="7")
    assert chat(n=None).gen.seed >= 0


def test_a_slot_is_given_back_once_even_by_a_stream_never_started():
    import gc
    import weakref

    from app.openai_routes import Admission

    adm = Admission(limit=1)
    slot = adm.enter()
    with pytest.raises(CfsmError, match="busy"):
        adm.enter()
    slot.leave()
    slot.leave()
    assert adm.n == 0

    async def chunks():
        yield b""

    gen = chunks()
    weakref.finalize(gen, adm.enter().leave)
    assert adm.n == 1
    del gen
    gc.collect()
    assert adm.n == 0


def test_the_page_reads_replay_keys_only_from_its_own_variables(monkeypatch):
    from app.replay import page_key_env
    from engine.errors import CfsmError

    monkeypatch.setenv("CFSM_REPLAY_ENDPOINTS", "http://vllm:8000")
    assert page_key_env(" CFSM_REPLAY_KEY_VLLM ", "http://vllm:8000/v1") == "CFSM_REPLAY_KEY_VLLM"
    assert page_key_env("", "http://anywhere/v1") == ""
    with pytest.raises(CfsmError, match="CFSM_REPLAY_KEY"):
        page_key_env("HF_TOKEN", "http://vllm:8000/v1")


def test_a_deployment_can_limit_where_the_page_replays_from(monkeypatch):
    from app.replay import page_endpoint
    from engine.errors import CfsmError

    assert page_endpoint(" http://10.0.0.5:8000/v1 ") == "http://10.0.0.5:8000/v1"
    monkeypatch.setenv("CFSM_REPLAY_ENDPOINTS", "http://vllm.internal:8000/, http://127.0.0.1")
    assert page_endpoint("http://vllm.internal:8000/v1").startswith("http://vllm.internal")
    with pytest.raises(CfsmError, match="replays only from"):
        page_endpoint("http://169.254.169.254/latest/")


def test_special_tokens_whitespace_beside_calls_and_a_stop_after_a_call():
    from engine.openai.response import answer_parts, token_logprobs

    tr = _trace("yes")
    tr["tokens"] = [{"id": 1, "text": "<think>", "origin": "forced", "step": 0, "special": True},
                    {"id": 2, "text": "yes", "origin": "model", "step": 1}]  # fmt: skip
    tr["steps"] = [{"token_id": 1, "raw_prob": 1.0, "top_raw": []},
                   {"token_id": 2, "raw_prob": 0.5, "top_raw": []}]  # fmt: skip
    lps = token_logprobs(tr, 0, [(0, 3)])  # the special token takes no place in the text
    assert [t["token"] for t in lps] == ["<think>", "yes"]
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    api = chat(tools=tools, stop=["bye"])
    call = '{"name": "get", "arguments": {}}'
    text = " <tool_call>" + call + "</tool_call> ok bye now"
    segs = [
        {"index": 0, "kind": "free", "label": "text", "text": " <tool_call>", "char_start": 0},
        {"index": 1, "kind": "constrained", "label": "tool call", "text": call, "char_start": 12},
        {"index": 2, "kind": "tag", "label": "tool call end", "text": "</tool_call>",
         "char_start": 12 + len(call)},
        {"index": 3, "kind": "free", "label": "text", "text": " ok bye now",
         "char_start": 24 + len(call)},
    ]  # fmt: skip
    parts = answer_parts(_trace(text, segs, reason="stopped"), api)
    assert parts["content"] == "  ok " and parts["finish"] == "tool_calls"
    from engine.openai.response import chat_completion

    msg = chat_completion(_trace(" <tool_call>" + call + "</tool_call>", segs[:3]), api, "c", None)
    assert msg["choices"][0]["message"]["content"] == " "  # as the stream sent it


def test_openais_json_schema_wrapper_at_the_top_level_is_unwrapped():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    c = chat(json_schema={"name": "x", "schema": schema, "strict": True}).gen.constraint
    assert json.loads(c.text) == schema


def test_endpoints_are_compared_by_host_and_keys_go_only_to_listed_ones(monkeypatch):
    from app.replay import page_endpoint, page_key_env
    from engine.errors import CfsmError

    monkeypatch.setenv("CFSM_REPLAY_ENDPOINTS", "https://api.x.com/v1")
    assert page_endpoint("https://api.x.com/v1/") == "https://api.x.com/v1/"
    for bad in ("https://api.x.com.evil.net/v1", "http://api.x.com/v1", "https://api.x.com:444/v1",
                "https://api.x.com/other"):  # fmt: skip
        with pytest.raises(CfsmError):
            page_endpoint(bad)
    assert page_key_env("CFSM_REPLAY_KEY", "https://api.x.com/v1") == "CFSM_REPLAY_KEY"
    monkeypatch.delenv("CFSM_REPLAY_ENDPOINTS")
    with pytest.raises(CfsmError, match="CFSM_REPLAY_ENDPOINTS"):
        page_key_env("CFSM_REPLAY_KEY", "http://127.0.0.1:9/v1")
