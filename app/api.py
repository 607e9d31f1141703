"""The Gradio API (`/compile`, `/run`): the engine's JSON for a constraint given as
(kind, text) and the same request fields as the page and the CLI."""

from __future__ import annotations

import gradio as gr

from engine.backends import DEFAULT_BACKEND
from engine.constraint import Constraint
from engine.decoding.request import offered_on, page_default
from engine.errors import CfsmError
from engine.internals import gradio_jobs

from .inputs import TEXT_BOX, PageInputs
from .state import DECODE_SLOTS, EngineHub


def client_gone(demo: gr.Blocks, request: gr.Request | None):
    """A should_stop for an API call: true once the caller's job is no longer alive in
    Gradio's queue (the client cancelled or went away; Gradio marks its jobs dead then, but
    cannot stop a function already running in a thread)."""
    session = getattr(request, "session_hash", None)
    if session is None:
        return None

    def gone() -> bool:
        jobs = gradio_jobs(demo)
        mine = [j for j in jobs if getattr(j, "session_hash", None) == session]
        return bool(mine) and not any(getattr(j, "alive", True) for j in mine)

    return gone


def wire_api(hub: EngineHub, demo: gr.Blocks) -> None:
    def api_compile(
        kind: str,
        constraint: str,
        whitespace: str = "compact",
        backend: str = DEFAULT_BACKEND,
        lenient: bool = False,
        spec: bool = False,
    ) -> dict:
        """Compile a regex/schema/grammar; returns the automaton description (engine JSON)."""
        try:
            eng = hub.get()
            if kind == "tools":
                raise CfsmError("invalid_input", "compile takes a regex, schema or grammar")
            c = Constraint.from_inputs(kind, constraint, whitespace, lenient, spec)
            return eng.compile_report(c, backend)
        except CfsmError as exc:
            raise gr.Error(f"{exc.kind}: {exc.message}") from None

    def api_run(
        prompt: str,
        kind: str,
        constraint: str,
        whitespace: str = "compact",
        backend: str = page_default("backend"),
        mode: str = page_default("mode"),
        max_new_tokens: int = page_default("max_new_tokens"),
        temperature: float = page_default("temperature"),
        seed: int = page_default("seed"),
        lenient: bool = False,
        spec: bool = False,
        runtime: str = page_default("runtime"),
        reasoning: bool = page_default("reasoning"),
        think_budget: int = page_default("think_budget"),
        tool_choice: str = page_default("tool_choice"),
        tool_start: str = page_default("tool_start"),
        tool_end: str = page_default("tool_end"),
        trigger_impl: str = page_default("trigger_impl"),
        request: gr.Request = None,
    ) -> dict:
        """Decode under a constraint; returns the engine's trace JSON. A run whose client
        cancels or goes away stops at the next step. `runtime`: auto, llamacpp or
        transformers. `kind` "tools": `constraint` holds OpenAI-style tools, and calls in
        free text are held to them (tool_choice, tool_start, tool_end); `reasoning`: free
        thinking first, for at most `think_budget` tokens where it is not 0; `trigger_impl`:
        auto, native (the backend's own structural tags) or engine. New callers: /v1."""
        sent = dict(locals())  # the parameters by their /run names (the request's `gradio`)
        try:
            eng = hub.get()
            page = offered_on("page")
            inp = PageInputs(
                kind=kind,
                **{TEXT_BOX.get(kind, "rx"): constraint},
                ws=whitespace,
                prompt=prompt,
                lenient=lenient,
                spec=spec,
                **{page[name]: sent[param] for name, param in offered_on("gradio").items()},
            )
            return eng.generate(
                inp.request(),  # a free run with triggers is refused by name
                should_stop=client_gone(demo, request),
            ).to_json()
        except CfsmError as exc:
            raise gr.Error(f"{exc.kind}: {exc.message}") from None

    gr.api(api_compile, api_name="compile", concurrency_limit=2)
    gr.api(api_run, api_name="run", concurrency_limit=DECODE_SLOTS, concurrency_id="decode")
