"""The Gradio playground: wiring only. Engine work lives in engine/, pictures in viz/."""

from __future__ import annotations

import html
import json
import queue
import tempfile
import threading
import time
import urllib.parse
import warnings
from pathlib import Path

import gradio as gr

from engine.analysis.check import check_text
from engine.backends import BACKENDS, DEFAULT_BACKEND, GRAMMAR_SYNTAX, check_grammar
from engine.constraint import KINDS, Constraint
from engine.decoding.request import TRIGGER_IMPLS, GenerateRequest
from engine.decoding.trace import StepEvent, WaitEvent, validate_trace
from engine.errors import CfsmError
from engine.limits import LIVE_CHECK_S
from engine.regex.dfa import validate_regex
from engine.schema import WHITESPACE_POLICIES as WS
from engine.schema import parse_schema, schema_to_regex
from engine.triggers.plan import DEFAULT_TOOL_END, DEFAULT_TOOL_START
from engine.triggers.tools import parse_tools
from viz.highlight import test_strings_html
from viz.panels import stat_cards, token_strip
from viz.plots import timeline
from viz.step_bundle import empty_view, head_html, step_view_html, step_view_parts
from viz.summaries import (
    compare_md,
    doctor_md,
    doctor_plot,
    live_figures,
    previous_run_note,
    summary_md,
    waiting_line,
)

from .layout import (
    CUSTOM,
    NO_RUN,
    RUNTIME_CHOICES,
    Compare,
    Doctor,
    Playground,
    compare_tab,
    doctor_tab,
    playground_tab,
)
from .presets import presets
from .state import DECODE_SLOTS, EngineHub, RunHandle, check_page_model

MODES = ["jump", "masked", "free"]  # the page's order: the technique first
MAX_UPLOAD_BYTES = 8 * 1024 * 1024
STREAM_EVERY_S = 0.25

# The step view carries its data in an inert <script type="application/json">, read by the
# page's script (viz/static/step_view.js); Gradio warns about any <script> in gr.HTML.
warnings.filterwarnings(
    "ignore", message="A `<script>` tag was found in the content of a `gr.HTML`"
)

APP_CSS = """
.cfsm-error{color:#b91c1c;font-weight:600;}
"""


def _msg(exc: BaseException) -> str:
    if isinstance(exc, CfsmError):
        return (
            f'<div class="cfsm-error" id="error-box">\u26a0 {html.escape(exc.kind)}: '
            f"{html.escape(exc.message)}</div>"
        )
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return (
        f'<div class="cfsm-error" id="error-box">\u26a0 internal error: {html.escape(text)}</div>'
    )


def make_constraint(
    kind: str, rx: str, sch: str, gram: str, ws: str, lenient: bool = False, spec: bool = False
) -> Constraint:
    if kind == "tools":
        raise CfsmError(
            "invalid_input", "the Tools tab holds tools, not a regex, schema or grammar"
        )
    text = {"regex": rx, "schema": sch, "grammar": gram}.get(kind, "")
    return Constraint.from_inputs(kind, text or "", ws, lenient, spec)


def page_constraint(kind, rx, sch, gram, ws, lenient=False, spec=False, mode="jump"):
    """The Run's constraint: none for free decoding, and none from the Tools tab (its tool
    calls are the constraint)."""
    if mode == "free" or kind == "tools":
        return None
    return make_constraint(kind, rx, sch, gram, ws, lenient, spec)


def _regex_automaton_check(text: str, ws: str, hub: EngineHub | None) -> str:
    """'' when the regex's automaton was built within the live check's budget (or could
    not be tried now); a line saying it is slow otherwise. A state explosion raises."""
    eng = hub.peek() if hub is not None else None
    if eng is None:
        return ""
    got = eng.try_automaton(Constraint.from_inputs("regex", text, ws))
    if got.dfa is not None:
        return f": {got.dfa.num_states:,} automaton states"
    if got.why_not == "slow":
        return (
            f"; its automaton takes longer than {LIVE_CHECK_S:g} s to build (Run allows "
            f"{eng.cache.timeout_s:g} s)"
        )
    return ""


