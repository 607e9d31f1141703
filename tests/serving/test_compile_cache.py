"""Compiles run in the background and a pathological regex never holds up others."""

import json
import threading
import time

import pytest

from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.serving.compile_cache import CompileCache


@pytest.fixture()
def cache(ctx):
    c = CompileCache(
        ctx, timeout_s=4.0, max_states=10_000_000
    )  # so that the exponential regex is slow, not refused
    yield c
    c.close()


def test_exponential_regex_times_out_while_others_compile(cache):
    bad = Constraint("regex", "(a|b)*a(a|b){18}")  # 2^19 states: ~20 s
    box = {}

    def slow():
        try:
            cache.get(bad, "fsm")
        except CfsmError as exc:
            box["kind"] = exc.kind
            box["t"] = time.perf_counter()

    t0 = time.perf_counter()
    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.3)
    res = cache.get(Constraint("regex", "(yes|no)"), "fsm")
    done_ok = time.perf_counter()
    th.join(30)
    assert res.dfa.num_states >= 3
    assert box["kind"] == "compile_timeout"
    # the good one did not wait for the bad one's time limit
    assert done_ok < box["t"]
    assert box["t"] - t0 < 15


def test_compile_errors_become_error_objects_and_are_cached(cache):
    with pytest.raises(CfsmError) as ei:
        cache.get(Constraint("regex", "a(b"), "fsm")
    assert ei.value.kind == "invalid_regex"
    first = cache.submit(Constraint("regex", "a(b"), "fsm")
    assert isinstance(first.exception(timeout=10), CfsmError)
    assert cache.submit(Constraint("regex", "a(b"), "fsm") is first  # not compiled again


def test_a_timeout_is_paid_once_and_shared_by_backends(cache):
    bad = Constraint("regex", "(a|b)*a(a|b){18}")
    for backend in ("fsm", "fsm", "outlines"):
        with pytest.raises(CfsmError) as ei:
            cache.get(bad, backend)
        assert ei.value.kind == "compile_timeout"
    # one automaton build for all three requests: the failure is cached per automaton
    assert cache.dfa_builds == 1


def test_cache_is_bounded_by_bytes(ctx):
    small = CompileCache(ctx, budget_bytes=6 * 1024 * 1024, use_worker=False)
    try:
        sizes = []
        for i in range(12):
            res = small.get(Constraint("regex", f"item {i}: [a-z]{{1,{20 + i}}}"), "fsm")
            sizes.append(res.compiled.nbytes())
            st = small.stats()
            assert st["bytes"] <= st["budget_bytes"] or st["entries"] == 1
        assert small.stats()["evictions"] > 0
        assert max(sizes) > 100_000  # the entries are big enough for the budget to matter
        # an evicted constraint compiles again, correctly
        again = small.get(Constraint("regex", "item 0: [a-z]{1,20}"), "fsm").compiled.matcher()
        assert again.jump_forward() == "item 0: "
    finally:
        small.close()


def test_byte_lru_evicts_least_recently_used_and_remeasures():
    from engine.serving.lru import ByteLRU

    sizes = {"a": 40, "b": 40, "c": 40}
    lru = ByteLRU(100, lambda k: sizes[k])
    lru.put("a", "a")
    lru.put("b", "b")
    assert lru.get("a") == "a"  # a is now the most recent
    lru.put("c", "c")  # 120 > 100: b (least recent) goes
    assert "b" not in lru and "a" in lru and "c" in lru
    sizes["c"] = 90  # c's caches grew while in use
    assert lru.get("c") == "c"
    assert "a" not in lru and lru.stats()["bytes"] == 90
    sizes["c"] = 500  # the entry in use stays even when it alone is over budget
    lru.remeasure("c")
    assert "c" in lru and len(lru) == 1


def test_a_compile_in_flight_is_never_evicted(ctx):
    small = CompileCache(ctx, budget_bytes=1, use_worker=False)  # everything is over budget
    try:
        from concurrent.futures import Future

        pending: Future = Future()  # stands for a compile still running
        small.lru.put(("in flight",), pending)
        small.get(Constraint("regex", "[a-z]{1,30}"), "fsm")
        small.get(Constraint("regex", "[0-9]{1,30}"), "fsm")
        assert ("in flight",) in small.lru  # finished entries were evicted around it
    finally:
        small.close()


def test_same_request_is_compiled_once(cache):
    c = Constraint("regex", "[0-9]{2}-[0-9]{2}")
    a = cache.submit(c, "fsm")
    b = cache.submit(c, "fsm")
    assert a is b
    assert a.result(timeout=30).compiled is b.result().compiled


def test_schemas_that_differ_only_in_annotations_share_one_outlines_compile(cache, ctx):
    """Two schemas that differ only in a title and a description lower to one regex:
    outlines-core builds its Index once (in a worker) for both. Each compiled constraint
    is still its own and enforces its schema; a schema of another regex compiles anew."""
    from engine.analysis.check import check_text

    def schema(title: str, why: str) -> Constraint:
        n = {"type": "integer", "minimum": 1, "maximum": 99, "description": why}
        obj = {"title": title, "type": "object", "properties": {"n": n}, "required": ["n"]}
        return Constraint("schema", json.dumps(obj))

    a, b = schema("A", "how many"), schema("B", "a count")
    assert a.key != b.key and a.regex() == b.regex()
    ra, rb = cache.get(a, "outlines"), cache.get(b, "outlines")
    assert cache.native_compiles == 1
    assert ra.compiled is not rb.compiled and rb.compiled.constraint is b
    for r in (ra, rb):
        assert check_text(r.compiled, r.dfa, ctx, '{"n":42}')["accepted"]
        assert not check_text(r.compiled, r.dfa, ctx, '{"n":100}')["accepted"]
    cache.get(Constraint("schema", json.dumps({"type": "boolean"})), "outlines")
    assert cache.native_compiles == 2


