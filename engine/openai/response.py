"""A trace written back in OpenAI's shapes: the chat completion (content, tool_calls,
reasoning_content), the text completion, logprobs, usage, and the `cfsm` extension with
the run's figures and its trace id."""

from __future__ import annotations

import json
import math
import time
import uuid

from ..analysis.ideal import token_char_starts
from ..decoding.trace import Totals
from ..triggers.tools import split_call, tool_format
from .request import ApiRequest

TOOL_CALL = "tool call"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def split_output(trace: dict, api: ApiRequest) -> dict:
    """The message's parts from the trace's segments: thinking as reasoning_content, each
    held call as a tool call, the rest as content (the whole text where nothing triggers).
    A trigger the model wrote (`<tool_call>`, `</think>`) ends the free segment it closes:
    it is not part of the answer. `spans` are the content's character ranges."""
    segs = trace.get("segments") or []
    if not segs:
        return {"content": trace["text"], "reasoning": None, "calls": [],
                "spans": [(0, len(trace["text"]))]}  # fmt: skip
    content, reasoning, calls, spans = [], [], [], []
    fmt = tool_format(api.tool_start)
    for s in segs:
        text = s["text"]
        if s["label"] == "thinking":
            reasoning.append(_without(text, api.gen.think_end))
        elif s["label"] == TOOL_CALL:
            calls.append(_call(text, len(calls), fmt))
        elif s["kind"] in ("free", "constrained"):
            kept = _without(text, api.tool_start) if api.tools else text
            content.append(kept)
            spans.append((s["char_start"], s["char_start"] + len(kept)))
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning) if api.reasoning else None,
        "calls": calls,
        "spans": spans,
    }


def _without(text: str, trigger: str) -> str:
    return text[: -len(trigger)] if trigger and text.endswith(trigger) else text