def live_check(
    kind: str, text: str, ws: str, backend: str = DEFAULT_BACKEND, hub: EngineHub | None = None
) -> str:
    """Validation while typing, in the engine's words: no compile against the vocabulary;
    a regex's automaton is built by the live check's own worker within LIVE_CHECK_S (so
    a state explosion shows before Run)."""
    if not (text or "").strip():
        return ""
    more = ""
    try:
        if kind == "grammar":
            takes = backend in GRAMMAR_SYNTAX
            parser = backend if takes else next(iter(GRAMMAR_SYNTAX))
            check_grammar(text, parser)
            if not takes:
                choices = " or ".join(f"{n} ({s})" for n, s in GRAMMAR_SYNTAX.items())
                return (
                    f'<div class="cfsm-muted">valid {GRAMMAR_SYNTAX[parser]}; the '
                    f"{html.escape(backend)} backend "
                    f"takes no grammars \u2014 choose {choices}</div>"
                )
        elif kind == "regex":
            validate_regex(text)
            more = _regex_automaton_check(text, ws, hub)
        elif kind == "schema":
            parse_schema(text)
            try:
                schema_to_regex(text, ws)
            except CfsmError as exc:
                return (
                    '<div class="cfsm-muted">valid schema; the FSM view is unavailable '
                    f"({exc.message}) \u2014 tick Lenient, or use xgrammar or llguidance</div>"
                )
        ok = f"\u2713 looks valid{html.escape(more)}"
        return f'<div class="cfsm-muted" style="color:#15803d">{ok}</div>'
    except CfsmError as exc:
        return _msg(exc)


def tools_check(text: str) -> str:
    """The Tools box checked while typing: the tools it names, or what is wrong."""
    if not (text or "").strip():
        return ""
    try:
        tools = parse_tools(text)
    except CfsmError as exc:
        return _msg(exc)
    names = html.escape(", ".join(t.name for t in tools))
    n = f"{len(tools)} tool{'s' if len(tools) != 1 else ''}"
    return f'<div class="cfsm-muted" id="tools-ok">\u2713 {n}: {names}</div>'


def scrub_slider(n_steps: int) -> gr.Slider:
    """The scrubber over a run's positions: steps 0..n-1, then n for the end. A run with
    no step gets 0..1 locked at 0 (Gradio refuses a 0..0 slider), which shows the end."""
    return gr.Slider(minimum=0, maximum=max(1, n_steps), value=0, step=1, interactive=n_steps > 0)


def strings_checker(hub: EngineHub):
    """The Test strings panel's handler: each line checked with the chosen backend."""

    def do_test_strings(
        kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v, backend_v, model_t, lines
    ):

        try:
            c = make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v)
            eng = hub.get(check_page_model(model_t))
            res = eng.compile(c, backend_v)
            texts = [t for t in (lines or "").split("\n") if t != ""][:50]
            return test_strings_html(
                [{"text": t, **check_text(res.compiled, res.dfa, eng.ctx, t, c)} for t in texts]
            )
        except BaseException as exc:  # noqa: BLE001 - one line, the app keeps serving
            return _msg(exc)

    return do_test_strings


