"""Replay of another engine's output: a real llama-server's recorded responses to the
SGLang character regex (tests/data/replay, recorded with `cfsm replay --save-response`
against llama-server on the embedded GGUF) walked through this lab's automaton."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.analysis.ideal import ideal_counts
from engine.constraint import Constraint
from engine.decoding.trace import Trace
from engine.errors import CfsmError
from engine.regex.compressed import compressed_of

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads((DATA / "llama-server-character.json").read_text())


def test_every_token_is_placed_and_forced_tokens_match_the_labs_analysis(
    compile_engine, recorded, character_regex
):
    c = Constraint.from_inputs("regex", character_regex)
    tr = compile_engine.replay(c, recorded, {"model": "smollm2", "source": "file"}).to_json()
    engine_ids = [p["id"] for p in recorded["choices"][0]["logprobs"]["content"]][:-1]  # EOS
    assert [t["id"] for t in tr["tokens"]] == engine_ids  # its own ids, every one placed
    assert tr["replay"]["ids_from"] == "engine ids" and tr["valid"] is True
    assert all(s["char_state"] is not None and s["allowed"] >= 1 for s in tr["steps"])
    ideal = ideal_counts(compressed_of(compile_engine.automaton(c)), tr["text"], engine_ids,
                         compile_engine.ctx.vocab.token_bytes)  # fmt: skip
    forced = sum(1 for t in tr["tokens"] if t["origin"] == "forced")
    assert forced == tr["replay"]["forced_tokens"] == ideal["forced_tokens"]
    assert ideal["forced_tokens"] == ideal["output_tokens"] - ideal["model_tokens"]  # no stop
    assert forced > len(engine_ids) // 2  # llama-server decoded the forced text token by token
    # the engine's alternatives are set against the mask: at the first step it wanted "H"
    first = tr["steps"][0]
    assert [a[1] for a in first["top_raw"]][:1] == ["H"] and first["top_masked"] == []
    assert tr["automaton"]["path"][-1] in tr["automaton"]["accepting"]


def test_a_token_outside_the_constraint_is_flagged_at_its_step(
    compile_engine, recorded, character_regex
):
    strict = character_regex.replace("|Hufflepuff)", ")")  # the engine wrote Hufflepuff
    assert strict != character_regex
    tr = compile_engine.replay(Constraint.from_inputs("regex", strict), recorded, {}).to_json()
    (v,) = tr["replay"]["violations"]
    at = v["char_offset"]
    assert tr["text"][at:].startswith(v["text"]) and tr["text"][:at].endswith('"house": "')
    assert tr["valid"] is False and tr["steps"][v["step"]]["token_id"] == v["token_id"]
    assert v["allowed"] >= 3  # Gryffindor, Slytherin, Ravenclaw's first tokens


def test_an_output_that_leaves_at_step_0_is_called_outside_not_unfinished(compile_engine, recorded):
    """Issue 46: the badge said "not finished (replay)" and the summary claimed a saved pass
    for a token after the output had left the constraint."""
    from viz.summaries import replay_md

    tr = compile_engine.replay(
        Constraint.from_inputs("regex", "ab(c|d)efgh"), recorded, {}
    ).to_json()
    (v,) = tr["replay"]["violations"]
    assert v["step"] == 0 and tr["valid"] is False
    assert tr["validation"].startswith("outside the constraint at step 0")
    # what it wrote and what was expected: the mask's tokens at step 0 all begin with "a"
    assert f"the engine wrote {v['text']!r}, where the mask allowed " in tr["validation"]
    expected = v["expected"]
    assert expected and all(t.startswith("a") for t in expected), expected
    assert repr(expected[0]) in tr["validation"]
    assert tr["replay"]["forced_tokens"] == 0
    assert all(t["origin"] != "forced" for t in tr["tokens"])
    md = replay_md(Trace.from_json(tr))
    assert "**Jump-forward would have saved nothing**: this output left the constraint at " in md
    assert "nothing is counted past it" in md and "% of its tokens" not in md


def test_a_stream_is_timed_per_token_and_the_cli_replays_a_saved_response(character_regex):
    out = subprocess.run(
        [sys.executable, "-m", "cfsm", "replay", "--response",
         str(DATA / "llama-server-character-stream.json"), "--regex", character_regex],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["valid"] is True and rep["violations"] == []
    assert rep["tokens"] == 158 and rep["forced_tokens"] == 130 and rep["streamed_ms"] > 0
    bad = subprocess.run(
        [sys.executable, "-m", "cfsm", "replay", "--regex", "a", "--endpoint", "ftp://x"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert bad.returncode == 2 and "error" in json.loads(bad.stdout)


def test_responses_without_logprobs_or_with_other_tokenizers(compile_engine):
    c = Constraint.from_inputs("regex", "(yes|no)")
    with pytest.raises(CfsmError, match="logprobs"):
        compile_engine.replay(c, {"choices": [{"message": {"content": "yes"}}]}, {})
    # a token this vocabulary lacks: the text is re-tokenized here, and still walked
    foreign = {
        "choices": [
            {
                "message": {"content": "yes"},
                "logprobs": {
                    "content": [
                        {"token": "yes", "bytes": [0xFF, 0xFE], "logprob": -0.1, "top_logprobs": []}
                    ]
                },
            }
        ]
    }
    tr = compile_engine.replay(c, foreign, {}).to_json()
    assert tr["replay"]["ids_from"] == "re-tokenized" and tr["text"] == "yes" and tr["valid"]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(
    __import__("cfsm.bench.llama_server", fromlist=["x"]).server_binary() is None,
    reason="llama-server is not built here (scripts/build_llama_server.sh, outside make test)",
)
def test_a_live_llama_server_stream_replays_with_every_token_placed(engine, character_regex):
    """The real server, asked now (streamed, greedy, its GBNF of the regex): its own ids,
    each token timed, the forced count the analysis gives, the output valid."""
    from cfsm.bench.llama_server import LlamaServer, server_binary
    from engine.replay.client import request_body, send

    llm = engine.ensure_model("llamacpp").lm.model
    srv = LlamaServer(server_binary(), llm.path, llm.threads, llm.threads)
    try:
        c = Constraint.from_inputs("regex", character_regex)
        prompt = "Describe Ron Weasley as JSON."
        chunks = send(srv.url + "/v1", request_body(c, prompt, "gguf", "llama-server", 256,
                                                     stream=True))  # fmt: skip
    finally:
        srv.close()
    tr = engine.replay(c, chunks, {"endpoint": srv.url, "source": "stream"}).to_json()
    ids = [t["id"] for t in tr["tokens"]]
    streamed = [p["id"] for ch in chunks for p in (ch["choices"][0].get("logprobs") or {})
                .get("content") or [] if ch.get("choices")]  # fmt: skip
    assert ids == streamed and tr["replay"]["ids_from"] == "engine ids" and tr["valid"]
    ideal = ideal_counts(compressed_of(engine.automaton(c)), tr["text"], ids,
                         engine.ctx.vocab.token_bytes)  # fmt: skip
    assert tr["replay"]["forced_tokens"] == ideal["forced_tokens"] > 0
    assert sum(1 for s in tr["steps"][1:] if s["forward_ms"] > 0) == len(ids) - 1


def test_offsets_count_characters_when_tokens_split_them(compile_engine):
    """A CJK text in byte-level tokens: the violation's offset is in characters."""
    ctx = compile_engine.ctx
    ids = ctx.continuation.encode("日本語")
    tb = ctx.vocab.token_bytes
    assert any(len((tb[i] or b"").decode("utf-8", "ignore")) == 0 for i in ids)  # split bytes
    resp = {"choices": [{"message": {"content": "日本語"}, "logprobs": {"content": [
        {"id": i, "token": "", "bytes": list(tb[i]), "logprob": -0.5, "top_logprobs": []}
        for i in ids]}}]}  # fmt: skip
    tr = compile_engine.replay(Constraint.from_inputs("regex", "日本(人|国)"), resp, {}).to_json()
    (v,) = tr["replay"]["violations"]
    assert v["char_offset"] == 2 and tr["text"] == "日本語"
    assert tr["steps"][v["step"]]["char_offset"] == 2


