"""The Gradio playground: the page built (layout.py) and wired. Each action's handler
lives in its own module (run, compare, doctor, checks, api) and reads the page's inputs by
name (inputs.py). Engine work lives in engine/, pictures in viz/."""

from __future__ import annotations

import json
import warnings

import gradio as gr

from engine.backends import AUTO, BACKEND_CHOICES, BACKENDS
from viz.step_bundle import head_html

from .api import wire_api
from .checks import live_check, strings_checker, tools_check
from .compare import wire_compare
from .doctor import wire_doctor
from .inputs import (
    MODES,
    PERMALINK_INPUTS,
    PRESET_INPUTS,
    WS,
    PageInputs,
    Row,
    permalink_inputs,
    preset_inputs,
)
from .layout import (
    CUSTOM,
    KIND_CSS,
    KIND_JS,
    Playground,
    compare_tab,
    doctor_tab,
    playground_tab,
    replay_tab,
)
from .openai_routes import openai_router
from .presets import presets
from .replay import replay_enabled, wire_replay
from .run import wire_run, wire_trace_link
from .serving_routes import serving_router
from .state import DECODE_SLOTS, EngineHub

# The step view carries its data in an inert <script type="application/json">, read by the
# page's script (viz/static/step_view.js); Gradio warns about any <script> in gr.HTML.
warnings.filterwarnings(
    "ignore", message="A `<script>` tag was found in the content of a `gr.HTML`"
)

# Markdown tables (Compare, the Doctor, summaries): on a narrow screen Gradio broke their
# headers and row labels inside words ("forwar d passes"); they keep whole words, and a
# table wider than the screen scrolls sideways instead
APP_CSS = """
.cfsm-error{color:#b91c1c;font-weight:600;}
.prose table{display:block;overflow-x:auto;max-width:100%;}
.prose table th,.prose table td:first-child{word-break:normal;overflow-wrap:normal;
hyphens:none;}
.prose table th{white-space:nowrap;}
.prose table td{word-break:normal;overflow-wrap:break-word;}
.prose table td code{display:inline;overflow-wrap:anywhere;}
"""
# A row label wraps between its words, never inside one ("forwar d passes"); a code span
# (the Doctor's places, Compare's outputs) may break anywhere: Gradio's are inline-flex
# boxes, which did not wrap at all, and a long pointer or output then widened its column
# past a phone's screen, spilling out of its cell or pushing column B out of view
APP_CSS += KIND_CSS


TOUR_PRESET = "SGLang character (regex)"


def tour_js(text: str) -> str:
    """Once the tour preset's regex is in its box: Run, with the tour to start on the
    drawn view (the inputs arrive through Gradio after this event returns)."""
    return f"""() => {{
  window.cfsmTourPending = true;
  const t0 = Date.now(), want = {json.dumps(text)};
  const go = () => {{
    const box = document.querySelector('#regex-input textarea');
    if (box && box.value === want) document.querySelector('#run').click();
    else if (Date.now() - t0 < 15000) setTimeout(go, 200);
  }};
  go();
}}"""


def build_demo(hub: EngineHub) -> gr.Blocks:
    P = presets()
    with gr.Blocks(title="cfsm-lab: compressed-FSM constrained decoding") as demo:
        gr.Markdown("# cfsm-lab \u2014 constrained decoding with a compressed FSM and jump-forward")
        ui = playground_tab(P, hub.status(), MODES, BACKEND_CHOICES, WS)
        cmp = compare_tab(MODES, (*BACKENDS, AUTO), WS)  # both sides on fsm by default
        doc = doctor_tab()
        rp = replay_tab() if replay_enabled() else None
        _wire_inputs(ui, P, hub)
        wire_run(ui, hub)
        wire_compare(ui, cmp, hub)
        wire_doctor(ui, doc, hub)
        if rp is not None:
            wire_replay(ui, rp, hub)
        _wire_load(ui, demo)
        wire_trace_link(ui, demo, hub)
        wire_api(hub, demo)
    return demo


def preset_after_edit(P: dict, name: str, field: str, text: str) -> str:
    """The preset name once `field` (a constraint kind, or "prompt") holds `text`: kept while
    the preset's own value is there, else "edited". A box of another kind than the preset's
    does not run, so its edits keep the name."""
    p = P.get(name)
    if p is None:
        return name
    if field == "prompt":
        return name if text == p["prompt"] else CUSTOM
    return name if p["kind"] != field or text == p["text"] else CUSTOM


def _follow_edits(box, preset, P: dict, field: str) -> None:
    """Every change of the box (typing, backspace, paste, cut, a drop, a script) is
    compared with the preset's value: Gradio's `input` event alone missed some."""
    box.change(
        lambda text, name: preset_after_edit(P, name, field, text),
        [box, preset],
        preset,
        show_progress="hidden",
        queue=False,
        trigger_mode="always_last",
    )