class Row:
    """A handler's outputs by name (the Playground's widget names): the widget list for
    the wiring, and per call the values, every output not named left as it is."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def widgets(self, ui) -> list:
        return [getattr(ui, n) for n in self.names]

    def set(self, **kw) -> list:
        unknown = set(kw) - set(self.names)
        if unknown:
            raise KeyError(f"not outputs of this handler: {sorted(unknown)}")
        return [kw.get(n, gr.skip()) for n in self.names]

    def __add__(self, other: Row) -> Row:
        return Row(*self.names, *other.names)


RUN_OUTPUTS = Row(
    "trace",
    "stop",
    "stop_msg",
    "error",
    "summary",
    "cards",
    "timeline",
    "scrub",
    "permalink",
    "dl_trace",
    "view",
    "view_rest",
    "live",
)
# reasoning and tool calls (engine.triggers): the Tools tab and the reasoning row
TRIGGER_INPUTS = Row(
    "tools", "tool_choice", "tool_start", "tool_end", "reasoning", "think_budget", "trigger_impl"
)
# The inputs an uploaded trace restores, and those a permalink or a preset sets.
RUN_INPUTS = Row(
    "kind",
    "ctabs",
    "rx",
    "sch",
    "gram",
    "prompt",
    "ws",
    "backend",
    "mode",
    "max_new",
    "temp",
    "top_p",
    "seed",
    "runtime",
)
RESTORED_INPUTS = RUN_INPUTS + Row("lenient", "spec", "preset") + TRIGGER_INPUTS
PERMALINK_INPUTS = RUN_INPUTS + Row("model", "preset") + TRIGGER_INPUTS
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


PRESET_INPUTS = (
    Row("kind", "ctabs", "rx", "sch", "gram", "prompt", "ws", "mode", "backend", "tools_err")
    + TRIGGER_INPUTS
)
PAGE_KINDS = (*KINDS, "tools")


def text_inputs(kind: str, text: str) -> dict:
    """The constraint kind, its tab and its text box (the other two boxes keep theirs)."""
    return {
        "kind": kind,
        "ctabs": gr.Tabs(selected=kind),
        {"regex": "rx", "schema": "sch", "grammar": "gram", "tools": "tools"}[kind]: text,
    }


def trigger_inputs(
    tools=None, choice="auto", start=None, end=None, reasoning=False, budget=0, impl=None
):
    """The Tools tab and reasoning row, by widget name (a preset, an uploaded trace, a
    permalink); the tags keep their defaults where none is given."""
    out = {
        "tool_choice": choice or "auto",
        "tool_start": start or DEFAULT_TOOL_START,
        "tool_end": end or DEFAULT_TOOL_END,
        "reasoning": bool(reasoning),
        "think_budget": int(_num(budget, 0, 512, 0)),
        "trigger_impl": impl if impl in TRIGGER_IMPLS else "auto",
    }
    if tools:
        out["tools"] = tools
    return out


def trigger_fields(
    kind, tools_t, choice_v, start_v, end_v, reasoning_v, budget_v, impl_v="auto"
) -> dict:
    """The request fields of the Tools tab (when it is the constraint) and the reasoning row."""
    fields = {
        "reasoning": bool(reasoning_v),
        "think_budget": int(_num(budget_v, 0, 10**9, 0)),
        "trigger_impl": impl_v or "auto",
    }
    if kind == "tools":
        fields.update(tools=tools_t or "", tool_choice=choice_v or "auto")
        fields.update(tool_start=start_v or "", tool_end=end_v or "")
    return fields


def finished_run(trace: dict, collapse: bool, whole: bool, raw: bool = False) -> tuple[dict, str]:
    """Every output a finished (or uploaded) run updates at once, its step view with what
    position 0 draws; and the view's other layouts and masks, for the handler's last
    update (after the timeline, `draw_timeline`): nothing waits for them but a scrub."""
    view, rest = step_view_parts(trace, collapse, whole, raw)
    first = dict(
        trace=trace,
        error="",
        summary=summary_md(trace),
        cards=stat_cards(trace["totals"]),
        scrub=scrub_slider(len(trace["steps"])),
        view=view,
        live="",
    )
    return first, rest


def draw_timeline(trace: dict):
    """The shown run's timeline, sent in the handler's next update, after the one with
    the step view: Plotly draws it in ~80 ms of the browser's main thread, and in one
    update the step view above it waited for that (2 cores: a tenth of the character
    preset's click-to-step-view time on llama.cpp). Building it (~20 ms) also lets the
    browser draw the step view before the timeline's update arrives."""
    return timeline(trace)


STOP_OUTPUTS = Row("stop_msg", "view", "summary", "live", "timeline", "view_rest", "dl_trace")


def stop_reply(h: RunHandle | None, trace, collapse: bool, whole: bool, raw: bool) -> list:
    """Stop: cancel the run and say what was stopped, in the stop line and in the summary
    (which would otherwise keep the last streamed 'Decoding ... step N'); the partial token
    strip goes, and the previous run's view comes back (the click dimmed it and the run had
    replaced it with a placeholder). After the decode, Stop cancels only the updates the
    finished run had left to send (its timeline, the rest of its view, its trace file): they
    are sent from here, so the view shown keeps every position and the download is its own."""
    if h is None or h.phase == "done":
        line = (h.stop() if h is not None else "") or gr.skip()
        if h is None or h.unsent is None:
            return STOP_OUTPUTS.set(stop_msg=line)
        done, rest = h.unsent
        return STOP_OUTPUTS.set(
            stop_msg=line,
            timeline=draw_timeline(done),
            view_rest=rest,
            dl_trace=write_trace_file(done),
        )
    line = h.stop()
    view = step_view_html(trace, collapse, whole, raw) if trace else empty_view(NO_RUN)
    below = " The view below is the previous run's." if trace else ""
    return STOP_OUTPUTS.set(stop_msg=line, view=view, summary=f"**{line}**{below}", live="")


def live_update(ev: StepEvent | WaitEvent) -> dict:
    """The outputs a streaming step updates; a wait for KV cells, the status line only."""
    if isinstance(ev, WaitEvent):
        return dict(summary=waiting_line(ev))
    strip, totals, line = live_figures(ev)
    return dict(live=token_strip(strip), cards=stat_cards(totals), summary=line)


def run_streamer(hub: EngineHub):
    """The Run button's handler: compile (with progress), decode in a worker thread while
    streaming tokens, then the step view. Errors become one line; the app keeps serving."""

    def do_run(
        kind,
        rx_t,
        sch_t,
        gram_t,
        ws_v,
        prompt_t,
        model_t,
        backend_v,
        mode_v,
        max_v,
        temp_v,
        top_v,
        seed_v,
        collapse_v,
        whole_v,
        lenient_v=False,
        spec_v=False,
        runtime_v="auto",
        raw_v=False,
        prev_trace=None,
        *trigger_v,
    ):
        handle = RunHandle()
        out = RUN_OUTPUTS
        try:
            constraint = page_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v, mode_v)
            triggers = trigger_fields(kind, *trigger_v) if trigger_v else {}
            req = GenerateRequest.from_inputs(
                prompt_t,
                constraint,
                mode=mode_v,
                backend=backend_v,
                max_new_tokens=max_v,
                temperature=temp_v,
                top_p=top_v,
                seed=seed_v,
                runtime=runtime_v,
                **triggers,
            )
            yield out.set(
                stop=handle,
                stop_msg="",  # a new run: the last Stop's line goes (here, not in an event of
                # its own: Stop's cancel re-ran such an event and wiped the line it had just set)
                error="",
                summary="Loading the model \u2026",
                live="",
                view=empty_view("Decoding \u2026 the step view of this run appears when it ends."),
            )
            eng = hub.get(check_page_model(model_t))
            for c in eng.compile_targets(req):
                yield from _compile_progress(eng, c, backend_v, handle, out)
            handle.set_phase("decoding")
            trace = yield from _decode_streaming(eng, req, handle, out)
            link = permalink_md(
                kind,
                {
                    "regex": rx_t,
                    "schema": sch_t,
                    "grammar": gram_t,
                    "tools": trigger_v[0] if trigger_v else "",
                }[kind],
                ws_v,
                prompt_t,
                model_t,
                backend_v,
                mode_v,
                max_v,
                temp_v,
                seed_v,
                top_v,
                runtime_v,
                triggers,
            )
            first, rest = finished_run(trace, collapse_v, whole_v, raw_v)
            yield out.set(**first)
            handle.unsent = (trace, rest)  # the view is shown: Stop sends the rest (stop_reply)
            # below the step view, after it: the timeline and the permalink; then what only a
            # scrub or a download needs. The trace file goes in the last update: a file
            # output set in an earlier one stayed "Uploading..." with no link (Gradio 6)
            yield out.set(timeline=draw_timeline(trace), permalink=link)
            yield out.set(view_rest=rest, dl_trace=write_trace_file(trace))
            handle.unsent = None
        except GeneratorExit:
            handle.event.set()
            raise
        except BaseException as exc:  # noqa: BLE001 - the page shows one line and keeps serving
            handle.event.set()
            # the previous run's view comes back (the click dimmed it): a failed run loses nothing
            yield out.set(
                error=_msg(exc),
                summary=previous_run_note(prev_trace),
                live="",
                view=step_view_html(prev_trace, collapse_v, whole_v, raw_v)
                if prev_trace
                else empty_view(NO_RUN),
            )

    return do_run