def test_page_model_names_are_restricted(tmp_path, monkeypatch):
    from app.state import check_page_model

    monkeypatch.setenv("CFSM_MODELS_DIR", str(tmp_path))
    assert check_page_model("") == "embedded"
    assert (
        check_page_model("HuggingFaceTB/SmolLM2-135M-Instruct")
        == "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    (tmp_path / "mine").mkdir()
    assert check_page_model(str(tmp_path / "mine")) == str((tmp_path / "mine").resolve())
    for bad in (
        "/etc",
        "../../etc/passwd",
        "~/.ssh",
        str(tmp_path / ".." / "x"),
        "a/b/c",
        "x" * 300,
    ):
        with pytest.raises(CfsmError) as ei:
            check_page_model(bad)
        assert ei.value.kind == "unknown_model"


def test_a_lenient_compile_is_not_served_the_strict_refusal():
    from engine.backends import TokenizerContext
    from engine.constraint import Constraint
    from engine.errors import CfsmError
    from engine.serving.compile_cache import CompileCache
    from engine.tokens.byte_tokenizer import byte_tokenizer

    cache = CompileCache(TokenizerContext(byte_tokenizer()), use_worker=False)
    schema = '{"type": "array", "items": {"type": "integer"}, "uniqueItems": true}'
    try:
        with pytest.raises(CfsmError):
            cache.get(Constraint("schema", schema), "fsm")
        res = cache.get(Constraint("schema", schema, lenient=True), "fsm")
        assert res.compiled.warnings and "uniqueItems" in res.compiled.warnings[0]
    finally:
        cache.close()


def test_the_live_check_names_a_state_explosion_and_leaves_a_built_automaton_for_run(ctx):
    """While typing: `(a|b)*a(a|b){24}` is refused as Run would refuse it (and that failure
    is cached for Run); an ordinary regex's automaton is built once, by the live check's
    own worker, and Run uses it."""
    cache = CompileCache(ctx, timeout_s=10.0)
    try:
        with pytest.raises(CfsmError) as ei:
            cache.try_dfa(Constraint("regex", "(a|b)*a(a|b){24}"))
        assert ei.value.kind == "state_explosion"
        with pytest.raises(CfsmError) as again:  # Run's build: the cached answer, no new build
            cache.dfa(Constraint("regex", "(a|b)*a(a|b){24}"))
        assert again.value.kind == "state_explosion" and cache.dfa_builds == 0
        got = cache.try_dfa(Constraint("regex", "[a-z]{3,8}"))
        assert got.dfa is not None and got.why_not == "" and got.dfa.num_states == 9
        assert cache.get(Constraint("regex", "[a-z]{3,8}"), "fsm").dfa is got.dfa
        assert cache.dfa_builds == 0  # Run built no automaton of its own
    finally:
        cache.close()


def test_the_live_check_never_waits_and_stops_a_slow_build_at_its_budget(ctx):
    cache = CompileCache(ctx, max_states=10_000_000)  # slow, not refused
    try:
        slow = Constraint("regex", "(a|b)*a(a|b){18}")  # ~20 s to build
        cache._live.try_build("a", 10, 60, 10)  # the worker started (not the check's time)
        t0 = time.perf_counter()
        got = cache.try_dfa(slow, budget_s=0.5)
        assert got == (None, "slow") and time.perf_counter() - t0 < 5
        assert cache.lru.get(("dfa", slow.regex(), slow.max_regex_chars)) is None  # not cached
        with cache._live._lock:  # another check is building: this one is not tried
            assert cache.try_dfa(Constraint("regex", "x[0-9]+")) == (None, "busy")
    finally:
        cache.close()


def test_a_worker_over_its_memory_limit_after_setup_still_compiles(tmp_path):
    """Where the libraries alone pass CFSM_WORKER_RSS_MB (torch's CUDA build is ~1 GB
    more), a worker must not be ended between its setup and the job it was set up for: it
    got the job with no vocabulary (`compile_failed: '<fingerprint>'`, seen on Debian 13)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CFSM_WORKER_RSS_MB": "1"}
    cmd = [sys.executable, "-m", "cfsm", "check", "--backend", "xgrammar", "--regex"]
    for rx, text in (("[0-9]+", "12"), ("(yes|no)", "no")):
        r = subprocess.run([*cmd, rx, "--text", text], env=env, cwd=root, capture_output=True)
        out = json.loads(r.stdout)
        assert r.returncode == 0 and out["accepted"], out


def test_the_memory_cap_bounds_what_a_compile_adds_to_a_set_up_worker():
    """Where the libraries alone come near CFSM_COMPILE_MEMORY_MB (torch's CUDA build on
    Debian 13 refused every native compile as compile_memory), the cap is the set-up
    worker's memory plus half the setting; a worker that holds little keeps the setting."""
    from engine.limits import COMPILE_MEMORY_MB
    from engine.serving.compile_cache import CompileWorker

    w = CompileWorker()
    mb = 1024 * 1024
    assert w._memory_cap() == COMPILE_MEMORY_MB * mb  # nothing set up yet (a DFA worker)
    w._set_up_bytes = 700 * mb
    assert w._memory_cap() == 700 * mb + COMPILE_MEMORY_MB * mb // 2
    w._set_up_bytes = 100 * mb
    assert w._memory_cap() == COMPILE_MEMORY_MB * mb
