"""`cfsm serve`'s endpoints beside /v1, checked as a deployer checks them: the readiness
probe (503 with Retry-After until the model is loaded, then 200), /version, /tokenize and
/detokenize against the chat template and a real chat completion's usage, and /metrics
parsed as Prometheus parses it, its counters moving by exactly one request's figures."""

from __future__ import annotations

import importlib.metadata

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

ASK = [{"role": "system", "content": "Answer in one word."},
       {"role": "user", "content": "Which fruit is red: apple or pear?"}]  # fmt: skip
TEXT = 'Invent a person: {"name": "Zoë", "age": 36} — naïve café ✓\n  two  spaces'


def scrape(url: str) -> dict[tuple, float]:
    """Every sample of /metrics by (name, its labels)."""
    r = httpx.get(f"{url}/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def grew(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after[key] - before[key]


def is_openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_a_server_whose_model_is_not_loaded_is_not_ready():
    """Without a model: the probe (GET and HEAD) answers 503 at once; /tokenize, /v1/models
    and a completion wait for the model (here 0.3 s), then answer 503 with Retry-After, in
    OpenAI's shape; /version and /metrics answer at once, a refused /v1 request counted."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from app.openai_routes import openai_router
    from app.serving_routes import serving_router
    from app.state import EngineHub

    hub = EngineHub("some/model-that-is-not-here")
    hub.start = lambda name=None: None  # nothing loads: the hub stays "not loaded yet"
    hub.load_wait_s = 0.3
    app = FastAPI()
    app.include_router(openai_router(hub))
    app.include_router(serving_router(hub))
    client = TestClient(app)
    assert client.head("/health").status_code == 503
    waited = (client.post("/tokenize", json={"prompt": "x"}), client.get("/v1/models"))
    for r in (client.get("/health"), *waited):
        assert is_openai_error(r, 503)["type"] == "server_error"
        assert r.headers["retry-after"] == "5"
    for r in waited:
        assert "not ready after 0.3 s" in r.json()["error"]["message"]
    version = client.get("/version").json()
    assert version["version"] == importlib.metadata.version("cfsm-lab")
    assert version["model"] == "some/model-that-is-not-here" and version["runtime"] is None
    body = {"model": hub.default, "messages": ASK}
    assert client.post("/v1/chat/completions", json=body).status_code == 503
    text = client.get("/metrics").text
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["cfsm:num_requests_running"].value == 0
    counts = {
        s.labels["status"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "cfsm:requests_total"
    }
    assert counts == {"ok": 0, "client_error": 0, "server_error": 0, "rejected": 1}


def test_a_request_sent_while_the_model_loads_waits_for_it():
    """/v1/models (a readiness check clients use) answers once the model is there, not
    before, and not with an error while it loads within the wait."""
    import time

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from app.openai_routes import openai_router
    from app.state import EngineHub

    hub = EngineHub("a/model")
    hub.start = lambda name=None: None
    ready_at = time.monotonic() + 0.5
    hub.peek = lambda name=None: object() if time.monotonic() >= ready_at else None
    app = FastAPI()
    app.include_router(openai_router(hub))
    r = TestClient(app).get("/v1/models")
    assert r.status_code == 200 and time.monotonic() >= ready_at
    assert [m["id"] for m in r.json()["data"]] == ["a/model"]


def test_the_compile_cache_counts_the_lookups_metrics_report(ctx):
    """A new constraint is a miss (a compile starts), the same one again a hit."""
    from engine.constraint import Constraint
    from engine.serving.compile_cache import CompileCache

    cache = CompileCache(ctx, use_worker=False)
    try:
        for _ in range(3):
            cache.get(Constraint("regex", "(yes|no)"), "fsm")
        assert (cache.hits, cache.misses) == (2, 1)
    finally:
        cache.close()


@pytest.mark.model
def test_the_probe_and_version_of_a_ready_server(app_url):
    r = httpx.get(f"{app_url}/health", timeout=30)
    assert r.status_code == 200 and r.content == b""
    v = httpx.get(f"{app_url}/version", timeout=30).json()
    assert v["version"] == importlib.metadata.version("cfsm-lab")
    assert v["model"] == "embedded" and v["runtime"] in ("llamacpp", "transformers")


@pytest.mark.model
def test_a_prompt_tokenized_detokenizes_to_the_same_text(app_url):
    r = httpx.post(f"{app_url}/tokenize", json={"model": "embedded", "prompt": TEXT}, timeout=30)
    got = r.json()
    assert r.status_code == 200 and got["count"] == len(got["tokens"]) > 10
    assert got["max_model_len"] > got["count"]
    back = httpx.post(f"{app_url}/detokenize", json={"model": "embedded", "tokens": got["tokens"]},
                      timeout=30)  # fmt: skip
    assert back.status_code == 200 and back.json() == {"prompt": TEXT}


@pytest.mark.model
def test_messages_tokenize_as_the_chat_template_and_a_completion_counts_them(app_url, tokenizer):
    """The ids are the chat template's (a generation prompt after the messages), and a
    chat completion of the same messages reports as many prompt tokens; /metrics counts
    that completion exactly: its usage, its forward passes and jumped tokens, one `ok`."""
    r = httpx.post(f"{app_url}/tokenize", json={"model": "embedded", "messages": ASK}, timeout=30)
    got = r.json()
    assert r.status_code == 200 and got["count"] == len(got["tokens"])
    text = tokenizer.apply_chat_template(ASK, tokenize=False, add_generation_prompt=True)
    assert got["tokens"] == tokenizer.encode(text, add_special_tokens=False)

    before = scrape(app_url)
    body = {"model": "embedded", "messages": ASK, "temperature": 0, "max_tokens": 16,
            "structured_outputs": {"regex": "(apple|apricot) is red"}}  # fmt: skip
    done = httpx.post(f"{app_url}/v1/chat/completions", json=body, timeout=300).json()
    after = scrape(app_url)
    usage, cf = done["usage"], done["cfsm"]
    assert usage["prompt_tokens"] == got["count"]
    assert grew(before, after, "cfsm:generation_tokens_total") == usage["completion_tokens"] > 0
    assert grew(before, after, "cfsm:prompt_tokens_total") == usage["prompt_tokens"]
    assert grew(before, after, "cfsm:forward_passes_total") == cf["forward_passes"]
    assert grew(before, after, "cfsm:jumped_tokens_total") == cf["jumped_tokens"] > 0
    assert grew(before, after, "cfsm:requests_total", status="ok") == 1
    looked_up = grew(before, after, "cfsm:compile_cache_hits_total") + grew(
        before, after, "cfsm:compile_cache_misses_total"
    )
    assert looked_up >= 1  # the request's constraint was looked up in the compile cache
    assert after[("cfsm:num_requests_running", ())] == 0
    assert after[("cfsm:kv_cache_cells_used", ())] >= 0


@pytest.mark.model
def test_bad_bodies_and_unknown_models_are_openai_errors(app_url):
    def post(path: str, **kw) -> httpx.Response:
        return httpx.post(f"{app_url}{path}", timeout=30, **kw)

    err = is_openai_error(post("/tokenize", json={"model": "gpt-4", "prompt": "x"}), 404)
    assert err["code"] == "model_not_found" and err["param"] == "model"
    is_openai_error(post("/detokenize", json={"model": "gpt-4", "tokens": [1]}), 404)
    both = {"model": "embedded", "prompt": "x", "messages": ASK}
    assert is_openai_error(post("/tokenize", json=both), 400)["param"] == "prompt"
    is_openai_error(post("/tokenize", json={"model": "embedded"}), 400)
    is_openai_error(post("/tokenize", content=b"{nope"), 400)
    no_prompt = {"model": "embedded", "messages": ASK, "add_generation_prompt": False}
    assert is_openai_error(post("/tokenize", json=no_prompt), 400)["param"] == (
        "add_generation_prompt"
    )
    for tokens in ("abc", [1, "2"], [-1], [10**9], [True]):
        body = {"model": "embedded", "tokens": tokens}
        assert is_openai_error(post("/detokenize", json=body), 400)["param"] == "tokens"
    before = scrape(app_url)
    bad = {"model": "embedded", "messages": ASK, "structured_outputs": {"regex": "("}}
    is_openai_error(post("/v1/chat/completions", json=bad), 400)
    assert grew(before, scrape(app_url), "cfsm:requests_total", status="client_error") == 1


@pytest.mark.model
def test_a_stream_that_fails_after_its_200_is_counted_as_a_stream_error(app_server, monkeypatch):
    """A stream's 200 is sent before it decodes: a failure after it is an error event in the
    stream, and /metrics counts it under cfsm:stream_errors (it was counted nowhere)."""
    url, hub = app_server
    import json

    def boom(*_a, **_k):
        raise RuntimeError("the decode failed")

    monkeypatch.setattr(hub.get(), "generate", boom)
    before = scrape(url)
    body = {"model": "embedded", "messages": ASK, "stream": True, "max_tokens": 4}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        events = [x[6:] for x in r.iter_lines() if x.startswith("data: ")]
    errors = [json.loads(e)["error"] for e in events if e != "[DONE]" and "error" in json.loads(e)]
    assert len(errors) == 1 and errors[0]["type"] and events[-1] == "[DONE]"
    after = scrape(url)
    assert grew(before, after, "cfsm:stream_errors_total", status="server_error") == 1
    assert grew(before, after, "cfsm:requests_total", status="ok") == 1  # its 200
