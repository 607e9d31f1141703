"""The Replay tab: another engine's output (asked of its endpoint, or pasted) for the
Playground's constraint, walked through the automaton and drawn in the step view."""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

import gradio as gr

from engine.errors import CfsmError
from engine.replay.client import request_body, send
from viz.summaries import replay_md

from .checks import error_line
from .inputs import PageInputs, Row
from .layout import Playground, Replay
from .run import RUN_OUTPUTS, draw_timeline, finished_run
from .state import EngineHub, check_page_model

MAX_PASTED_CHARS = 16 * 2**20
REPLAY_SLOTS = 2
# the page reads a key only from variables named so: a page user names the variable and the
# URL, so any other name (HF_TOKEN, a cloud key) could be sent to a server of theirs
KEY_PREFIX = "CFSM_REPLAY_KEY"


def listed_endpoints() -> list[str]:
    return [p.strip() for p in os.environ.get("CFSM_REPLAY_ENDPOINTS", "").split(",") if p.strip()]


def _within(url: str, base: str) -> bool:
    """`url` on the same scheme, host and port as `base`, under its path."""
    u, b = urlsplit(url), urlsplit(base)
    try:
        same = (u.scheme, u.hostname, u.port) == (b.scheme, b.hostname, b.port)
    except ValueError:  # a port that is not a number
        return False
    return same and u.path.startswith(b.path.rstrip("/"))


def page_endpoint(url: str) -> str:
    """Where the page may send a replay's request: anywhere, unless CFSM_REPLAY_ENDPOINTS
    lists the engines allowed (a deployment others can reach sets it, or turns the tab off:
    the request comes from the server, inside its network)."""
    url = (url or "").strip()
    allowed = listed_endpoints()
    if allowed and not any(_within(url, p) for p in allowed):
        raise CfsmError("invalid_input", f"this server replays only from {', '.join(allowed)}")
    return url


def page_key_env(name: str, url: str) -> str:
    """A key's variable for the page: named CFSM_REPLAY_KEY..., and sent only to an engine
    CFSM_REPLAY_ENDPOINTS lists (a page user names both the variable and the URL)."""
    name = (name or "").strip()
    if not name:
        return ""
    if not name.startswith(KEY_PREFIX):
        raise CfsmError("invalid_input", f"the page reads keys only from environment variables "
                        f"named {KEY_PREFIX}...; set one on the server (not {name!r})")  # fmt: skip
    if not any(_within(url, p) for p in listed_endpoints()):
        raise CfsmError("invalid_input", "the page sends a key only to engines the server "
                        "lists in CFSM_REPLAY_ENDPOINTS")  # fmt: skip
    return name


def replay_enabled() -> bool:
    """A deployment turns the tab (which sends requests to URLs users type) off with
    CFSM_REPLAY=off."""
    return os.environ.get("CFSM_REPLAY", "on").lower() not in ("off", "0", "no", "false")


def wire_replay(ui: Playground, rp: Replay, hub: EngineHub) -> None:
    rows = RUN_OUTPUTS + Row("up_err")

    def do_replay(values: dict):
        try:
            inp = PageInputs.read(ui, values)
            c = inp.constraint()
            pasted = (values[rp.pasted] or "").strip()
            if pasted:
                if len(pasted) > MAX_PASTED_CHARS:
                    raise CfsmError("input_too_large", "the pasted response is over 16 MB")
                resp, source = _json(pasted), "pasted"
            else:
                endpoint, model = page_endpoint(values[rp.endpoint]), (values[rp.model] or "")
                if not endpoint or not model.strip():
                    raise CfsmError("invalid_input", "give the endpoint and the model name, or "
                                    "paste a response")  # fmt: skip
                body = request_body(c, inp.prompt or "", model.strip(), values[rp.flavor],
                                    int(inp.max_new or 256))  # fmt: skip
                key_env = page_key_env(values[rp.key_env], endpoint)
                resp, source = send(endpoint, body, key_env), "response"
            eng = hub.get(check_page_model(inp.model))
            meta = {"endpoint": (values[rp.endpoint] or "").strip() if source != "pasted" else "",
                    "model": (values[rp.model] or "").strip(), "prompt": inp.prompt or "",
                    "source": source}  # fmt: skip
            trace = eng.replay(c, resp, meta, inp.backend)
        except BaseException as exc:  # noqa: BLE001 - one line in the tab, the page goes on
            yield [*rows.set(), error_line(exc), ""]
            return
        first, rest = finished_run(trace, inp.collapse, inp.whole, inp.raw)
        yield [*rows.set(**first, up_err=""), "", replay_md(trace)]
        yield [*rows.set(timeline=draw_timeline(trace)), gr.skip(), gr.skip()]
        yield [*rows.set(view_rest=rest), gr.skip(), gr.skip()]

    rp.btn.click(
        do_replay,
        PageInputs.widgets(ui, rp.endpoint, rp.model, rp.key_env, rp.flavor, rp.pasted),
        [*rows.widgets(ui), rp.err, rp.md],
        # waiting on another server holds no decoding slot: replays have their own two
        concurrency_limit=REPLAY_SLOTS,
        concurrency_id="replay",
    ).then(None, js=SHOW_PLAYGROUND)


# a replay that drew: the Playground tab, whose step view shows it (the first tab button)
SHOW_PLAYGROUND = """() => {
  if ((document.querySelector('#replay-error')?.innerText || '').trim()) return;
  const b = [...document.querySelectorAll('button[role=tab]')].find(
    (x) => x.innerText.trim() === 'Playground');
  if (b) b.click();
}"""


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CfsmError("invalid_input", f"the pasted response is not JSON: {exc}") from None
