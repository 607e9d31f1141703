"""Compiles run in the background and a pathological regex never holds up others."""

import threading
import time

import pytest

from engine.compile_cache import CompileCache
from engine.constraint import Constraint
from engine.errors import CfsmError


@pytest.fixture()
def cache(ctx):
    c = CompileCache(ctx, timeout_s=4.0)
    yield c
    c.close()


def test_exponential_regex_times_out_while_others_compile(cache):
    bad = Constraint("regex", "(a|b)*a(a|b){24}")
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


def test_compile_errors_become_error_objects_and_are_not_cached(cache):
    with pytest.raises(CfsmError) as ei:
        cache.get(Constraint("regex", "a(b"), "fsm")
    assert ei.value.kind == "invalid_regex"
    fut = cache.submit(Constraint("regex", "a(b"), "fsm")
    assert fut.exception(timeout=10) is not None


def test_same_request_is_compiled_once(cache):
    c = Constraint("regex", "[0-9]{2}-[0-9]{2}")
    a = cache.submit(c, "fsm")
    b = cache.submit(c, "fsm")
    assert a is b
    assert a.result(timeout=30).compiled is b.result().compiled


def test_page_model_names_are_restricted(tmp_path, monkeypatch):
    from app.state import check_page_model

    monkeypatch.setenv("CFSM_MODELS_DIR", str(tmp_path))
    assert check_page_model("") == "embedded"
    assert check_page_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    (tmp_path / "mine").mkdir()
    assert check_page_model(str(tmp_path / "mine")) == str((tmp_path / "mine").resolve())
    for bad in ("/etc", "../../etc/passwd", "~/.ssh", str(tmp_path / ".." / "x"), "a/b/c", "x" * 300):
        with pytest.raises(CfsmError) as ei:
            check_page_model(bad)
        assert ei.value.kind == "unknown_model"