def _compile_progress(eng, constraint: Constraint, backend: str, handle: RunHandle, out: Row):
    handle.set_phase("compiling", f"the {constraint.kind} for {backend}")
    fut = eng.cache.submit(constraint, backend)
    t0 = time.time()
    while not fut.done():
        yield out.set(
            summary=f"Compiling the {constraint.kind} for {backend} \u2026 {time.time() - t0:.1f} s"
        )
        time.sleep(0.3)
    eng.cache.get(constraint, backend)  # raises the compile error, if any


def _decode_streaming(eng, req: GenerateRequest, handle: RunHandle, out: Row):
    events: queue.Queue = queue.Queue()
    box: dict = {}

    def work():
        try:
            box["trace"] = eng.generate(
                req, on_event=lambda k, d: events.put((k, d)), should_stop=handle.event.is_set
            )
        except BaseException as exc:  # noqa: BLE001 - shown in the page
            box["error"] = exc
        finally:
            events.put(("done", None))

    threading.Thread(target=work, daemon=True).start()
    last, latest = 0.0, None
    while True:
        try:
            k, d = events.get(timeout=0.5)
        except queue.Empty:
            continue
        if k == "done":
            break
        if k in ("step", "wait"):
            latest = d
        # after Stop, nothing more: an update yielded once Stop had written its line (the
        # worker thread was waiting for a step when the click came) replaced it with
        # "Decoding ... step N" (a clean clone's browser test caught it)
        if latest is not None and time.time() - last > STREAM_EVERY_S and not handle.event.is_set():
            last = time.time()
            yield out.set(**live_update(latest))
    handle.set_phase("done")
    if "error" in box:
        raise box["error"]
    return box["trace"]


