"""The replay's request to another engine: the prompt and the constraint in the fields
that engine reads (vLLM and cfsm: `response_format` / `structured_outputs`; SGLang:
`response_format` / `regex` / `ebnf`; llama-server: `json_schema` / a GBNF `grammar`), with
logprobs. Requests go only to the URL
the user gives; the wait and the response's size are bounded; the key is read from an
environment variable and never kept."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request

from ..constraint import Constraint
from ..errors import CfsmError
from ..regex.normalize import normalize_regex
from .gbnf import regex_gbnf

FLAVORS = ("openai", "sglang", "llama-server")
TIMEOUT_S = 120.0
MAX_RESPONSE_BYTES = 16 * 2**20
TOP_LOGPROBS = 5


def request_body(constraint: Constraint, prompt: str, model: str, flavor: str = "openai",
                 max_tokens: int = 256, stream: bool = False) -> dict:  # fmt: skip
    """The chat request, greedy, asking for each token's logprob and top alternatives."""
    if flavor not in FLAVORS:
        raise CfsmError("invalid_input", f"flavor must be one of {', '.join(FLAVORS)}")
    body: dict = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": TOP_LOGPROBS,
        "stream": stream,
    }
    k, text = constraint.kind, constraint.text
    if k == "schema":
        schema = json.loads(text)
        if flavor == "llama-server":
            body["json_schema"] = schema
        else:
            spec = {"name": "replay", "schema": schema}
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif flavor == "llama-server":
        body["grammar"] = regex_gbnf(normalize_regex(text)) if k == "regex" else text
    elif flavor == "sglang":
        body["regex" if k == "regex" else "ebnf"] = text
    else:
        body["structured_outputs"] = {"regex" if k == "regex" else "grammar": text}
    if flavor == "llama-server" and stream:
        body["n_probs"] = TOP_LOGPROBS
    return body


def chat_url(endpoint: str) -> str:
    """`http://host:port/v1` (or the full path) -> its chat completions URL."""
    e = endpoint.strip().rstrip("/")
    if not e.startswith(("http://", "https://")):
        raise CfsmError("invalid_input", f"the endpoint must be an http(s) URL, not {endpoint!r}")
    return e if e.endswith("/chat/completions") else e + "/chat/completions"


def send(endpoint: str, body: dict, key_env: str = "", timeout_s: float = TIMEOUT_S,
         max_bytes: int = MAX_RESPONSE_BYTES):  # fmt: skip
    """POST the body; the JSON response, or for a stream its chunks (each with `_t`, its
    arrival in seconds from the request). CfsmError naming what went wrong."""
    headers = {"Content-Type": "application/json"}
    if key_env:
        key = os.environ.get(key_env)
        if not key:
            raise CfsmError("invalid_input", f"the environment variable {key_env} is not set")
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(chat_url(endpoint), json.dumps(body).encode(), headers)
    t0 = time.monotonic()
    try:
        with OPENER.open(req, timeout=timeout_s) as r, _deadline(r, timeout_s):
            if body.get("stream"):
                return _chunks(r, t0, timeout_s, max_bytes)
            data = _read(r, t0, timeout_s, max_bytes)
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", errors="replace")  # its message, not a page
        raise CfsmError("invalid_input", f"the engine answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise CfsmError("invalid_input", f"could not reach {endpoint}: {exc}") from None
    if len(data) > max_bytes:
        raise CfsmError("input_too_large", f"the response is over {max_bytes // 2**20} MB")
    return _json(data)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the request (and its key) goes only to the URL given."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise CfsmError("invalid_input", f"the engine redirected to {newurl}: give that URL")


OPENER = urllib.request.build_opener(_NoRedirect)


@contextlib.contextmanager
def _deadline(r, timeout_s: float):
    """Ends the connection when the whole request passes its time limit (a socket's
    timeout bounds each read only: a server sending a byte at a time would never hit it)."""
    sock = getattr(getattr(getattr(r, "fp", None), "raw", None), "_sock", None)

    def cut() -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, cut) if sock is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


def _late(t0: float, timeout_s: float) -> None:
    if time.monotonic() - t0 > timeout_s:
        raise CfsmError("invalid_input", f"the engine took over {timeout_s:.0f} s")


def _read(r, t0: float, timeout_s: float, max_bytes: int) -> bytes:
    """The body, in pieces, within the whole request's time limit (a socket's timeout
    only bounds each read)."""
    parts, total = [], 0
    while piece := r.read(64 * 1024):
        parts.append(piece)
        total += len(piece)
        if total > max_bytes:
            break
        _late(t0, timeout_s)
    _late(t0, timeout_s)  # cut short by the deadline
    return b"".join(parts)


def _json(data: bytes):
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CfsmError("invalid_input", f"the engine's response is not JSON: {exc}") from None


def _chunks(r, t0: float, timeout_s: float, max_bytes: int) -> list[dict]:
    out, total = [], 0
    while line := r.readline(max_bytes - total + 1):  # no line longer than what is left
        total += len(line)
        if total > max_bytes:
            raise CfsmError("input_too_large", f"the stream is over {max_bytes // 2**20} MB")
        _late(t0, timeout_s)
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        chunk = _json(payload)
        if isinstance(chunk, dict):
            if "error" in chunk:
                raise CfsmError("invalid_input", f"the engine's stream failed: {chunk['error']}")
            chunk["_t"] = time.monotonic() - t0
            out.append(chunk)
    _late(t0, timeout_s)  # cut short by the deadline
    return out
