"""Compiles that cannot be interrupted run in killable workers: a runaway one ends at its
time limit or memory cap with an error of its own kind, leaves nothing running, and
normal compiles through the workers give what an in-process compile gives."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import engine.serving.compile_cache as cc
import engine.serving.compile_workers as cw
from engine.backends import WORKER_BACKENDS
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.serving.memory import rss_bytes

BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench-data" / "jsonschemabench"
HUGE_RANGE = Constraint("schema", '{"type":"integer","minimum":0,"maximum":9223372036854775807}')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not running either
        return f.read().split()[2] != "Z"


def _worker_pids(cache) -> list[int]:
    return [w._proc.pid for w in cache._worker._all if w._proc is not None]


@pytest.fixture()
def cache(ctx):
    c = cc.CompileCache(ctx, timeout_s=3.0)
    yield c
    c.close()


def test_a_runaway_outlines_index_ends_at_its_limit_and_nothing_keeps_running(cache):
    """The issue's reproducer: outlines-core's Index for a 63-bit integer range used to
    go on after its timeout and grow the server by 25 MB/s."""
    with pytest.raises(CfsmError) as ei:
        cache.get(HUGE_RANGE, "outlines")
    assert ei.value.kind in ("compile_timeout", "compile_memory"), ei.value
    assert "outlines" in ei.value.message or "MB" in ei.value.message
    before = rss_bytes(os.getpid())
    pids = _worker_pids(cache)
    time.sleep(1.0)
    # the worker that ran it was killed; the live ones are idle (they do not grow)
    grown = [rss_bytes(p) for p in pids]
    time.sleep(1.0)
    assert all(rss_bytes(p) <= g + 8 * 2**20 for p, g in zip(pids, grown, strict=True))
    assert rss_bytes(os.getpid()) <= before + 32 * 2**20
    # the failure is cached like any other: asking again answers at once, same kind
    with pytest.raises(CfsmError) as again:
        cache.get(HUGE_RANGE, "outlines")
    assert again.value.kind == ei.value.kind


def test_the_memory_cap_kills_a_compile_with_its_own_error(cache, monkeypatch):
    monkeypatch.setattr(cw, "COMPILE_MEMORY_MB", 200)
    cache.timeout_s = 60.0  # the cap, not the clock, must end it
    with pytest.raises(CfsmError) as ei:
        cache.get(HUGE_RANGE, "outlines", timeout_s=90)
    assert ei.value.kind == "compile_memory" and "200 MB" in ei.value.message
    assert all(_alive(p) for p in _worker_pids(cache))  # the killed one is gone from the pool


SMALL_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "maximum": 99}, "tag": {"enum": ["alpha", "beta"]}},
    "required": ["n", "tag"],
    "additionalProperties": False,
}
SMALL = {
    "schema": (Constraint("schema", json.dumps(SMALL_SCHEMA)), '{"n":42,"tag":"beta"}'),
    "regex": (
        Constraint("regex", r'\{"id": [0-9]{1,3}, "name": "[A-Za-z ]{1,12}"\}'),
        '{"id": 7, "name": "Ada"}',
    ),
}


@pytest.mark.parametrize("kind", ["schema", "regex"])
@pytest.mark.parametrize("backend", WORKER_BACKENDS)
def test_a_compile_through_a_worker_equals_one_in_this_process(ctx, backend, kind):
    c, text = SMALL[kind]
    via = cc.CompileCache(ctx)
    here = cc.CompileCache(ctx, use_worker=False)
    try:
        a, b = via.get(c, backend).compiled.matcher(), here.get(c, backend).compiled.matcher()
        # the library ran in a worker: that worker was set up for it
        assert any((ctx.fingerprint, backend) in w._vocabs for w in via._worker._all)
        for tid in ctx.continuation.encode(text):
            assert (a.allowed_ids() == b.allowed_ids()).all()
            assert a.jump_forward() == b.jump_forward()
            assert a.accept_token(tid) and b.accept_token(tid)
        assert a.is_final() and b.is_final()
    finally:
        via.close()
        here.close()


def test_xgrammar_repeats_a_quick_regex_in_the_server_and_carries_a_schema(ctx):
    """Its serialized regex grammar (1.3 MB for the character regex) costs more to carry
    than the compile; a schema is carried, since a process's first schema compile pays
    seconds of xgrammar's setup."""
    from engine.backends import get_backend

    xg = get_backend("xgrammar")
    rx = xg.compile_native(SMALL["regex"][0], ctx)
    schema = xg.compile_native(SMALL["schema"][0], ctx)
    assert xg.repeat_in_server(rx, 0.001)
    assert not xg.repeat_in_server(rx, 30.0)  # a slow compile is carried, not repeated
    assert not xg.repeat_in_server(schema, 0.001)