def _call(body: str, index: int, fmt: str) -> dict:
    """A held call's body as an OpenAI tool call; an unfinished one (the run hit
    max_tokens) keeps its text as the arguments."""
    got = split_call(body, fmt)
    if isinstance(got, str) or not isinstance(got[0], str):
        name, args = "", body
    else:
        name, args = got[0], json.dumps(got[1], ensure_ascii=False)
    return {
        "index": index,
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def answer_parts(trace: dict, api: ApiRequest) -> dict:
    """The message's parts, cut at the first stop string, and why the output ended."""
    parts = split_output(trace, api)
    at = cut_at_stop(parts["content"], api.stop)
    if at is not None:
        parts["content"] = parts["content"][:at]
        parts["spans"] = _cut_spans(parts["spans"], at)
    complete = [c for c in parts["calls"] if c["function"]["name"]]
    if complete and (trace["totals"].get("finished") or at is not None):
        parts["finish"] = "tool_calls"  # an agent loop runs the calls whatever ended the text
    elif at is not None:
        parts["finish"] = "stop"
    elif trace["totals"].get("reason") == "max_new_tokens":
        parts["finish"] = "length"
    else:
        parts["finish"] = "stop"
    return parts


def _cut_spans(spans: list[tuple[int, int]], keep: int) -> list[tuple[int, int]]:
    """The spans holding the content's first `keep` characters."""
    out = []
    for a, b in spans:
        if keep <= 0:
            break
        out.append((a, min(b, a + keep)))
        keep -= b - a
    return out


def usage(trace: dict) -> dict:
    p, c = trace["prompt_tokens"], trace["totals"]["output_tokens"]
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def figures(trace: dict, trace_id: str | None, api: ApiRequest) -> dict:
    """The cfsm extension: what the run cost and where to see it step by step."""
    t = trace["totals"]
    saved = Totals.from_json(t).time_saved()
    out = {
        "trace_id": trace_id,
        "trace_url": f"/?trace={trace_id}" if trace_id else None,
        "mode": trace["mode"],
        "backend": trace.get("backend"),
        "backend_why": trace.get("backend_why") or None,  # why `auto` chose it
        "runtime": t.get("runtime"),
        "valid": trace.get("valid"),
        "forward_passes": t["forward_passes"],
        "output_tokens": t["output_tokens"],
        "jumps": t["jumps"],
        "jumped_tokens": t["jumped_tokens"],
        "compile_ms": round(t["compile_s"] * 1e3, 1),
        "compile_cached": t.get("compile_cached", False),
        "decode_s": t["decode_s"],
        "queue_s": t.get("queue_s", 0.0),
        "time_saved": None if saved is None else round(saved, 3),
    }
    if api.ignored:
        out["ignored_fields"] = api.ignored
    return out


def token_logprobs(trace: dict, top: int, spans: list[tuple[int, int]] | None = None) -> list:
    """Per token of the answer's content (those starting inside `spans`; every token
    without): the model's log-probability before the mask (as vLLM reports it), and its
    `top` alternatives. A jumped token had no forward pass: logprob 0 (the constraint left
    no choice) and no alternatives."""
    steps, tokens = trace["steps"], trace["tokens"]
    lengths = [0 if tok.get("special") else len(_raw(tok)) for tok in tokens]
    out = []
    for tok, at in zip(tokens, token_char_starts(trace["text"], lengths), strict=True):
        if spans is not None and not any(a <= at < b for a, b in spans):
            continue
        st = steps[tok["step"]] if tok.get("origin") != "jump" and tok["step"] >= 0 else None
        if st is not None and st["token_id"] != tok["id"]:
            st = None  # a token a jump re-tokenized: its step chose another one
        out.append(
            {
                "token": tok["text"],
                "logprob": _log(st["raw_prob"]) if st else 0.0,
                "bytes": list(_raw(tok)),
                "top_logprobs": _alternatives(st, top) if st else [],
            }
        )
    return out


def _alternatives(step: dict, top: int) -> list[dict]:
    """A step's `top` alternatives, each with its own bytes: a token that is part of a
    UTF-8 character reads `<F0 9F>` in the trace, its bytes are in the step's `top_hex`."""
    hexes = step.get("top_hex") or {}
    out = []
    for i, t, p in step["top_raw"][:top]:
        raw = _raw({"text": t, "hex": hexes.get(str(i))})
        out.append({"token": t, "logprob": _log(p), "bytes": list(raw)})
    return out


def _raw(tok: dict) -> bytes:
    """A token's own bytes: its hex where its text is not them, else its text's UTF-8."""
    h = tok.get("hex")
    return bytes.fromhex(h) if h else tok["text"].encode("utf-8")


def _log(p: float) -> float:
    return round(math.log(p), 6) if p > 0 else -9999.0


def chat_completion(trace: dict, api: ApiRequest, cid: str, trace_id: str | None) -> dict:
    parts = answer_parts(trace, api)
    # beside tool calls, no text is null (whitespace stays, as the stream sent it)
    msg: dict = {"role": "assistant", "content": parts["content"] or None
                 if parts["calls"] else parts["content"]}  # fmt: skip
    if parts["calls"]:
        msg["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in parts["calls"]]
    if parts["reasoning"] is not None:
        msg["reasoning_content"] = parts["reasoning"]
    choice: dict = {"index": 0, "message": msg, "finish_reason": parts["finish"]}
    choice["logprobs"] = (
        {"content": token_logprobs(trace, api.top_logprobs, parts["spans"])}
        if api.logprobs
        else None
    )
    return _envelope("chat.completion", choice, trace, api, cid, trace_id)


def _envelope(obj: str, choice: dict, trace: dict, api: ApiRequest, cid: str,
              trace_id: str | None) -> dict:  # fmt: skip
    return {
        "id": cid,
        "object": obj,
        "created": int(time.time()),
        "model": api.model,
        "choices": [choice],
        "usage": usage(trace),
        "cfsm": figures(trace, trace_id, api),
    }


def text_completion(trace: dict, api: ApiRequest, cid: str, trace_id: str | None) -> dict:
    parts = answer_parts(trace, api)
    choice: dict = {
        "index": 0,
        "text": parts["content"],
        "finish_reason": parts["finish"],
        "logprobs": legacy_logprobs(token_logprobs(trace, api.top_logprobs, parts["spans"]))
        if api.logprobs
        else None,
    }
    return _envelope("text_completion", choice, trace, api, cid, trace_id)


def legacy_logprobs(lps: list[dict]) -> dict:
    """The legacy completions shape: parallel lists and offsets."""
    offsets, at = [], 0
    for t in lps:
        offsets.append(at)
        at += len(t["token"])
    return {
        "tokens": [t["token"] for t in lps],
        "token_logprobs": [t["logprob"] for t in lps],
        "top_logprobs": [{a["token"]: a["logprob"] for a in t["top_logprobs"]} for t in lps],
        "text_offset": offsets,
    }


def cut_at_stop(text: str, stops: list[str]) -> int | None:
    """Where the first stop string starts in `text`, or None."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None
