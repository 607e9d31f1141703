"""Triggered constraints with the embedded model on every backend: reasoning then a JSON
answer, and tool calls, jump and masked; every constrained segment valid on its own;
batched runs equal single runs."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.backends import BACKENDS, get_backend
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest

pytestmark = pytest.mark.model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 24},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Local time",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 24}},
                "required": ["city"],
            },
        },
    },
]
ANSWER = {
    "type": "object",
    "properties": {"capital": {"type": "string", "maxLength": 24}},
    "required": ["capital"],
}


# every backend through the engine's trigger layer, and the libraries' own machinery too:
# xgrammar's structural tags, llguidance's lazy lexemes (no thinking budget there)
RUNS = [(b, "engine") for b in BACKENDS] + [("xgrammar", "native")]
TOOL_RUNS = [*RUNS, ("llguidance", "native")]


def tools_request(backend: str, mode: str, **kw) -> GenerateRequest:
    kw.setdefault("tool_choice", "required")
    return GenerateRequest.from_inputs(
        "What is the weather in Paris? Use a tool.",
        None,
        tools=json.dumps(TOOLS),
        backend=backend,
        mode=mode,
        max_new_tokens=64,
        **kw,
    )


def named_request(backend: str, mode: str, **kw) -> GenerateRequest:
    """A named tool forced first; any tool may follow."""
    return tools_request(backend, mode, **{"tool_choice": "get_time", **kw})


def reasoning_request(backend: str, mode: str, **kw) -> GenerateRequest:
    return GenerateRequest.from_inputs(
        "Think briefly, then answer in JSON: what is the capital of France?",
        Constraint("schema", json.dumps(ANSWER)),
        reasoning=True,
        think_budget=16,
        backend=backend,
        mode=mode,
        max_new_tokens=64,
        **kw,
    )


def _check_tool_trace(tr: dict) -> None:
    assert tr["valid"] and tr["totals"]["finished"], tr["validation"]
    calls = [s for s in tr["segments"] if s["kind"] == "constrained"]
    assert calls and all(s["valid"] for s in calls)
    for s in calls:  # checked here again, independently of the engine's own check
        body = json.loads(s["text"])
        tool = next(t["function"] for t in TOOLS if t["function"]["name"] == body["name"])
        jsonschema.validate(body["arguments"], tool["parameters"])
    assert tr["text"].startswith("<tool_call>{") and tr["text"].endswith("</tool_call>")


def _thinking_tokens(tr: dict, think: dict) -> int:
    """Free tokens of the thinking, its end marker not counted (the engine's layer makes a
    forced marker a tag of its own; a structural tag's run keeps it in the free text)."""
    toks = tr["tokens"][think["start"] : think["end"]]
    text, n = "", len(toks)
    while n and text != "</think>" and len(text) < len("</think>"):
        n, text = n - 1, toks[n - 1]["text"] + text
    return n if text == "</think>" else len(toks)


def _check_reasoning_trace(tr: dict) -> None:
    assert tr["valid"] and tr["totals"]["finished"], tr["validation"]
    kinds = [(s["kind"], s["label"]) for s in tr["segments"]]
    assert kinds[:2] == [("tag", "thinking start"), ("free", "thinking")]
    assert kinds[-1] == ("constrained", "answer")
    think = tr["segments"][1]
    assert _thinking_tokens(tr, think) <= 16  # the budget holds
    answer = tr["segments"][-1]
    jsonschema.validate(json.loads(answer["text"]), ANSWER)
    assert tr["text"].endswith("</think>" + answer["text"])


@pytest.mark.parametrize("backend, impl", TOOL_RUNS)
@pytest.mark.parametrize("mode", ["jump", "masked"])
def test_tool_calls_are_valid_on_every_backend(engine, backend, impl, mode):
    tr = engine.generate(tools_request(backend, mode, trigger_impl=impl)).to_json()
    _check_tool_trace(tr)
    assert tr["compile"]["triggers"] == ("engine" if impl == "engine" else f"native ({backend})")


def test_an_auto_run_with_tools_names_the_backend_auto_chose_and_why(engine):
    """A triggered run on auto said "auto" and no reason: the page's summary could not say
    which library held the call to the tool's schema."""
    from viz.summaries import summary_md

    tr = engine.generate(tools_request("auto", "jump"))
    assert tr.backend in BACKENDS and tr.backend_why.startswith(tr.backend + ":")
    assert f"with **{tr.backend}**" in summary_md(tr)
    assert "Backend chosen by auto" in summary_md(tr)


@pytest.mark.parametrize("backend, impl", RUNS)
@pytest.mark.parametrize("mode", ["jump", "masked"])
def test_reasoning_then_an_answer_on_every_backend(engine, backend, impl, mode):
    tr = engine.generate(reasoning_request(backend, mode, trigger_impl=impl)).to_json()
    _check_reasoning_trace(tr)
    free = [s for s in tr["steps"] if s.get("segment") == 1]
    vocab = tr["model"]["vocab_size"]
    if impl == "engine":
        assert free and all("mask_key" not in s for s in free)  # nothing is masked there
        # all tokens but the stop, and where the marker has begun, those that would run past it
        assert max(s["allowed"] for s in free) == vocab - 1
        assert min(s["allowed"] for s in free) > vocab - 1000
    else:  # xgrammar's structural tag masks free text itself: nearly every token, never the stop
        assert free and all(s["mask_key"] for s in free)
        assert free[0]["allowed"] > vocab - 1000  # the thinking's first token: nearly any


def test_llguidance_native_reasoning_holds_the_answer_after_the_marker(engine):
    """Without a budget (the small model never closes its thinking by itself, so this walks
    the matcher): free text until `</think>`, then only the answer's tokens."""
    from engine.triggers.plan import TriggerOptions, build_plan

    opts = TriggerOptions(reasoning=True)
    plan = build_plan(opts, Constraint("regex", "(yes|no)"))
    grammar = engine.compile(
        get_backend("llguidance").triggered_grammar(plan, opts, engine.ctx), "llguidance"
    )
    m = grammar.compiled.matcher()
    enc = engine.ctx.continuation.encode
    for t in enc("<think>Ice is frozen water, so</think>"):
        assert m.accept_token(t)
    allowed = {engine.ctx.vocab.token_bytes[i] for i in m.allowed_ids().tolist()}
    assert {b"yes", b"no"} <= allowed and b" so" not in allowed and not m.is_final()
    assert all(m.accept_token(t) for t in enc("no")) and m.is_final()


@pytest.mark.parametrize(
    "backend, make",
    [
        ("xgrammar", tools_request),
        ("xgrammar", reasoning_request),
        ("llguidance", tools_request),
        ("xgrammar", named_request),
        ("llguidance", named_request),
    ],
)
def test_native_triggers_write_what_the_engine_layer_writes(engine, backend, make):
    """Greedy, the same model: the library's own trigger machinery and the engine's layer
    hold the same language, so they write the same text, with the same segments."""
    for mode in ("jump", "masked"):
        native = engine.generate(make(backend, mode, trigger_impl="native")).to_json()
        layer = engine.generate(make(backend, mode, trigger_impl="engine")).to_json()
        assert native["text"] == layer["text"] and native["valid"]
        kinds = [s["kind"] for s in native["segments"]]
        assert [s["kind"] for s in layer["segments"] if s["label"] != "thinking end"] == kinds
    # (the masked passes may differ: a library's mask may let a token cross a trigger)


def test_a_named_tool_choice_forces_that_tool_first_then_allows_any(engine):
    tr = engine.generate(named_request("fsm", "jump")).to_json()
    assert tr["valid"] and json.loads(tr["segments"][1]["text"])["name"] == "get_time"
    # the automaton drawn is the forced call's: the first constrained segment walks it
    assert tr["automaton"]["path_segment"] == 1 and len(tr["automaton"]["path"]) > 10
    from engine.triggers.matcher import TriggeredConstraint

    req = named_request("fsm", "jump")
    compiled = engine.compile_request(req)[1]
    assert isinstance(compiled, TriggeredConstraint)
    m = compiled.matcher()
    enc = engine.ctx.continuation.encode
    first = '<tool_call>{"name": "get_time", "arguments": {"city": "Oslo"}}</tool_call>'
    for t in enc(first):
        assert m.accept_token(t)
    for t in enc(
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}'
    ):
        assert m.accept_token(t)  # a second call may name any tool


