"""The continuous batcher: concurrent requests share forward passes, each keeps its own
grammar state, Stop cancels only its own request, and one request's failure stays its own."""

import re
import threading

import pytest

from engine.constraint import Constraint
from engine.decode import GenerateRequest
from engine.trace import validate_trace

pytestmark = pytest.mark.model


def _submit_all(dec, reqs, compiled, stops=None):
    out = [None] * len(reqs)

    def work(i):
        try:
            out[i] = dec.submit(reqs[i], compiled[i], should_stop=stops[i].is_set if stops else None).to_json()
        except Exception as exc:  # noqa: BLE001
            out[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out


def test_concurrent_requests_share_passes_and_keep_their_own_states(engine):
    dec = engine.ensure_model()
    regexes = [rf"client {i} says: [a-z]+( [a-z]+){{2,5}}\." for i in range(4)]
    comps = [engine.compile(Constraint("regex", r), "fsm").compiled for r in regexes]
    reqs = [GenerateRequest(prompt=f"Client {i}, describe the sea.", constraint=c.constraint, mode="jump",
                            max_new_tokens=40) for i, c in enumerate(comps)]
    traces = _submit_all(dec, reqs, comps)
    for i, tr in enumerate(traces):
        assert not isinstance(tr, Exception), tr
        assert re.fullmatch(regexes[i], tr["text"]), tr["text"]  # its own constraint, no cross-talk
        assert tr["request"]["prompt"] == reqs[i].prompt
        assert tr["scheduler"]["kind"] == "continuous"
        validate_trace(tr)
    # they decoded together: steps whose logits came from a pass shared with others
    assert max(s["batch_size"] for tr in traces for s in tr["steps"]) >= 2


def test_a_solo_request_in_the_batcher_equals_the_single_decoder(engine, paper_bench, character_regex):
    dec = engine.ensure_model()
    c = Constraint("regex", character_regex)
    comp = engine.compile(c, "fsm").compiled
    req = GenerateRequest(prompt=paper_bench["character"]["prompt_template"].format(name="Hedwig"), constraint=c)
    served = dec.submit(req, comp).to_json()
    single = dec.run(req, comp).to_json()
    assert served["text"] == single["text"]
    assert served["totals"]["forward_passes"] == single["totals"]["forward_passes"]
    assert [t["origin"] for t in served["tokens"]] == [t["origin"] for t in single["tokens"]]


def test_stop_cancels_only_its_own_request(engine):
    dec = engine.ensure_model()
    long_c = engine.compile(Constraint("regex", r"[a-z ]{1,300}"), "fsm").compiled
    short_c = engine.compile(Constraint("regex", r"The answer is (yes|no)\."), "fsm").compiled
    stops = [threading.Event(), threading.Event()]
    reqs = [GenerateRequest(prompt="Write a long story about a cat.", constraint=long_c.constraint, mode="masked",
                            max_new_tokens=300),
            GenerateRequest(prompt="Is the sky blue?", constraint=short_c.constraint, max_new_tokens=20)]
    seen = threading.Event()

    def on_event(kind, data):
        if kind == "step" and data["step"]["index"] >= 3:
            seen.set()
            stops[0].set()  # the user of the long request presses Stop mid-way

    out = [None, None]

    def long_run():
        out[0] = dec.submit(reqs[0], long_c, on_event=on_event, should_stop=stops[0].is_set).to_json()

    t = threading.Thread(target=long_run)
    t.start()
    out[1] = dec.submit(reqs[1], short_c, should_stop=stops[1].is_set).to_json()
    t.join(300)
    assert seen.is_set()
    assert out[0]["totals"]["reason"] == "cancelled" and not out[0]["totals"]["finished"]
    assert out[0]["totals"]["output_tokens"] < 300
    assert out[1]["totals"]["finished"] and re.fullmatch(r"The answer is (yes|no)\.", out[1]["text"])


def test_a_failing_request_fails_alone(engine):
    """A backend that breaks mid-run ends its own request with its error; the others finish."""
    dec = engine.ensure_model()
    good = engine.compile(Constraint("regex", r"The answer is (yes|no)\."), "fsm").compiled
    bad = engine.compile(Constraint("regex", r"The colour is (red|blue)\."), "fsm").compiled

    class Broken:
        backend, constraint, compile_seconds = bad.backend, bad.constraint, 0.0

        def matcher(self):
            m = bad.matcher()
            m.accept_token = lambda tid: (_ for _ in ()).throw(RuntimeError("backend crashed"))
            return m

    reqs = [GenerateRequest(prompt="Is the sky blue?", constraint=good.constraint, max_new_tokens=20),
            GenerateRequest(prompt="Sky colour?", constraint=bad.constraint, mode="masked", max_new_tokens=20)]
    good_tr, bad_exc = _submit_all(dec, reqs, [good, Broken()])
    assert isinstance(bad_exc, RuntimeError) and "backend crashed" in str(bad_exc)
    assert good_tr["totals"]["finished"] and re.fullmatch(r"The answer is (yes|no)\.", good_tr["text"])


def test_the_decode_thread_outlives_a_failing_step(engine, monkeypatch):
    """A bug in a scheduler step fails the requests of that step; later requests are served."""
    import engine.scheduler as sched

    dec = engine.ensure_model()
    comp = engine.compile(Constraint("regex", r"The answer is (yes|no)\."), "fsm").compiled
    req = GenerateRequest(prompt="Is the sky blue?", constraint=comp.constraint, mode="masked", max_new_tokens=20)
    real = sched.plan_passes
    calls = {"n": 0}

    def broken_once(feeding):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("scheduler bug")
        return real(feeding)

    monkeypatch.setattr(sched, "plan_passes", broken_once)
    with pytest.raises(RuntimeError, match="scheduler bug"):
        dec.submit(req, comp)
    tr = dec.submit(req, comp).to_json()
    assert tr["totals"]["finished"] and re.fullmatch(r"The answer is (yes|no)\.", tr["text"])