def checked_inputs(raw: dict) -> dict:
    """Widget values from outside (a permalink, an uploaded trace), by widget name: a
    choice outside its list or a number that does not read is left out (that widget keeps
    its value), a number is clamped to its widget's range. One table for both sources."""
    choices = {"ws": WS, "backend": BACKENDS, "mode": MODES, "runtime": RUNTIME_CHOICES}
    numbers = {
        "max_new": (1, 512),
        "temp": (0, 2),
        "top_p": (0.05, 1),
        "seed": (0, 2**31),
    }
    out = {k: raw[k] for k, allowed in choices.items() if raw.get(k) in allowed}
    for name, (lo, hi) in numbers.items():
        x = _num(raw.get(name), lo, hi, None)
        if x is not None:
            out[name] = x
    return out


def restore_inputs(trace: dict) -> dict:
    """An uploaded trace's inputs by widget name (RESTORED_INPUTS); what the trace does
    not say is left out, so that widget keeps its value. The preset becomes 'edited'."""
    r = trace.get("request") or {}
    c = r.get("constraint") or {}
    out: dict = {
        "lenient": bool(c.get("lenient", False)),
        "spec": bool(c.get("spec", False)),
        "preset": CUSTOM,
    }
    if c.get("kind") in KINDS:
        out.update(text_inputs(c["kind"], c.get("text", "")))
    if r.get("tools"):
        out.update(text_inputs("tools", r["tools"]))
    out.update(
        trigger_inputs(
            None,
            r.get("tool_choice"),
            r.get("tool_start"),
            r.get("tool_end"),
            r.get("reasoning"),
            r.get("think_budget"),
            r.get("trigger_impl"),
        )
    )
    if "prompt" in r:
        out["prompt"] = r["prompt"]
    raw = {
        "ws": c.get("whitespace"),
        "backend": trace.get("backend"),
        "mode": trace.get("mode"),
        "runtime": r.get("runtime") or None,
        "max_new": r.get("max_new_tokens"),
        "temp": r.get("temperature"),
        "top_p": r.get("top_p"),
        "seed": r.get("seed"),
    }
    return {**out, **checked_inputs(raw)}


def build_demo(hub: EngineHub) -> gr.Blocks:
    P = presets()
    with gr.Blocks(title="cfsm-lab: compressed-FSM constrained decoding") as demo:
        gr.Markdown("# cfsm-lab \u2014 constrained decoding with a compressed FSM and jump-forward")
        ui = playground_tab(P, hub.status(), MODES, BACKENDS, WS)
        cmp = compare_tab(MODES, BACKENDS, WS)
        doc = doctor_tab()
        _wire_inputs(ui, P, hub)
        _wire_run(ui, hub)
        _wire_compare(ui, cmp, hub)
        _wire_doctor(ui, doc, hub)
        _wire_load(ui, demo)
        _wire_api(hub, demo)
    return demo


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
        box.input(lambda: CUSTOM, None, ui.preset, queue=False)
    ui.backend.change(
        lambda text, w, b: live_check("grammar", text, w, b),
        [ui.gram, ui.ws, ui.backend],
        ui.gram_err,
        show_progress="hidden",
        queue=False,
    )
    ui.prompt.input(lambda: CUSTOM, None, ui.preset, queue=False)
    ui.tab_rx.select(lambda: "regex", None, ui.kind, queue=False)
    ui.tab_sch.select(lambda: "schema", None, ui.kind, queue=False)
    ui.tab_g.select(lambda: "grammar", None, ui.kind, queue=False)
    ui.tab_tools.select(lambda: "tools", None, ui.kind, queue=False)
    ui.tools_err.value = tools_check(ui.tools.value)  # the page opens with it checked
    ui.tools.change(
        tools_check,
        ui.tools,
        ui.tools_err,
        show_progress="hidden",
        queue=False,
        trigger_mode="always_last",
    )
    ui.tools.input(lambda: CUSTOM, None, ui.preset, queue=False)

    def on_preset(name):
        p = P.get(name)
        if not p:
            return PRESET_INPUTS.set()
        return PRESET_INPUTS.set(
            **text_inputs(p["kind"], p["text"]),
            **trigger_inputs(
                None,
                p.get("tool_choice"),
                p.get("tool_start"),
                p.get("tool_end"),
                p.get("reasoning"),
                p.get("think_budget"),
            ),
            prompt=p["prompt"],
            ws=p["whitespace"],
            mode=p["mode"],
            backend=p.get("backend", DEFAULT_BACKEND),
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
        strings_checker(hub),
        [
            ui.kind,
            ui.rx,
            ui.sch,
            ui.gram,
            ui.ws,
            ui.lenient,
            ui.spec,
            ui.backend,
            ui.model,
            ui.ts_text,
        ],
        ui.ts_out,
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
    )


