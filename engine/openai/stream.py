"""OpenAI's streamed chunks for a run as it decodes: content (and reasoning) deltas from
the text so far, holding back what may still turn out to be a tag or a stop string; then,
from the finished trace, the rest, the tool-call deltas, the logprobs, the finish reason
and the usage. The chunks' deltas add up to the non-streamed message."""

from __future__ import annotations

import time

from .request import ApiRequest
from .response import (
    answer_parts,
    cut_at_stop,
    figures,
    legacy_logprobs,
    token_logprobs,
    usage,
)


def _held(text: str, tags: list[str]) -> int:
    """How many characters at the end of `text` may begin one of `tags`."""
    n = 0
    for tag in tags:
        for k in range(min(len(tag) - 1, len(text)), 0, -1):
            if text.endswith(tag[:k]):
                n = max(n, k)
                break
    return n


def split_reasoning(text: str, api: ApiRequest) -> tuple[str, str | None]:
    """(the thinking that may be shown now, the text after its end tag or None while the
    model still thinks). A start tag still being written shows nothing."""
    g = api.gen
    if g.think_start.startswith(text):
        return "", None
    body = text[len(g.think_start) :] if text.startswith(g.think_start) else text
    end = body.find(g.think_end)
    if end < 0:
        return body[: len(body) - _held(body, [g.think_end])], None
    return body[:end], body[end + len(g.think_end) :]


def answer_so_far(text: str, api: ApiRequest) -> tuple[str, str | None]:
    """(reasoning, the answer's text so far, uncut by stop strings; None while thinking):
    tool calls' text is never the answer's."""
    reasoning = ""
    if api.reasoning:
        reasoning, rest = split_reasoning(text, api)
        if rest is None:
            return reasoning, None
        text = rest
    if api.tools and api.tool_start in text:
        text = text[: text.index(api.tool_start)]
    return reasoning, text


def live_parts(text: str, api: ApiRequest) -> tuple[str, str]:
    """(reasoning, content) that may be shown now; the finished trace has the last word:
    what may still turn out to be a tag or a stop string is held back."""
    reasoning, answer = answer_so_far(text, api)
    if answer is None:
        return reasoning, ""
    at = cut_at_stop(answer, api.stop)
    if at is not None:
        return reasoning, answer[:at]
    tags = ([api.tool_start] if api.tools else []) + api.stop
    return reasoning, answer[: len(answer) - _held(answer, tags)]


class ChunkWriter:
    """The chunks of one streamed response; `live` during the run, `finish` once."""

    def __init__(self, api: ApiRequest, cid: str, chat: bool) -> None:
        self.api, self.cid, self.chat = api, cid, chat
        self.created = int(time.time())
        self.sent = {"content": "", "reasoning_content": ""}

    def chunk(self, delta: dict | None = None, finish: str | None = None, **extra) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": (delta or {}).get("content", ""), "logprobs": None,
                      "finish_reason": finish}  # fmt: skip
            obj = "text_completion"
        if "logprobs" in extra:
            choice["logprobs"] = extra.pop("logprobs")
        return {"id": self.cid, "object": obj, "created": self.created, "model": self.api.model,
                "choices": [choice], **extra}  # fmt: skip

    def start(self) -> list[dict]:
        return [self.chunk({"role": "assistant", "content": ""})] if self.chat else []

    def live(self, text: str) -> list[dict]:
        reasoning, content = live_parts(text, self.api)
        return self._deltas({"reasoning_content": reasoning, "content": content})

    def _deltas(self, now: dict) -> list[dict]:
        out = []
        for key in ("reasoning_content", "content"):
            was, new = self.sent[key], now.get(key) or ""
            if len(new) > len(was) and new.startswith(was):
                out.append(self.chunk({key: new[len(was) :]}))
                self.sent[key] = new
        return out

    def finish(self, trace: dict, trace_id: str | None) -> list[dict]:
        """The rest of the answer from the trace, then the finish chunk (with `cfsm`) and,
        asked for, the usage chunk (with `cfsm` again: the last chunk always has it, as a
        client that keeps the last chunk for its `usage` expects)."""
        parts = answer_parts(trace, self.api)
        out = self._deltas({"reasoning_content": parts["reasoning"], "content": parts["content"]})
        for call in parts["calls"]:
            fn = call["function"]
            head = {**call, "function": {"name": fn["name"], "arguments": ""}}
            out.append(self.chunk({"tool_calls": [head]}))
            args = {"index": call["index"], "function": {"arguments": fn["arguments"]}}
            out.append(self.chunk({"tool_calls": [args]}))
        extra: dict = {"cfsm": figures(trace, trace_id, self.api)}
        if self.api.logprobs:
            lps = token_logprobs(trace, self.api.top_logprobs, parts["spans"])
            extra["logprobs"] = {"content": lps} if self.chat else legacy_logprobs(lps)
        out.append(self.chunk({}, parts["finish"], **extra))
        if self.api.include_usage:  # the stream's last chunk carries cfsm too, as usage
            last = self.chunk(usage=usage(trace), cfsm=extra["cfsm"])
            last["choices"] = []
            out.append(last)
        return out