def test_a_stream_with_every_logprob_in_one_chunk_times_no_token():
    from engine.replay.tokens import from_chunks

    lp = {"content": [{"token": t, "logprob": -0.1, "top_logprobs": []} for t in "ab"]}
    one = [{"choices": [{"delta": {"content": "ab"}, "logprobs": None}], "_t": 0.1},
           {"choices": [{"delta": {}, "logprobs": lp}], "_t": 0.9}]  # fmt: skip
    toks, text = from_chunks(one)
    assert text == "ab" and [t.ms for t in toks] == [None, None]
    two = [{"choices": [{"delta": {"content": c}, "logprobs": {"content": [p]}}], "_t": t}
           for c, p, t in zip("ab", lp["content"], (0.1, 0.3), strict=True)]  # fmt: skip
    toks, _ = from_chunks(two)
    assert toks[0].ms is None and toks[1].ms == pytest.approx(200.0)


def _serve(handler_body) -> tuple[str, object]:
    """A local HTTP server answering every POST with `handler_body(self)`."""
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            handler_body(self)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/v1", srv


def test_the_client_refuses_redirects_and_ends_a_trickling_answer_at_its_deadline():
    import time

    from engine.replay.client import send

    def redirect(h):
        h.send_response(302)
        h.send_header("Location", "http://elsewhere.example/v1/chat/completions")
        h.end_headers()

    url, srv = _serve(redirect)
    with pytest.raises(CfsmError, match="redirected"):
        send(url, {"model": "m"})
    srv.shutdown()

    def trickle(h):
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(60):  # a byte every 0.1 s: each read is in time, the whole is not
            try:
                h.wfile.write(b" ")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.1)

    url, srv = _serve(trickle)
    t0 = time.monotonic()
    with pytest.raises(CfsmError, match="took over"):
        send(url, {"model": "m"}, timeout_s=1.0)
    assert time.monotonic() - t0 < 5.0  # the trickle alone lasts 6 s
    srv.shutdown()


