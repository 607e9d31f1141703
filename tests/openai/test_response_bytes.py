"""Logprob `bytes` are a token's own bytes (issue 42, part 5): a token that is part of a
UTF-8 character reads `<F0 9F>` in the trace, and reports [240, 159], chosen or an
alternative. And a stream's last chunk carries `cfsm`, with `include_usage` too."""

from __future__ import annotations

import json
from dataclasses import asdict

import openai
import pytest
from made_traces import totals as made_totals

from engine.openai.request import read_request
from engine.openai.response import chat_completion, token_logprobs
from engine.openai.stream import ChunkWriter

SMILE = "\U0001f642"  # F0 9F 99 82


def chat(**body):
    body = {"model": "embedded", "messages": [{"role": "user", "content": "hi"}], **body}
    return read_request(body, "chat", ["embedded"])


def _trace() -> dict:
    """Two tokens, F0 9F then 99 82 (one emoji); each step's alternatives include partial
    characters, whose bytes the step's `top_hex` holds."""
    tokens = [
        {"id": 7, "text": "<F0 9F>", "hex": "f09f", "origin": "model", "step": 0},
        {"id": 8, "text": "<99 82>", "hex": "9982", "origin": "model", "step": 1},
    ]
    steps = [
        {"token_id": 7, "raw_prob": 0.5, "top_raw": [[7, "<F0 9F>", 0.5], [3, "Hi", 0.2]],
         "top_hex": {"7": "f09f"}},
        {"token_id": 8, "raw_prob": 0.9, "top_raw": [[8, "<99 82>", 0.9], [9, "<98>", 0.05]],
         "top_hex": {"8": "9982", "9": "98"}},
    ]  # fmt: skip
    totals = asdict(made_totals(forward_passes=2, output_tokens=2, compile_s=0.01, decode_s=0.1,
                                reason="eos"))  # fmt: skip
    return {"text": SMILE, "segments": [], "steps": steps, "tokens": tokens,
            "prompt_tokens": 3, "mode": "masked", "backend": "fsm", "valid": True,
            "totals": totals}  # fmt: skip


def test_partial_characters_report_their_own_bytes_chosen_or_alternative():
    lps = token_logprobs(_trace(), 2)
    assert [t["bytes"] for t in lps] == [[0xF0, 0x9F], [0x99, 0x82]]
    assert bytes(b for t in lps for b in t["bytes"]).decode("utf-8") == SMILE
    alts = [[(a["token"], a["bytes"]) for a in t["top_logprobs"]] for t in lps]
    assert alts == [
        [("<F0 9F>", [0xF0, 0x9F]), ("Hi", [72, 105])],
        [("<99 82>", [0x99, 0x82]), ("<98>", [0x98])],
    ]


def test_a_trace_without_top_hex_still_answers_from_the_text():
    tr = _trace()
    for st in tr["steps"]:
        del st["top_hex"]  # a trace written before the field
    alts = token_logprobs(tr, 2)[0]["top_logprobs"]
    assert alts[1]["bytes"] == [72, 105]


def test_a_streams_last_chunk_carries_cfsm_with_or_without_usage():
    for include in (False, True):
        api = chat(stream=True, stream_options={"include_usage": include}, logprobs=True)
        fin = ChunkWriter(api, "id", chat=True).finish(_trace(), "tid")
        finish = next(c for c in fin if c["choices"] and c["choices"][0]["finish_reason"])
        assert finish["cfsm"]["trace_id"] == "tid"
        assert fin[-1]["cfsm"] == finish["cfsm"]
        assert ("usage" in fin[-1]) is include and (fin[-1]["choices"] == []) is include
    whole = chat_completion(_trace(), chat(logprobs=True, top_logprobs=2), "c", "tid")
    assert whole["cfsm"] == finish["cfsm"]


@pytest.mark.model
def test_an_emojis_tokens_report_their_bytes_through_the_client(app_url):
    """Masked (each token has a forward pass): the emoji's byte tokens and, after its first
    bytes, alternatives that are continuation bytes; every one reports its own bytes."""
    client = openai.OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0)
    r = client.chat.completions.create(
        model="embedded",
        messages=[{"role": "user", "content": "Reply with a smiley emoji."}],
        temperature=0,
        logprobs=True,
        top_logprobs=5,
        extra_body={"structured_outputs": {"regex": SMILE}, "mode": "masked"},
    )
    toks = r.choices[0].logprobs.content
    assert r.choices[0].message.content == SMILE
    assert bytes(b for t in toks for b in t.bytes).decode("utf-8") == SMILE
    assert len(toks) > 1 and all(t.token.startswith("<") for t in toks)  # partial tokens
    alts = [a for t in toks for a in t.top_logprobs]
    partial = [a for a in alts if a.token.startswith("<") and a.token.endswith(">")]
    assert partial, [a.token for a in alts]
    for a in partial:  # `<98>` or `<F0 9F>`: the bytes it names, not its text's ASCII
        want = bytes.fromhex(a.token[1:-1].replace(" ", ""))
        assert bytes(a.bytes) == want, (a.token, a.bytes)
    for a in alts:
        if a not in partial:
            assert bytes(a.bytes) == a.token.encode("utf-8")
    json.dumps(r.model_dump())  # the whole answer is plain JSON