def _wire_run(ui: Playground, hub: EngineHub) -> None:
    outputs = RUN_OUTPUTS.widgets(ui)
    ui.run_btn.click(None, js="() => { window.cfsm && window.cfsm.stale(); }", queue=False)
    run_evt = ui.run_btn.click(
        run_streamer(hub),
        [
            ui.kind,
            ui.rx,
            ui.sch,
            ui.gram,
            ui.ws,
            ui.prompt,
            ui.model,
            ui.backend,
            ui.mode,
            ui.max_new,
            ui.temp,
            ui.top_p,
            ui.seed,
            ui.collapse,
            ui.whole,
            ui.lenient,
            ui.spec,
            ui.runtime,
            ui.raw,
            ui.trace,
            *TRIGGER_INPUTS.widgets(ui),
        ],
        outputs,
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
        # the summary line streams the progress; Gradio's overlay timers on eleven outputs
        # redrew every frame for the whole run, on the cores the decoding needs
        show_progress="hidden",
    )

    ui.stop_btn.click(
        stop_reply,
        [ui.stop, ui.trace, ui.collapse, ui.whole, ui.raw],
        STOP_OUTPUTS.widgets(ui),
        cancels=[run_evt],
        queue=False,
    )
    # scrubbing and playing happen in the browser (viz/static/step_view.js): no server round trip
    ui.scrub.change(None, [ui.scrub], None, js="(k) => { window.cfsm && window.cfsm.show(k); }")
    ui.play.click(None, js="() => { window.cfsm && window.cfsm.play(); }")
    ui.pause.click(None, js="() => { window.cfsm && window.cfsm.pause(); }")

    def relayout(trace, collapse_v, whole_v, raw_v):
        return step_view_html(trace, collapse_v, whole_v, raw_v) if trace else gr.skip()

    for box in (ui.collapse, ui.whole, ui.raw):
        box.input(
            relayout, [ui.trace, ui.collapse, ui.whole, ui.raw], ui.view, show_progress="hidden"
        )

    upload = RUN_OUTPUTS + Row("up_trace", "up_err") + RESTORED_INPUTS

    def load_upload(f, collapse_v, whole_v, raw_v) -> tuple[list, dict | None, str]:
        """The upload's outputs, its trace (None when there is none to show) and the rest
        of its step view's bundle."""
        try:
            if f is None:
                return upload.set(), None, ""
            p = Path(f if isinstance(f, str) else f.name)
            if p.stat().st_size > MAX_UPLOAD_BYTES:
                raise CfsmError(
                    "input_too_large", f"trace file is larger than {MAX_UPLOAD_BYTES // 2**20} MB"
                )
            trace = validate_trace(p.read_text(encoding="utf-8"))
            first, rest = finished_run(trace, collapse_v, whole_v, raw_v)
            return (
                upload.set(**first, up_trace=None, up_err="", **restore_inputs(trace)),
                trace,
                rest,
            )
        except BaseException as exc:  # noqa: BLE001
            return upload.set(up_trace=None, up_err=_msg(exc)), None, ""

    def on_upload(f, collapse_v, whole_v, raw_v):
        outputs, trace, rest = load_upload(f, collapse_v, whole_v, raw_v)
        yield outputs
        if trace is not None:
            yield upload.set(timeline=draw_timeline(trace))
            yield upload.set(view_rest=rest)

    ui.up_trace.upload(on_upload, [ui.up_trace, ui.collapse, ui.whole, ui.raw], upload.widgets(ui))


