"""The Gradio API (`/compile`, `/run`): the engine's JSON for a constraint given as
(kind, text) and the same request fields as the page and the CLI."""

from __future__ import annotations

import gradio as gr

from engine.backends import DEFAULT_BACKEND
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.internals import gradio_jobs
from engine.triggers.plan import DEFAULT_TOOL_END, DEFAULT_TOOL_START

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
        backend: str = DEFAULT_BACKEND,
        mode: str = "jump",
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        lenient: bool = False,
        spec: bool = False,
        runtime: str = "auto",
        reasoning: bool = False,
        think_budget: int = 0,
        tool_choice: str = "auto",
        tool_start: str = DEFAULT_TOOL_START,
        tool_end: str = DEFAULT_TOOL_END,
        trigger_impl: str = "auto",
        request: gr.Request = None,
    ) -> dict:
        """Decode under a constraint; returns the engine's trace JSON. A run whose client
        cancels or goes away stops at the next step. `runtime`: auto, llamacpp or
        transformers. `kind` "tools": `constraint` holds OpenAI-style tools, and calls in
        free text are held to them (tool_choice, tool_start, tool_end); `reasoning`: free
        thinking first, for at most `think_budget` tokens where it is not 0; `trigger_impl`:
        auto, native (the backend's own structural tags) or engine."""
        try:
            eng = hub.get()
            inp = PageInputs(
                kind=kind,
                **{TEXT_BOX.get(kind, "rx"): constraint},
                ws=whitespace,
                prompt=prompt,
                backend=backend,
                mode=mode,
                max_new=max_new_tokens,
                temp=temperature,
                seed=seed,
                lenient=lenient,
                spec=spec,
                runtime=runtime,
                reasoning=reasoning,
                think_budget=think_budget,
                tool_choice=tool_choice,
                tool_start=tool_start,
                tool_end=tool_end,
                trigger_impl=trigger_impl,
            )
            return eng.generate(
                inp.request(),  # a free run with triggers is refused by name
                should_stop=client_gone(demo, request),
            )
        except CfsmError as exc:
            raise gr.Error(f"{exc.kind}: {exc.message}") from None

    gr.api(api_compile, api_name="compile", concurrency_limit=2)
    gr.api(api_run, api_name="run", concurrency_limit=DECODE_SLOTS, concurrency_id="decode")
