"""The Run button, Stop, the layout toggles and trace upload: a run's inputs read as one
`PageInputs`, its progress streamed, its step view in two parts, its trace file last."""

from __future__ import annotations

import json
import logging
import queue
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr

from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.decoding.trace import StepEvent, Trace, WaitEvent
from engine.errors import CfsmError
from viz.cards import stat_cards
from viz.plots import timeline
from viz.step_bundle import empty_view, live_view_html, step_view_html, step_view_parts
from viz.summaries import live_figures, previous_run_note, summary_md, waiting_line

from .checks import error_line, for_the_page
from .inputs import RESTORED_INPUTS, PageInputs, Row, restore_inputs
from .layout import NO_RUN, Playground
from .state import DECODE_SLOTS, EngineHub, RunHandle, check_page_model

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 8 * 1024 * 1024
STREAM_EVERY_S = 0.25
LIVE_VIEW_EVERY_S = 0.5


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


def scrub_slider(n_steps: int) -> gr.Slider:
    """The scrubber over a run's positions: steps 0..n-1, then n for the end. A run with
    no step gets 0..1 locked at 0 (Gradio refuses a 0..0 slider), which shows the end."""
    return gr.Slider(minimum=0, maximum=max(1, n_steps), value=0, step=1, interactive=n_steps > 0)


def finished_run(trace: Trace, collapse: bool, whole: bool, raw: bool = False) -> tuple[dict, str]:
    """Every output a finished (or uploaded) run updates at once, its step view with what
    position 0 draws; and the view's other layouts and masks, for the handler's last
    update (after the timeline, `draw_timeline`): nothing waits for them but a scrub."""
    view, rest = step_view_parts(trace, collapse, whole, raw)
    first = dict(
        trace=trace,
        error="",
        summary=for_the_page(summary_md(trace)),  # auto's reason may name CLI flags
        cards=stat_cards(trace.totals),
        scrub=scrub_slider(len(trace.steps)),
        view=view,
        live="",
    )
    return first, rest


def draw_timeline(trace: Trace):
    """The shown run's timeline, sent in the handler's next update, after the one with
    the step view: Plotly draws it in ~80 ms of the browser's main thread, and in one
    update the step view above it waited for that (2 cores: a tenth of the character
    preset's click-to-step-view time on llama.cpp). Building it (~20 ms) also lets the
    browser draw the step view before the timeline's update arrives."""
    return timeline(trace)


STOP_OUTPUTS = Row(
    "stop_msg", "view", "summary", "cards", "live", "timeline", "view_rest", "dl_trace", "scrub"
)


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
    return STOP_OUTPUTS.set(**stopped_view(h.stop(), trace, collapse, whole, raw))


def stopped_view(line: str, trace, collapse: bool, whole: bool, raw: bool) -> dict:
    """What the page shows once a run is stopped: the stop line, and the previous run's
    view back. Sent by Stop, and again as the stopped run's last update (an update it had
    streamed before the click may arrive after Stop's)."""
    view = step_view_html(trace, collapse, whole, raw) if trace else empty_view(NO_RUN)
    below = " The view and figures below are the previous run's." if trace else ""
    return dict(
        stop_msg=line,
        view=view,
        summary=f"**{line}**{below}",
        cards=_cards_of(trace),
        live="",
        scrub=_scrub_of(trace),
    )


def _scrub_of(trace: Trace | None) -> gr.Slider:
    """The scrubber over the run the view shows again (a new run had locked it at 0)."""
    return scrub_slider(len(trace.steps) if trace else 0)


def _cards_of(trace: Trace | None) -> str:
    """The cards of the run the view shows (the streamed ones were the stopped run's)."""
    return stat_cards(trace.totals) if trace else ""


def live_update(ev: StepEvent | WaitEvent) -> dict:
    """The outputs a streaming step updates; a wait for KV cells, the status line only."""
    if isinstance(ev, WaitEvent):
        return dict(summary=waiting_line(ev))
    strip, cards, line = live_figures(ev)
    return dict(live=strip, cards=cards, summary=line)