def _wire_compare(ui: Playground, cmp: Compare, hub: EngineHub) -> None:
    def do_compare(
        kind,
        rx_t,
        sch_t,
        gram_t,
        prompt_t,
        model_t,
        max_v,
        temp_v,
        top_v,
        seed_v,
        ma,
        ba,
        wa,
        mb,
        bb,
        wb,
        *trigger_v,
    ):
        try:
            eng = hub.get(check_page_model(model_t))
            traces = []
            triggers = trigger_fields(kind, *trigger_v)
            for m, b, w in ((ma, ba, wa), (mb, bb, wb)):
                c = page_constraint(kind, rx_t, sch_t, gram_t, w, mode=m)
                traces.append(
                    eng.generate(
                        GenerateRequest.from_inputs(
                            prompt_t,
                            c,
                            mode=m,
                            backend=b,
                            max_new_tokens=max_v,
                            temperature=temp_v,
                            top_p=top_v,
                            seed=seed_v,
                            trace_detail=False,
                            **(triggers if m != "free" else {}),
                        )
                    )
                )
            a, b = traces
            md = compare_md(
                a, b, f"{ma} / {ba} / {wa}", f"{mb} / {bb} / {wb}", float(temp_v), int(seed_v or 0)
            )
            return "", md, token_strip(a), token_strip(b)
        except BaseException as exc:  # noqa: BLE001
            return _msg(exc), "", "", ""

    cmp.btn.click(
        do_compare,
        [
            ui.kind,
            ui.rx,
            ui.sch,
            ui.gram,
            ui.prompt,
            ui.model,
            ui.max_new,
            ui.temp,
            ui.top_p,
            ui.seed,
            cmp.mode_a,
            cmp.backend_a,
            cmp.ws_a,
            cmp.mode_b,
            cmp.backend_b,
            cmp.ws_b,
            *TRIGGER_INPUTS.widgets(ui),
        ],
        [cmp.err, cmp.table, cmp.strip_a, cmp.strip_b],
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
    )


def _wire_doctor(ui: Playground, doc: Doctor, hub: EngineHub) -> None:
    def do_doctor(
        kind,
        rx_t,
        sch_t,
        gram_t,
        ws_v,
        prompt_t,
        model_t,
        n,
        with_model,
        lenient_v=False,
        spec_v=False,
    ):
        try:
            c = make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v)
            if c.kind == "grammar":
                raise CfsmError(
                    "unsupported_feature",
                    "the doctor needs a regex or a JSON schema: a grammar has "
                    "no finite automaton to analyse",
                )
            eng = hub.get(check_page_model(model_t))
            rep = eng.diagnose(c, (prompt_t or "") if with_model else None, int(n))
            return "", doctor_md(rep, c.text), doctor_plot(rep)
        except BaseException as exc:  # noqa: BLE001
            return _msg(exc), "", None

    doc.btn.click(
        do_doctor,
        [
            ui.kind,
            ui.rx,
            ui.sch,
            ui.gram,
            ui.ws,
            ui.prompt,
            ui.model,
            doc.samples,
            doc.with_model,
            ui.lenient,
            ui.spec,
        ],
        [doc.err, doc.md, doc.plot],
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
    )


def _wire_load(ui: Playground, demo: gr.Blocks) -> None:
    def on_load(request: gr.Request):
        q = dict(request.query_params) if request is not None else {}
        if not q:
            return PERMALINK_INPUTS.set()
        k = q.get("kind", "regex") if q.get("kind") in PAGE_KINDS else "regex"
        out = {**text_inputs(k, q.get("c", "")), "preset": CUSTOM}
        out.update(
            trigger_inputs(
                None,
                q.get("choice"),
                q.get("tstart"),
                q.get("tend"),
                q.get("reasoning") == "1",
                q.get("budget"),
                q.get("impl"),
            )
        )
        out.update(
            {name: q[key] for name, key in (("prompt", "prompt"), ("model", "model")) if key in q}
        )
        keys = {"max_new": "max", "temp": "temp", "top_p": "top_p", "seed": "seed"}
        raw = {name: q.get(keys.get(name, name)) for name in (*keys, "ws", "backend", "mode")}
        out.update(checked_inputs({**raw, "runtime": q.get("runtime")}))
        return PERMALINK_INPUTS.set(**out)

    demo.load(on_load, None, PERMALINK_INPUTS.widgets(ui), queue=False)