def _wire_inputs(ui: Playground, P: dict, hub: EngineHub) -> None:
    def status_tick():
        """The model line, polled each second until it is final (ready or failed): an idle
        page then sends nothing, and a run shares its cores with no poll."""
        text = hub.status()
        return text, gr.Timer(active=not text.startswith(("Model ready", "Model failed")))

    ui.status_timer.tick(
        status_tick, None, [ui.status, ui.status_timer], show_progress="hidden", queue=False
    )
    for box, err, k in (
        (ui.rx, ui.rx_err, "regex"),
        (ui.sch, ui.sch_err, "schema"),
        (ui.gram, ui.gram_err, "grammar"),
    ):
        box.change(
            lambda text, w, b, k=k: live_check(k, text, w, b, hub),
            [box, ui.ws, ui.backend],
            err,
            show_progress="hidden",
            queue=False,
            trigger_mode="always_last",
        )  # no backlog while typing
        _follow_edits(box, ui.preset, P, k)
    ui.backend.change(
        lambda text, w, b: live_check("grammar", text, w, b),
        [ui.gram, ui.ws, ui.backend],
        ui.gram_err,
        show_progress="hidden",
        queue=False,
    )
    _follow_edits(ui.prompt, ui.preset, P, "prompt")
    ui.ctabs.change(lambda k: k, ui.ctabs, ui.kind, js=KIND_JS, show_progress="hidden", queue=False)
    ui.tools_err.value = tools_check(ui.tools.value)  # the page opens with it checked
    ui.tools.change(
        tools_check,
        ui.tools,
        ui.tools_err,
        show_progress="hidden",
        queue=False,
        trigger_mode="always_last",
    )
    _follow_edits(ui.tools, ui.preset, P, "tools")

    def on_preset(name):
        p = P.get(name)
        if not p:
            return PRESET_INPUTS.set()
        return PRESET_INPUTS.set(
            **preset_inputs(p),
            # the box's own check does not run when a preset puts the same text back
            **({"tools_err": tools_check(p["text"])} if p["kind"] == "tools" else {}),
        )

    ui.preset.input(on_preset, ui.preset, PRESET_INPUTS.widgets(ui), queue=False)
    # the intro's tour: the character preset's inputs, then Run; the step view starts the
    # tour when that run is drawn (viz/static/step_view.js)
    ui.tour.click(
        lambda: [*on_preset(TOUR_PRESET), TOUR_PRESET],
        None,
        (PRESET_INPUTS + Row("preset")).widgets(ui),
        queue=False,
    ).then(None, None, None, js=tour_js(P[TOUR_PRESET]["text"]))
    ui.ts_btn.click(
        strings_checker(ui, hub),
        PageInputs.widgets(ui, ui.ts_text),
        ui.ts_out,
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
    )


def _wire_load(ui: Playground, demo: gr.Blocks) -> None:
    def on_load(request: gr.Request):
        q = dict(request.query_params) if request is not None else {}
        if not q or "trace" in q:  # an API request's run: wire_trace_link restores it
            return PERMALINK_INPUTS.set()
        out = permalink_inputs(q)
        return PERMALINK_INPUTS.set(**out)

    demo.load(on_load, None, PERMALINK_INPUTS.widgets(ui), queue=False)


def serve(
    host: str = "127.0.0.1",
    port: int = 7860,
    model: str | None = None,
    device: str | None = None,
    prevent_thread_lock: bool = False,
    max_states: int | None = None,
    compile_timeout_s: float | None = None,
    runtime: str | None = None,
    sock=None,
):
    """Serve the page, /v1 and the serving endpoints on one app; returns (the running
    server, its hub). `sock`: a socket the caller bound already (`cfsm serve` binds it
    before importing this module, app/listen.py); else it is bound here."""
    from fastapi import FastAPI

    from .listen import ServerThread, listen

    sock = sock if sock is not None else listen(host, port)
    hub = EngineHub(
        model, device, max_states=max_states, compile_timeout_s=compile_timeout_s, runtime=runtime
    )
    hub.start()  # the model loads while the page is built and served
    demo = build_demo(hub)
    demo.queue(default_concurrency_limit=2, max_size=32)
    # the OpenAI-compatible API under /v1 and the serving endpoints (/health, /version,
    # /tokenize, /metrics) are the app's own routes, there from its first request
    app = FastAPI(routes=[*openai_router(hub).routes, *serving_router(hub).routes])
    app = gr.mount_gradio_app(
        app,
        demo,
        path="",
        server_name=host,
        server_port=sock.getsockname()[1],
        css=APP_CSS,
        head=head_html(),
        show_error=False,
        ssr_mode=False,
        # Gradio's run history kept every run's outputs (a step view is ~0.5 MB) in the
        # browser's localStorage and rewrote the whole list at each streamed update: 0.6 MB
        # more per run, 0.8 s of the page's time by the sixth run, on the cores the
        # decoding needs. Runs are shared here by permalink and trace file instead.
        run_history=False,
    )
    server = ServerThread(app, sock)
    server.start()
    if not prevent_thread_lock:
        server.block()
    return server, hub