def run_streamer(ui, hub: EngineHub):
    """The Run button's handler: compile (with progress), decode in a worker thread while
    streaming tokens, then the step view. Errors become one line; the app keeps serving."""

    def do_run(values: dict):
        handle = RunHandle()
        out = RUN_OUTPUTS
        inp = PageInputs.read(ui, values)
        try:
            req = inp.request()
            yield out.set(
                stop=handle,
                stop_msg="",  # a new run: the last Stop's line goes (here, not in an event of
                # its own: Stop's cancel re-ran such an event and wiped the line it had just set)
                error="",
                summary="Loading the model \u2026",
                live="",
                view=empty_view("Decoding \u2026 the step view shows its first step soon."),
                scrub=scrub_slider(0),  # locked at 0 while the view follows the run
            )
            eng = hub.get(check_page_model(inp.model))
            for c in eng.compile_targets(req):
                yield from _compile_progress(eng, c, inp.backend, handle, out)
            if handle.event.is_set():
                yield out.set(
                    **stopped_view(handle.line, inp.trace, inp.collapse, inp.whole, inp.raw),
                    permalink=inp.permalink(),  # what is on screen, not the previous run's
                )
                return  # (Stop's own reply said the same)
            handle.set_phase("decoding")
            trace = yield from _decode_streaming(eng, req, handle, out, inp)
            if handle.event.is_set():
                yield out.set(
                    **stopped_view(handle.line, inp.trace, inp.collapse, inp.whole, inp.raw),
                    permalink=inp.permalink(),  # what is on screen, not the previous run's
                )
                return
            first, rest = finished_run(trace, inp.collapse, inp.whole, inp.raw)
            yield out.set(**first, permalink=inp.permalink())
            handle.unsent = (trace, rest)  # the view is shown: Stop sends the rest (stop_reply)
            # below the step view, after it: the timeline; then what only a
            # scrub or a download needs. The trace file goes in the last update: a file
            # output set in an earlier one stayed "Uploading..." with no link (Gradio 6)
            for last in (
                dict(timeline=draw_timeline(trace)),
                dict(view_rest=rest, dl_trace=write_trace_file(trace)),
            ):
                if handle.event.is_set():
                    return  # Stop sent what was left (stop_reply)
                yield out.set(**last)
            handle.unsent = None
        except GeneratorExit:
            handle.event.set()
            raise
        except BaseException as exc:  # noqa: BLE001 - the page shows one line and keeps serving
            handle.event.set()
            # the previous run's view comes back (the click dimmed it): a failed run loses nothing
            prev = inp.trace
            yield out.set(
                error=error_line(exc),
                summary=previous_run_note(prev),
                cards=_cards_of(prev),
                live="",
                scrub=_scrub_of(prev),
                view=step_view_html(prev, inp.collapse, inp.whole, inp.raw)
                if prev
                else empty_view(NO_RUN),
            )

    return do_run


def _compile_progress(eng, constraint: Constraint, backend: str, handle: RunHandle, out: Row):
    handle.set_phase("compiling", f"the {constraint.kind} for {backend}")
    fut = eng.cache.submit(constraint, backend)
    t0 = time.time()
    while not fut.done():
        if handle.event.is_set():
            return  # the compile goes on in the background; the run ends here
        yield out.set(
            summary=f"Compiling the {constraint.kind} for {backend} \u2026 {time.time() - t0:.1f} s"
        )
        time.sleep(0.3)
    eng.cache.get(constraint, backend)  # raises the compile error, if any


class LiveViews:
    """When the decoding thread snapshots the run for the live step view: at its first
    step, then every LIVE_VIEW_EVERY_S at the most, or rarer where a snapshot and its view
    cost more (at most a quarter of the time goes to them), one in flight at a time."""

    def __init__(self) -> None:
        self.next_at = 0.0
        self.snap_s = 0.0

    def take(self, ev: StepEvent) -> Trace | None:
        """In the listener: the trace so far when a view is due, else None. A snapshot
        that fails ends the live views of this run, not the run (the server log says why)."""
        if ev.snapshot is None or time.perf_counter() < self.next_at:
            return None
        t0, self.next_at = time.perf_counter(), float("inf")  # until `shown`
        try:
            trace = ev.snapshot()
        except Exception:  # noqa: BLE001 - the run goes on; its finished view still comes
            log.exception("live step view: the snapshot failed; no more live views this run")
            return None
        self.snap_s = time.perf_counter() - t0
        return trace

    def draw(
        self, trace: Trace, collapse: bool = True, whole: bool = False, raw: bool = False
    ) -> str | None:
        """The live view of `trace`; None (and no more live views) when drawing fails."""
        t0 = time.perf_counter()
        try:
            view = live_view_html(trace, collapse, whole, raw)
        except Exception:  # noqa: BLE001 - as in `take`
            log.exception("live step view: drawing failed; no more live views this run")
            return None
        self.shown(time.perf_counter() - t0)
        return view

    def shown(self, build_s: float) -> None:
        self.next_at = time.perf_counter() + max(LIVE_VIEW_EVERY_S, 4 * (self.snap_s + build_s))


def _decode_streaming(eng, req: GenerateRequest, handle: RunHandle, out: Row, inp: PageInputs):
    events: queue.Queue = queue.Queue()
    box: dict = {}
    views = LiveViews()

    def listen(kind: str, data) -> None:
        snap = views.take(data) if kind == "step" and not handle.event.is_set() else None
        if snap is not None:
            events.put(("view", snap))
        events.put((kind, data))

    def work():
        try:
            trace = eng.generate(req, on_event=listen, should_stop=handle.event.is_set)
            box["trace"] = trace
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
        if k == "view":
            view = views.draw(d, inp.collapse, inp.whole, inp.raw)
            if view is not None and not handle.event.is_set():
                yield out.set(view=view)
            continue
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