def client_gone(demo: gr.Blocks, request: gr.Request | None):
    """A should_stop for an API call: true once the caller's job is no longer alive in
    Gradio's queue (the client cancelled or went away; Gradio marks its jobs dead then, but
    cannot stop a function already running in a thread)."""
    session = getattr(request, "session_hash", None)
    if session is None:
        return None

    def gone() -> bool:
        queue = getattr(demo, "_queue", None)
        jobs = [j for js in getattr(queue, "active_jobs", None) or [] if js for j in js]
        mine = [j for j in jobs if getattr(j, "session_hash", None) == session]
        return bool(mine) and not any(getattr(j, "alive", True) for j in mine)

    return gone


def _wire_api(hub: EngineHub, demo: gr.Blocks) -> None:
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
            return eng.compile_report(
                make_constraint(
                    kind, constraint, constraint, constraint, whitespace, lenient, spec
                ),
                backend,
            )
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
            c = page_constraint(
                kind, constraint, constraint, constraint, whitespace, lenient, spec, mode
            )
            triggers = trigger_fields(
                kind,
                constraint,
                tool_choice,
                tool_start,
                tool_end,
                reasoning,
                think_budget,
                trigger_impl,
            )
            return eng.generate(
                GenerateRequest.from_inputs(
                    prompt,
                    c,
                    mode=mode,
                    backend=backend,
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    seed=seed,
                    runtime=runtime,
                    **triggers,  # a free run with triggers is refused by name
                ),
                should_stop=client_gone(demo, request),
            )
        except CfsmError as exc:
            raise gr.Error(f"{exc.kind}: {exc.message}") from None

    gr.api(api_compile, api_name="compile", concurrency_limit=2)
    gr.api(api_run, api_name="run", concurrency_limit=DECODE_SLOTS, concurrency_id="decode")


def _num(v, lo, hi, default):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
    return min(hi, max(lo, x))


def permalink_md(
    kind,
    text,
    ws,
    prompt,
    model,
    backend,
    mode,
    max_v,
    temp,
    seed,
    top_p=1.0,
    runtime="auto",
    triggers: dict | None = None,
) -> str:
    q = {
        "kind": kind,
        "c": text,
        "ws": ws,
        "prompt": prompt,
        "backend": backend,
        "mode": mode,
        "max": int(max_v),
        "temp": temp,
        "top_p": top_p,
        "seed": int(seed or 0),
    }
    if runtime and runtime != "auto":
        q["runtime"] = runtime
    if model and model != "embedded":
        q["model"] = model
    t = triggers or {}
    if t.get("reasoning"):
        q.update(reasoning=1, budget=int(t.get("think_budget") or 0))
    if t.get("trigger_impl") not in (None, "auto"):
        q["impl"] = t["trigger_impl"]
    if kind == "tools":
        q.update(choice=t.get("tool_choice"), tstart=t.get("tool_start"), tend=t.get("tool_end"))
    url = "?" + urllib.parse.urlencode(q)
    if len(url) > 8000:
        return (
            "Permalink unavailable: the inputs are too long for a URL (download the trace instead)."
        )
    return f"[Permalink to these inputs]({url})"


def write_trace_file(trace: dict) -> str:
    path = Path(tempfile.mkdtemp(prefix="cfsm-")) / "trace.json"
    path.write_text(json.dumps(trace, ensure_ascii=False), encoding="utf-8")
    return str(path)


def serve(
    host: str = "127.0.0.1",
    port: int = 7860,
    model: str | None = None,
    device: str | None = None,
    prevent_thread_lock: bool = False,
    max_states: int | None = None,
    compile_timeout_s: float | None = None,
    runtime: str | None = None,
):
    hub = EngineHub(
        model, device, max_states=max_states, compile_timeout_s=compile_timeout_s, runtime=runtime
    )
    hub.start()
    demo = build_demo(hub)
    demo.queue(default_concurrency_limit=2, max_size=32)
    demo.launch(
        server_name=host,
        server_port=port,
        css=APP_CSS,
        head=head_html(),
        show_error=False,
        prevent_thread_lock=prevent_thread_lock,
        quiet=True,
        ssr_mode=False,
        # Gradio's run history kept every run's outputs (a step view is ~0.5 MB) in the
        # browser's localStorage and rewrote the whole list at each streamed update: 0.6 MB
        # more per run, 0.8 s of the page's time by the sixth run, on the cores the
        # decoding needs. Runs are shared here by permalink and trace file instead.
        run_history=False,
    )
    return demo, hub