def test_malformed_logprobs_are_a_clear_error(compile_engine):
    bad = {"choices": [{"message": {"content": "x"}, "logprobs": {"content": [None]}}]}
    with pytest.raises(CfsmError, match="not in a shape"):
        compile_engine.replay(Constraint.from_inputs("regex", "x"), bad, {})


def test_replay_captions_on_a_backend_without_character_states(compile_engine, recorded,
                                                              character_regex):  # fmt: skip
    from viz.panels import caption

    c = Constraint.from_inputs("regex", character_regex)
    tr = compile_engine.replay(c, recorded, {}, backend="xgrammar").to_json()
    assert tr["steps"][20]["char_state"] is None and not tr["replay"]["violations"]
    assert "jump-forward would have written it" in caption(Trace.from_json(tr), 20)
    assert tr["replay"]["forced_tokens"] == 130  # the automaton's analysis, whatever the masks


def test_savings_past_a_later_break_are_not_claimed():
    """A break at step 3: the savings line counts the 3 tokens before it, no share of all."""
    from made_traces import trace as made_trace

    from viz.summaries import replay_md

    v = {"step": 3, "text": "x", "char_offset": 3, "allowed": 1, "expected": ["a"]}
    r = {"tokens": 9, "forced_tokens": 2, "saved_fraction": 0.222, "violations": [v]}
    md = html.unescape(replay_md(made_trace(replay=r)))
    assert "would have saved 2 forward passes** on the 3 tokens before step 3" in md
    assert "22%" not in md and "(1 token: 'a')" in md