def write_trace_file(trace: Trace) -> str:
    path = Path(tempfile.mkdtemp(prefix="cfsm-")) / "trace.json"
    path.write_text(json.dumps(trace.to_json(), ensure_ascii=False), encoding="utf-8")
    return str(path)


def wire_run(ui: Playground, hub: EngineHub) -> None:
    outputs = RUN_OUTPUTS.widgets(ui)
    ui.run_btn.click(None, js="() => { window.cfsm && window.cfsm.stale(); }", queue=False)
    ui.run_btn.click(
        run_streamer(ui, hub),
        PageInputs.widgets(ui),
        outputs,
        concurrency_limit=DECODE_SLOTS,
        concurrency_id="decode",
        # the summary line streams the progress; Gradio's overlay timers on eleven outputs
        # redrew every frame for the whole run, on the cores the decoding needs
        show_progress="hidden",
    )

    # Stop flips the run's switch, and the run's handler ends by itself at its next step.
    # Gradio's `cancels` once did it, but a run cancelled mid-stream left the page thinking
    # it was still pending, and every later Run click was dropped (its trigger mode: once).
    ui.stop_btn.click(
        stop_reply,
        [ui.stop, ui.trace, ui.collapse, ui.whole, ui.raw],
        STOP_OUTPUTS.widgets(ui),
        queue=False,
    )
    # scrubbing and playing happen in the browser (viz/static/step_view.js): no server round trip
    ui.scrub.change(None, [ui.scrub], None, js="(k) => { window.cfsm && window.cfsm.show(k); }")
    ui.play.click(None, js="() => { window.cfsm && window.cfsm.play(); }")
    ui.pause.click(None, js="() => { window.cfsm && window.cfsm.pause(); }")
    ui.present.click(None, js="() => { window.cfsmPresent && window.cfsmPresent.toggle(); }")

    def relayout(trace, collapse_v, whole_v, raw_v):
        return step_view_html(trace, collapse_v, whole_v, raw_v) if trace else gr.skip()

    for box in (ui.collapse, ui.whole, ui.raw):
        box.input(
            relayout, [ui.trace, ui.collapse, ui.whole, ui.raw], ui.view, show_progress="hidden"
        )

    upload = RUN_OUTPUTS + Row("up_trace", "up_err") + RESTORED_INPUTS

    def on_upload(f, collapse_v, whole_v, raw_v):
        try:
            if f is None:
                yield upload.set()
                return
            p = Path(f if isinstance(f, str) else f.name)
            if p.stat().st_size > MAX_UPLOAD_BYTES:
                raise CfsmError(
                    "input_too_large", f"trace file is larger than {MAX_UPLOAD_BYTES // 2**20} MB"
                )
            # typed on the way in: a step or a total missing a field is refused here, by
            # name, not met later as a KeyError in the step view
            trace = Trace.from_json(p.read_text(encoding="utf-8"))
        except BaseException as exc:  # noqa: BLE001
            yield upload.set(up_trace=None, up_err=error_line(exc))
            return
        yield from show_trace(upload, trace, collapse_v, whole_v, raw_v, up_trace=None)

    ui.up_trace.upload(on_upload, [ui.up_trace, ui.collapse, ui.whole, ui.raw], upload.widgets(ui))


def show_trace(rows: Row, trace: Trace, collapse: bool, whole: bool, raw: bool, **more):
    """A finished run from elsewhere (an uploaded file, an API request's trace) in the
    step view, its inputs in the boxes; then its timeline and the rest of its view."""
    first, rest = finished_run(trace, collapse, whole, raw)
    yield rows.set(**first, up_err="", **restore_inputs(trace), **more)
    yield rows.set(timeline=draw_timeline(trace))
    yield rows.set(view_rest=rest)


def wire_trace_link(ui: Playground, demo: gr.Blocks, hub: EngineHub) -> None:
    """`/?trace=ID`: an API request's run (kept by the hub's trace store) in the view."""
    rows = RUN_OUTPUTS + Row("up_err") + RESTORED_INPUTS

    def on_load(collapse_v, whole_v, raw_v, request: gr.Request):
        tid = (dict(request.query_params) if request is not None else {}).get("trace")
        trace = hub.traces.get(tid) if tid else None
        if not tid:
            yield rows.set()
        elif trace is None:
            yield rows.set(error=error_line(CfsmError(
                "invalid_input", f"trace {tid!r} is not kept here (the server keeps the last "
                f"{hub.traces.max_traces} API requests' traces, newest first)")))  # fmt: skip
        else:  # kept as the API returned it (JSON): typed here, for the view
            yield from show_trace(rows, Trace.from_json(trace), collapse_v, whole_v, raw_v)

    demo.load(on_load, [ui.collapse, ui.whole, ui.raw], rows.widgets(ui))