def test_native_triggers_are_refused_by_name_where_a_backend_has_none(engine):
    from engine.errors import CfsmError

    with pytest.raises(CfsmError) as ei:
        engine.generate(tools_request("fsm", "jump", trigger_impl="native"))
    assert ei.value.kind == "unsupported_feature" and "'fsm'" in ei.value.message
    # llguidance's max_tokens ends the thinking without its marker: a budget is the engine's
    with pytest.raises(CfsmError) as ei:
        engine.generate(reasoning_request("llguidance", "jump", trigger_impl="native"))
    assert "'llguidance'" in ei.value.message
    auto = engine.generate(reasoning_request("llguidance", "jump")).to_json()
    assert auto["compile"]["triggers"] == "engine" and auto["valid"]


def test_jump_forward_runs_inside_the_call_and_not_in_free_text(engine):
    jump = engine.generate(tools_request("fsm", "jump")).to_json()
    masked = engine.generate(tools_request("fsm", "masked")).to_json()
    strings = [j["string"] for j in jump["jumps"]]
    assert strings[0].startswith('<tool_call>{"name": "get_')  # the tag and the body's start
    assert any(s.startswith('", "arguments": {"') for s in strings)
    assert jump["totals"]["forward_passes"] * 3 < masked["totals"]["forward_passes"]
    reasoning = engine.generate(reasoning_request("fsm", "jump")).to_json()
    think = reasoning["segments"][1]
    # no jump starts inside the free thinking (the budget's forced marker starts at its end)
    assert all(
        not think["char_start"] < j["char_start"] < think["char_end"] for j in reasoning["jumps"]
    )


def test_batched_triggered_runs_equal_single_runs(engine):
    reqs = [
        tools_request("fsm", "jump"),
        reasoning_request("fsm", "jump"),
        reasoning_request("xgrammar", "masked"),
    ]
    single = [engine.generate(r).text for r in reqs]
    dec = engine.ensure_model()
    seqs = [dec.sequence(r, engine.compile_request(r)[1]) for r in reqs]
    dec.run_many(seqs)
    batched = [s.finish(dec.model_info(), {"kind": "batch", "max_batch": 3}) for s in seqs]
    assert [t.text for t in batched] == single
    assert all(t.valid for t in batched)