def test_xgrammar_never_repeats_a_long_compile_however_costly_carrying_it_is(ctx, monkeypatch):
    """The repeat runs in the server, where no time limit watches it: a compile that took
    more than REPEAT_MAX_S is carried back even when carrying costs more (a huge grammar)."""
    from engine.backends import get_backend

    xg = get_backend("xgrammar")
    rx = xg.compile_native(SMALL["regex"][0], ctx)
    monkeypatch.setattr(type(xg), "CARRY_S_PER_BYTE", 1.0)  # carrying: seconds per byte
    assert xg.repeat_in_server(rx, xg.REPEAT_MAX_S / 2)
    assert not xg.repeat_in_server(rx, xg.REPEAT_MAX_S + 0.01)


KNOWN = {
    "ok",
    "compile_timeout",
    "compile_memory",
    "state_explosion",
    "unsupported_feature",
    "input_too_large",
    "invalid_grammar",
    "unsatisfiable",
}
FAST = (
    "63-bit integer range",
    "40 levels of nesting",
    "(a|b)*a(a|b){24}",
    "schema over the size limit",
    "grammar with 5,000 alternatives",
)


def test_the_adversarial_corpus_gets_named_answers_on_every_backend(cache):
    """A fast subset of tests/data/adversarial.jsonl (the whole corpus: `cfsm bench --suite
    adversarial`): every answer is a compile or a one-line error of a known kind, and the
    cache still compiles an ordinary constraint afterwards."""
    from cfsm.bench.adversarial import load_corpus
    from engine.backends import BACKENDS

    corpus = {c["name"]: c for c in load_corpus()}
    answers = {}
    for name in FAST:
        case = corpus[name]
        for backend in BACKENDS:
            try:
                cache.get(
                    Constraint.from_inputs(case["kind"], case["text"], case["whitespace"]), backend
                )
                answers[name, backend] = "ok"
            except CfsmError as exc:
                answers[name, backend] = exc.kind
    assert set(answers.values()) <= KNOWN, answers
    assert {answers["schema over the size limit", b] for b in BACKENDS} == {"input_too_large"}
    assert {answers["(a|b)*a(a|b){24}", b] for b in ("fsm", "outlines")} == {"state_explosion"}
    # xgrammar's own compile of it takes ~5 s here: at a 3 s limit it may be the clock
    assert answers["(a|b)*a(a|b){24}", "xgrammar"] in ("state_explosion", "compile_timeout")
    assert answers["63-bit integer range", "outlines"] in ("compile_timeout", "compile_memory")
    assert answers["40 levels of nesting", "xgrammar"] == "ok"
    m = cache.get(Constraint("regex", "(yes|no)"), "outlines").compiled.matcher()
    assert len(m.allowed_ids()) > 0


def test_a_fresh_workers_setup_does_not_eat_the_automatons_share_of_the_limit(ctx):
    """xgrammar compiles first, in a worker that is set up on first use (~3.5 s here,
    outside the limit); the automaton after it gets what is left of the compile's own
    3 s, so a regex whose automaton explodes is still refused, not compiled without it."""
    cache = cc.CompileCache(ctx, timeout_s=3.0)
    try:
        with pytest.raises(CfsmError) as ei:
            cache.get(Constraint("regex", "(a|b)*a(a|b){24}"), "xgrammar")
        assert ei.value.kind == "state_explosion"
    finally:
        cache.close()


@pytest.fixture()
def slow_automaton(ctx, monkeypatch, jsonschemabench):
    """A warm cache with short limits, and a real schema (a Github_ultra record) that
    llguidance compiles at once but whose automaton takes seconds to explode."""
    monkeypatch.setattr(cc, "AUTO_FIRST_S", 1.0)
    monkeypatch.setattr(cc, "VIEW_LIMIT_S", 0.5)
    cache = cc.CompileCache(ctx, timeout_s=20.0, warm=True)
    cache.wait_ready()
    text = (BENCH / "Github_ultra" / "o10335.json").read_text(encoding="utf-8")
    yield cache, Constraint("schema", text, "compact")
    cache.close()


def test_a_native_compile_waits_for_the_fsm_view_no_longer_than_its_own_limit(slow_automaton):
    """The view is given VIEW_LIMIT_S, then the constraint comes back without it and says
    why; the automaton is not cached as failed, so fsm still gets the whole limit for it."""
    cache, c = slow_automaton
    res = cache.get(c, "llguidance")
    assert res.compiled.backend == "llguidance" and res.dfa is None
    assert "FSM view was not built" in res.dfa_error and "longer than 0.5 s" in res.dfa_error
    assert cache.lru.get(("dfa", c.regex(), c.max_regex_chars)) is None


def test_auto_gives_fsm_its_own_share_then_moves_on(slow_automaton):
    """Under `auto` fsm's automaton would take its whole limit to explode: auto gives it
    AUTO_FIRST_S, then llguidance compiles it without building the automaton again for its
    view, and the why names fsm's time limit. Nothing is cached as failed."""
    cache, c = slow_automaton
    res = cache.get(c, "auto")
    assert res.backend == "llguidance" and "took longer than 1 s" in res.why  # fsm's share
    assert res.dfa is None and res.dfa_error.startswith("the FSM view was not built: fsm")
    assert cache.lru.get(("dfa", c.regex(), c.max_regex_chars)) is None
