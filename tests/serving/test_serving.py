"""The continuous batcher: concurrent requests share forward passes, each keeps its own
grammar state, Stop cancels only its own request, and one request's failure stays its own."""

import re
import threading

import pytest

from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.decoding.trace import validate_trace

pytestmark = pytest.mark.model


def _submit_all(dec, reqs, compiled, stops=None):
    out = [None] * len(reqs)

    def work(i):
        try:
            out[i] = dec.submit(
                reqs[i], compiled[i], should_stop=stops[i].is_set if stops else None
            ).to_json()
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
    reqs = [
        GenerateRequest(
            prompt=f"Client {i}, describe the sea.",
            constraint=c.constraint,
            mode="jump",
            max_new_tokens=40,
        )
        for i, c in enumerate(comps)
    ]
    traces = _submit_all(dec, reqs, comps)
    for i, tr in enumerate(traces):
        assert not isinstance(tr, Exception), tr
        assert re.fullmatch(regexes[i], tr["text"]), tr["text"]  # its own constraint, no cross-talk
        assert tr["request"]["prompt"] == reqs[i].prompt
        assert tr["scheduler"]["kind"] == "continuous"
        validate_trace(tr)
    # they decoded together: steps whose logits came from a pass shared with others
    assert max(s["batch_size"] for tr in traces for s in tr["steps"]) >= 2


def test_a_solo_request_in_the_batcher_equals_the_single_decoder(
    engine, paper_bench, character_regex
):
    dec = engine.ensure_model()
    c = Constraint("regex", character_regex)
    comp = engine.compile(c, "fsm").compiled
    req = GenerateRequest(
        prompt=paper_bench["character"]["prompt_template"].format(name="Hedwig"), constraint=c
    )
    served = dec.submit(req, comp).to_json()
    single = dec.run(req, comp).to_json()
    assert served["text"] == single["text"]
    assert served["totals"]["forward_passes"] == single["totals"]["forward_passes"]
    assert [t["origin"] for t in served["tokens"]] == [t["origin"] for t in single["tokens"]]


def test_stop_cancels_only_its_own_request(engine):
    """A short request joins while a long one decodes; the long one is stopped while the
    short one is in the batch; the short one finishes all the same."""
    dec = engine.ensure_model()
    long_c = engine.compile(Constraint("regex", r"[a-z ]{200,300}"), "fsm").compiled  # no early EOS
    short_c = engine.compile(Constraint("regex", r"The answer is (yes|no)\."), "fsm").compiled
    stop_long = threading.Event()
    short_started = threading.Event()
    out = {}

    def short_run():
        req = GenerateRequest(
            prompt="Is the sky blue?", constraint=short_c.constraint, max_new_tokens=20
        )
        out["short"] = dec.submit(
            req, short_c, on_event=lambda k, d: k == "start" and short_started.set()
        ).to_json()

    short_thread = threading.Thread(target=short_run)

    def on_long_event(kind, data):
        if kind != "step":
            return
        if data.step.index == 1:
            short_thread.start()  # the short request arrives while the long one decodes
        if short_started.is_set():
            stop_long.set()  # the long request's user presses Stop

    req = GenerateRequest(
        prompt="Write a long story about a cat.",
        constraint=long_c.constraint,
        mode="masked",
        max_new_tokens=300,
    )
    out["long"] = dec.submit(
        req, long_c, on_event=on_long_event, should_stop=stop_long.is_set
    ).to_json()
    short_thread.join(300)
    assert out["long"]["totals"]["reason"] == "cancelled" and not out["long"]["totals"]["finished"]
    assert out["long"]["totals"]["output_tokens"] < 200
    assert out["short"]["totals"]["finished"] and re.fullmatch(
        r"The answer is (yes|no)\.", out["short"]["text"]
    )


