"""The tokens of another engine's response, whatever shape it came in: an OpenAI chat
completion (`logprobs.content`), a text completion (the legacy parallel lists), llama-server's
own `/completion` (`completion_probabilities`), or the chunks of a streamed one (with their
arrival times). Each token keeps what the engine said of it: its id where given, its bytes
or text, its log-probability and its top alternatives."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import CfsmError

TOKEN_ID = re.compile(r"token_id:(\d+)")  # vLLM's return_tokens_as_token_ids


@dataclass
class Alternative:
    text: str
    logprob: float
    id: int | None = None
    raw: bytes | None = None


@dataclass
class EngineToken:
    text: str
    id: int | None = None
    raw: bytes | None = None  # the token's bytes as the engine gave them
    logprob: float | None = None
    top: list[Alternative] = field(default_factory=list)
    ms: float | None = None  # streamed: time since the previous token arrived

    @property
    def prob(self) -> float | None:
        return None if self.logprob is None else math.exp(max(self.logprob, -700.0))


def _id(item: dict) -> int | None:
    if isinstance(item.get("id"), int):
        return item["id"]
    m = TOKEN_ID.fullmatch(str(item.get("token", "")))
    return int(m.group(1)) if m else None


def _raw(item: dict) -> bytes | None:
    b = item.get("bytes")
    if isinstance(b, list) and all(isinstance(x, int) and 0 <= x < 256 for x in b):
        return bytes(b)
    return None


def _token(item: dict) -> EngineToken:
    top = [
        Alternative(str(a.get("token", "")), float(a.get("logprob", -math.inf)), _id(a), _raw(a))
        for a in item.get("top_logprobs") or []
        if isinstance(a, dict)
    ]
    lp = item.get("logprob")
    return EngineToken(str(item.get("token", "")), _id(item), _raw(item),
                       float(lp) if isinstance(lp, (int, float)) else None, top)  # fmt: skip


def from_response(resp) -> tuple[list[EngineToken], str]:
    """(tokens, the text the engine returned). CfsmError where the response has no
    per-token logprobs to replay (the request must ask for `logprobs`), or has them in a
    shape this does not read."""
    try:
        return _from_response(resp)
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise CfsmError(
            "invalid_input",
            "the response's logprobs are not in a shape replay "
            f"reads (OpenAI's chat or completion logprobs): {exc}",
        ) from None


def _from_response(resp) -> tuple[list[EngineToken], str]:
    if isinstance(resp, list):
        return from_chunks(resp)
    if not isinstance(resp, dict):
        raise CfsmError("invalid_input", "a response must be a JSON object (or a list of chunks)")
    if "error" in resp:
        err = resp["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise CfsmError("invalid_input", f"the engine answered with an error: {msg}")
    if isinstance(resp.get("completion_probabilities"), list):  # llama-server /completion
        toks = [_token(p) for p in resp["completion_probabilities"]]
        return toks, str(resp.get("content", "".join(t.text for t in toks)))
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise CfsmError("invalid_input", "the response has no choices")
    ch = choices[0]
    text = (ch.get("message") or {}).get("content") if "message" in ch else ch.get("text")
    lp = ch.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        return [_token(p) for p in lp["content"]], str(text or "")
    if isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
        return _legacy(lp), str(text or "")
    raise CfsmError("invalid_input", "the response carries no logprobs: ask the engine for "
                    "logprobs (and top_logprobs) to replay its tokens")  # fmt: skip


def _legacy(lp: dict) -> list[EngineToken]:
    lps = lp.get("token_logprobs") or []
    tops = lp.get("top_logprobs") or []
    out = []
    for i, t in enumerate(lp["tokens"]):
        alts = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        m = TOKEN_ID.fullmatch(str(t))
        out.append(EngineToken(str(t), int(m.group(1)) if m else None, None,
                               lps[i] if i < len(lps) else None,
                               [Alternative(k, float(v)) for k, v in alts.items()]))  # fmt: skip
    return out


def from_chunks(chunks: list) -> tuple[list[EngineToken], str]:
    """A streamed response: each chunk's logprobs in order, each token timed by its
    chunk's arrival (`_t`, seconds, recorded by the replay client); a stream that sends
    every token's logprobs in one chunk (cfsm's own does, at the end) times none."""
    toks: list[EngineToken] = []
    text, last_t = [], None
    for c in chunks:
        if not isinstance(c, dict) or not c.get("choices"):
            continue
        ch = c["choices"][0]
        delta = ch.get("delta") or {}
        text.append(delta.get("content") or ch.get("text") or "")
        lp = ch.get("logprobs") or {}
        got = [_token(p) for p in lp.get("content") or []]
        if not got and isinstance(lp.get("tokens"), list):
            got = _legacy(lp)
        t = c.get("_t")
        for tok in got:  # a chunk of several tokens: its wait shared among them
            if t is not None and last_t is not None:
                tok.ms = round((t - last_t) * 1e3 / len(got), 3)
        if got and t is not None:
            last_t = t
        toks += got
    if not toks:
        raise CfsmError("invalid_input", "the streamed response carries no logprobs")
    if sum(1 for c in chunks if _has_logprobs(c)) < 2:  # all at once: no token's own time
        for tok in toks:
            tok.ms = None
    return toks, "".join(text)


def _has_logprobs(chunk) -> bool:
    if not isinstance(chunk, dict) or not chunk.get("choices"):
        return False
    lp = chunk["choices"][0].get("logprobs") or {}
    return bool(lp.get("content") or lp.get("tokens"))


def expected_line(v: dict) -> str:
    """What the mask allowed where an output left the constraint: "3 tokens: 'a', 'ab'"."""
    n, some = v["allowed"], v.get("expected") or []
    shown = ", ".join(repr(t) for t in some) + (", …" if n > len(some) else "")
    return f"{n} token{'' if n == 1 else 's'}" + (f": {shown}" if some else "")