def test_close_serves_what_was_submitted_and_refuses_the_rest(engine):
    from engine.decoding.decoder import Decoder

    own = Decoder(engine.ensure_model().lm, engine.ctx)  # its own batcher, closed by this test
    comp = engine.compile(Constraint("regex", r"The answer is (yes|no)\."), "fsm").compiled
    batcher = own.serve(max_batch=2)
    req = GenerateRequest(prompt="Is the sky blue?", constraint=comp.constraint, max_new_tokens=20)
    futs = [batcher.submit(own.sequence(req, comp)) for _ in range(3)]  # one waits behind max_batch
    batcher.close()
    for f in futs:
        seq = f.result(timeout=300)  # resolved, not left hanging
        assert seq.finished and re.fullmatch(
            r"The answer is (yes|no)\.", own.texts.bytes(seq.out_ids).decode()
        )
    with pytest.raises(RuntimeError, match="shut down"):
        own.submit(req, comp)


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

    reqs = [
        GenerateRequest(prompt="Is the sky blue?", constraint=good.constraint, max_new_tokens=20),
        GenerateRequest(
            prompt="Sky colour?", constraint=bad.constraint, mode="masked", max_new_tokens=20
        ),
    ]
    good_tr, bad_exc = _submit_all(dec, reqs, [good, Broken()])
    assert isinstance(bad_exc, RuntimeError) and "backend crashed" in str(bad_exc)
    assert good_tr["totals"]["finished"] and re.fullmatch(
        r"The answer is (yes|no)\.", good_tr["text"]
    )


def test_the_decode_thread_outlives_a_failing_step(engine, monkeypatch):
    """A bug in a scheduler step fails the requests of that step; later requests are served."""
    import engine.decoding.scheduler as sched

    dec = engine.ensure_model()
    comp = engine.compile(Constraint("regex", r"The answer is (yes|no)\."), "fsm").compiled
    req = GenerateRequest(
        prompt="Is the sky blue?", constraint=comp.constraint, mode="masked", max_new_tokens=20
    )
    real = sched.plan_passes
    calls = {"n": 0}

    def broken_once(feeding, pads=True):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("scheduler bug")
        return real(feeding, pads)

    monkeypatch.setattr(sched, "plan_passes", broken_once)
    with pytest.raises(RuntimeError, match="scheduler bug"):
        dec.submit(req, comp)
    tr = dec.submit(req, comp).to_json()
    assert tr["totals"]["finished"] and re.fullmatch(r"The answer is (yes|no)\.", tr["text"])


def test_shutdown_cancels_running_requests_and_ends_the_thread(engine):
    """At exit the decode thread must not be inside a forward pass (the process would
    abort): shutdown cancels what runs and waits for the thread."""
    from engine.decoding.decoder import Decoder

    own = Decoder(engine.ensure_model().lm, engine.ctx)
    comp = engine.compile(Constraint("regex", r"[a-z ]{200,300}"), "fsm").compiled
    batcher = own.serve()
    started = threading.Event()
    req = GenerateRequest(
        prompt="Write a long story.", constraint=comp.constraint, mode="masked", max_new_tokens=300
    )
    fut = batcher.submit(
        own.sequence(req, comp, on_event=lambda k, d: k == "step" and started.set())
    )
    assert started.wait(120)
    batcher.shutdown()
    seq = fut.result(timeout=1)
    assert seq.reason == "cancelled" and len(seq.out_ids) < 300
    assert not batcher.running


def test_stop_ends_a_request_still_waiting_for_a_place_in_the_batch(engine):
    """A full batch (one place here): the waiting request's Stop ends it at once, while
    the running one goes on."""
    from engine.decoding.decoder import Decoder
    from engine.decoding.scheduler import ContinuousBatcher

    own = Decoder(engine.ensure_model().lm, engine.ctx)
    comp = engine.compile(Constraint("regex", r"[a-z ]{200,300}"), "fsm").compiled
    batcher = ContinuousBatcher(own.runner, threading.Lock(), max_batch=1)
    req = GenerateRequest(
        prompt="Write a long story.", constraint=comp.constraint, mode="masked", max_new_tokens=300
    )
    started, stop = threading.Event(), threading.Event()
    try:
        running = batcher.submit(
            own.sequence(req, comp, on_event=lambda k, d: k == "step" and started.set())
        )
        assert started.wait(120)
        waiting = batcher.submit(own.sequence(req, comp, should_stop=stop.is_set))
        stop.set()
        seq = waiting.result(timeout=60)
        assert seq.reason == "cancelled" and seq.out_ids == []
        assert not running.done()  # the running request was not held up or stopped
    finally:
        batcher.shutdown()
