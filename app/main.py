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

from engine.constraint import Constraint, parse_schema, schema_to_regex
from engine.decoding.decoder import GenerateRequest
from engine.decoding.trace import validate_trace
from engine.errors import CfsmError
from engine.regex.dfa import validate_regex
from viz.panels import stat_cards, token_strip
from viz.plots import timeline
from viz.step_bundle import empty_view, head_html, step_view_html

from .layout import (
    CUSTOM,
    NO_RUN,
    Compare,
    Doctor,
    Playground,
    compare_tab,
    doctor_tab,
    playground_tab,
)
from .presets import presets
from .state import DECODE_SLOTS, EngineHub, RunHandle, check_page_model

BACKENDS = ["fsm", "outlines", "xgrammar", "llguidance"]
MODES = ["jump", "masked", "free"]
WS = ["compact", "spaced", "flexible"]
KINDS = ["regex", "schema", "grammar"]
MAX_UPLOAD_BYTES = 8 * 1024 * 1024
STREAM_EVERY_S = 0.25

# The step view carries its data in an inert <script type="application/json">, read by the
# page's script (viz/static/step_view.js); Gradio warns about any <script> in gr.HTML.
warnings.filterwarnings("ignore", message="A `<script>` tag was found in the content of a `gr.HTML`")

APP_CSS = """
.cfsm-error{color:#b91c1c;font-weight:600;}
"""


def _msg(exc: BaseException) -> str:
    if isinstance(exc, CfsmError):
        return f'<div class="cfsm-error" id="error-box">\u26a0 {html.escape(exc.kind)}: {html.escape(exc.message)}</div>'
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return f'<div class="cfsm-error" id="error-box">\u26a0 internal error: {html.escape(text)}</div>'


def make_constraint(kind: str, rx: str, sch: str, gram: str, ws: str, lenient: bool = False,
                    spec: bool = False) -> Constraint:
    text = {"regex": rx, "schema": sch, "grammar": gram}.get(kind, "")
    if not (text or "").strip():
        raise CfsmError("invalid_input", f"the {kind} is empty")
    return Constraint(kind, text, ws, bool(lenient) and kind == "schema", bool(spec) and kind == "schema")


def live_check(kind: str, text: str, ws: str, backend: str = "xgrammar") -> str:
    """Validation while typing, in the engine's words (cheap checks only: no compile
    against the vocabulary)."""
    if not (text or "").strip():
        return ""
    try:
        if kind == "grammar":
            from engine.analysis.check import check_grammar

            check_grammar(text, backend if backend in ("xgrammar", "llguidance") else "xgrammar")
            if backend not in ("xgrammar", "llguidance"):
                return (f'<div class="cfsm-muted">valid EBNF; the {html.escape(backend)} backend takes no grammars '
                        "\u2014 choose xgrammar (EBNF) or llguidance (Lark)</div>")
        elif kind == "regex":
            validate_regex(text)
        elif kind == "schema":
            parse_schema(text)
            try:
                schema_to_regex(text, ws)
            except CfsmError as exc:
                return f'<div class="cfsm-muted">valid schema; the FSM view is unavailable ({exc.message}) \u2014 tick Lenient, or use xgrammar or llguidance</div>'
        return '<div class="cfsm-muted" style="color:#15803d">\u2713 looks valid</div>'
    except CfsmError as exc:
        return _msg(exc)


def scrub_slider(n_steps: int) -> gr.Slider:
    """The scrubber over a run's positions: steps 0..n-1, then n for the end. A run with
    no step gets 0..1 locked at 0 (Gradio refuses a 0..0 slider), which shows the end."""
    return gr.Slider(minimum=0, maximum=max(1, n_steps), value=0, step=1, interactive=n_steps > 0)


def summary_md(trace: dict) -> str:
    t = trace["totals"]
    ideal = trace.get("ideal") or {}
    parts = [
        f"**{trace['mode']}** with **{trace.get('backend') or '-'}** \u00b7 {t['output_tokens']} tokens \u00b7 "
        f"{t['forward_passes']} forward passes \u00b7 {t['wall_s']} s \u00b7 {t['tokens_per_s']} tok/s \u00b7 "
        f"{t['jumps']} jumps ({t['jumped_chars']} chars) \u00b7 finished: {t['finished']} ({t['reason']})"
    ]
    valid, why = trace.get("valid"), trace.get("validation") or ""
    if valid is not None or why:
        mark = {True: "\u2713 valid", False: "\u2717 invalid"}.get(valid, "? not checked")  # glyphs every font has
        parts.append(f"**{mark}**: {html.escape(str(why))}")
    for w in trace.get("warnings") or []:
        parts.append(f"**\u26a0 warning**: {html.escape(str(w))}")
    if ((trace.get("request") or {}).get("constraint") or {}).get("spec"):
        parts.append("Spec reading: objects accepted unlisted keys, integers could be written `1.0`.")
    if ideal:
        parts.append(f"Ideal for this output: {ideal['ideal_forward_passes']} passes ({ideal['ideal_reduction']}x fewer than one per token).")
    return "  \n".join(parts)


def strings_checker(hub: EngineHub):
    """The Test strings panel's handler: each line checked with the chosen backend."""

    def do_test_strings(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v, backend_v, model_t, lines):
        from engine.analysis.check import check_text
        from viz.highlight import test_strings_html

        try:
            c = make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v)
            eng = hub.get(check_page_model(model_t))
            res = eng.compile(c, backend_v)
            texts = [t for t in (lines or "").split("\n") if t != ""][:50]
            return test_strings_html([{"text": t, **check_text(res.compiled, res.dfa, eng.ctx, t)} for t in texts])
        except BaseException as exc:  # noqa: BLE001 - one line, the app keeps serving
            return _msg(exc)

    return do_test_strings


RUN_OUTPUTS = ("trace", "stop", "error", "summary", "cards", "timeline", "scrub", "permalink", "dl", "view", "live")


class RunOutputs:
    """One row of the run handler's outputs, every other output left as it is."""

    def __init__(self) -> None:
        self.row = [gr.skip()] * len(RUN_OUTPUTS)

    def set(self, **kw) -> list:
        row = list(self.row)
        for k, v in kw.items():
            row[RUN_OUTPUTS.index(k)] = v
        return row


def finished_run(trace: dict, collapse: bool, whole: bool) -> dict:
    """Every output a finished (or uploaded) run updates."""
    return dict(trace=trace, error="", summary=summary_md(trace), cards=stat_cards(trace["totals"]),
                timeline=timeline(trace), scrub=scrub_slider(len(trace["steps"])), view=step_view_html(trace, collapse, whole),
                live="")


def live_update(latest: dict) -> dict:
    """What the page shows while a run streams: its tokens and running figures."""
    tokens = [{"id": t, "text": x, "origin": o, "step": s} for t, x, o, s in latest["tokens"]]
    el = max(1e-6, latest["elapsed_s"])
    totals = {"output_tokens": len(tokens), "forward_passes": latest["forward_passes"],
              "tokens_per_s": round(len(tokens) / el, 1), "jumped_tokens": sum(1 for t in tokens if t["origin"] == "jump")}
    return dict(live=token_strip({"tokens": tokens, "steps": []}), cards=stat_cards(totals),
                summary=f"Decoding \u2026 step {latest['step']['index']} \u00b7 {len(tokens)} tokens \u00b7 "
                        f"{latest['forward_passes']} forward passes \u00b7 {latest['jumps']} jumps")


def run_streamer(hub: EngineHub):
    """The Run button's handler: compile (with progress), decode in a worker thread while
    streaming tokens, then the step view. Errors become one line; the app keeps serving."""

    def do_run(kind, rx_t, sch_t, gram_t, ws_v, prompt_t, model_t, backend_v, mode_v, max_v, temp_v, top_v, seed_v,
               collapse_v, whole_v, lenient_v=False, spec_v=False, prev_trace=None):
        handle = RunHandle()
        out = RunOutputs()
        try:
            constraint = None if mode_v == "free" else make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v)
            req = GenerateRequest(prompt=prompt_t or "", constraint=constraint, mode=mode_v, backend=backend_v,
                                  max_new_tokens=int(max_v), temperature=float(temp_v), top_p=float(top_v),
                                  seed=int(seed_v or 0))
            req.validate()
            yield out.set(stop=handle, error="", summary="Loading the model \u2026", live="",
                          view=empty_view("Decoding \u2026 the step view of this run appears when it ends."))
            eng = hub.get(check_page_model(model_t))
            if constraint is not None:
                yield from _compile_progress(eng, constraint, backend_v, handle, out)
            handle.set_phase("decoding")
            trace = yield from _decode_streaming(eng, req, handle, out)
            link = permalink_md(kind, {"regex": rx_t, "schema": sch_t, "grammar": gram_t}[kind], ws_v, prompt_t, model_t,
                                backend_v, mode_v, max_v, temp_v, seed_v)
            yield out.set(permalink=link, dl=write_trace_file(trace), **finished_run(trace, collapse_v, whole_v))
        except GeneratorExit:
            handle.event.set()
            raise
        except BaseException as exc:  # noqa: BLE001 - the page shows one line and keeps serving
            handle.event.set()
            # the previous run's view comes back (the click dimmed it): a failed run loses nothing
            yield out.set(error=_msg(exc), summary="", live="",
                          view=step_view_html(prev_trace, collapse_v, whole_v) if prev_trace else empty_view(NO_RUN))

    return do_run


def _compile_progress(eng, constraint: Constraint, backend: str, handle: RunHandle, out: RunOutputs):
    handle.set_phase("compiling", f"the {constraint.kind} for {backend}")
    fut = eng.cache.submit(constraint, backend)
    t0 = time.time()
    while not fut.done():
        yield out.set(summary=f"Compiling the {constraint.kind} for {backend} \u2026 {time.time() - t0:.1f} s")
        time.sleep(0.3)
    eng.cache.get(constraint, backend)  # raises the compile error, if any


def _decode_streaming(eng, req: GenerateRequest, handle: RunHandle, out: RunOutputs):
    events: queue.Queue = queue.Queue()
    box: dict = {}

    def work():
        try:
            box["trace"] = eng.generate(req, on_event=lambda k, d: events.put((k, d)), should_stop=handle.event.is_set)
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
        if k == "step":
            latest = d
        if latest is not None and time.time() - last > STREAM_EVERY_S:
            last = time.time()
            yield out.set(**live_update(latest))
    handle.set_phase("done")
    if "error" in box:
        raise box["error"]
    return box["trace"]


def restore_inputs(trace: dict) -> list:
    """An uploaded trace's inputs, for the input widgets (kind, tab, regex, schema,
    grammar, prompt, whitespace, lenient, spec, backend, mode, max tokens, temperature, top-p, seed)."""
    r = trace.get("request") or {}
    c = r.get("constraint") or {}
    k = c.get("kind") if c.get("kind") in KINDS else None
    text = c.get("text", "")
    keep = gr.skip()
    return [
        k or keep, gr.Tabs(selected=k) if k else keep,
        text if k == "regex" else keep, text if k == "schema" else keep, text if k == "grammar" else keep,
        r.get("prompt", keep), c.get("whitespace") if c.get("whitespace") in WS else keep, bool(c.get("lenient", False)),
        bool(c.get("spec", False)),
        trace.get("backend") if trace.get("backend") in BACKENDS else keep,
        trace.get("mode") if trace.get("mode") in MODES else keep,
        _num(r.get("max_new_tokens"), 1, 512, keep), _num(r.get("temperature"), 0, 2, keep),
        _num(r.get("top_p"), 0.05, 1, keep), _num(r.get("seed"), 0, 2**31, keep),
    ]


def compare_md(a: dict, b: dict, cfg_a: str, cfg_b: str, temperature: float, seed: int) -> str:
    """A vs B with the caveats a reader needs: unfinished runs, different outputs, sampling."""
    ta, tb = a["totals"], b["totals"]
    speed = ta["wall_s"] / max(1e-9, tb["wall_s"])
    rows = [
        "| | A | B |", "|---|---|---|",
        f"| config | {cfg_a} | {cfg_b} |",
        f"| output | `{a['text'][:80]!r}` | `{b['text'][:80]!r}` |",
        f"| tokens | {ta['output_tokens']} | {tb['output_tokens']} |",
        f"| forward passes | {ta['forward_passes']} | {tb['forward_passes']} |",
        f"| wall time | {ta['wall_s']} s | {tb['wall_s']} s |",
        f"| finished | {ta['finished']} ({ta['reason']}) | {tb['finished']} ({tb['reason']}) |", "",
    ]
    caveats = [f"{n} did not finish ({t['reason']})" for n, t in (("A", ta), ("B", tb)) if not t["finished"]]
    if a["text"] != b["text"]:
        caveats.append("the outputs differ, so the runs did different work")
    if temperature > 0:
        caveats.append(f"both were sampled (temperature {temperature:g}, seed {seed}); another seed gives other outputs")
    verdict = (f"B is {speed:.2f}x {'faster' if speed >= 1 else 'slower'} than A in wall time, with "
               f"{ta['forward_passes'] / max(1, tb['forward_passes']):.2f}x fewer forward passes")
    if caveats:
        rows.append(f"**{verdict}, but {'; '.join(caveats)}: read the ratio with care.**")
    else:
        rows.append(f"**{verdict}.**")
    return "\n".join(rows)


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
        _wire_api(hub)
    return demo


def _wire_inputs(ui: Playground, P: dict, hub: EngineHub) -> None:
    ui.status_timer.tick(hub.status, None, ui.status, show_progress="hidden", queue=False)
    for box, err, k in ((ui.rx, ui.rx_err, "regex"), (ui.sch, ui.sch_err, "schema"), (ui.gram, ui.gram_err, "grammar")):
        box.change(lambda text, w, b, k=k: live_check(k, text, w, b), [box, ui.ws, ui.backend], err,
                   show_progress="hidden", queue=False, trigger_mode="always_last")  # no backlog while typing
        box.input(lambda: CUSTOM, None, ui.preset, queue=False)
    ui.backend.change(lambda text, w, b: live_check("grammar", text, w, b), [ui.gram, ui.ws, ui.backend], ui.gram_err,
                      show_progress="hidden", queue=False)
    ui.prompt.input(lambda: CUSTOM, None, ui.preset, queue=False)
    ui.tab_rx.select(lambda: "regex", None, ui.kind, queue=False)
    ui.tab_sch.select(lambda: "schema", None, ui.kind, queue=False)
    ui.tab_g.select(lambda: "grammar", None, ui.kind, queue=False)

    def on_preset(name):
        p = P.get(name)
        if not p:
            return [gr.skip()] * 9
        k = p["kind"]
        return [k, gr.Tabs(selected=k), p["text"] if k == "regex" else gr.skip(), p["text"] if k == "schema" else gr.skip(),
                p["text"] if k == "grammar" else gr.skip(), p["prompt"], p["whitespace"], p["mode"], p.get("backend", "fsm")]

    ui.preset.input(on_preset, ui.preset, [ui.kind, ui.ctabs, ui.rx, ui.sch, ui.gram, ui.prompt, ui.ws, ui.mode, ui.backend],
                    queue=False)
    ui.ts_btn.click(strings_checker(hub), [ui.kind, ui.rx, ui.sch, ui.gram, ui.ws, ui.lenient, ui.spec, ui.backend, ui.model,
                                              ui.ts_text], ui.ts_out, concurrency_limit=DECODE_SLOTS, concurrency_id="decode")


def _wire_run(ui: Playground, hub: EngineHub) -> None:
    outputs = [ui.trace, ui.stop, ui.error, ui.summary, ui.cards, ui.timeline, ui.scrub, ui.permalink, ui.dl_trace,
               ui.view, ui.live]
    ui.run_btn.click(None, js="() => { window.cfsm && window.cfsm.stale(); }", queue=False)
    run_evt = ui.run_btn.click(
        run_streamer(hub),
        [ui.kind, ui.rx, ui.sch, ui.gram, ui.ws, ui.prompt, ui.model, ui.backend, ui.mode, ui.max_new, ui.temp, ui.top_p,
         ui.seed, ui.collapse, ui.whole, ui.lenient, ui.spec, ui.trace],
        outputs, concurrency_limit=DECODE_SLOTS, concurrency_id="decode",
    )
    def on_stop(h, trace, collapse_v, whole_v):
        """Cancel the run and say what was stopped; the previous run's view comes back (the
        click dimmed it and the run had replaced it with a placeholder)."""
        if h is None or h.phase == "done":
            return (h.stop() if h is not None else "") or gr.skip(), gr.skip()
        return h.stop() or gr.skip(), step_view_html(trace, collapse_v, whole_v) if trace else empty_view(NO_RUN)

    ui.stop_btn.click(on_stop, [ui.stop, ui.trace, ui.collapse, ui.whole], [ui.stop_msg, ui.view],
                      cancels=[run_evt], queue=False)
    ui.run_btn.click(lambda: "", None, ui.stop_msg, queue=False)
    # scrubbing and playing happen in the browser (viz/static/step_view.js): no server round trip
    ui.scrub.change(None, [ui.scrub], None, js="(k) => { window.cfsm && window.cfsm.show(k); }")
    ui.play.click(None, js="() => { window.cfsm && window.cfsm.play(); }")
    ui.pause.click(None, js="() => { window.cfsm && window.cfsm.pause(); }")

    def relayout(trace, collapse_v, whole_v):
        return step_view_html(trace, collapse_v, whole_v) if trace else gr.skip()

    for box in (ui.collapse, ui.whole):
        box.input(relayout, [ui.trace, ui.collapse, ui.whole], ui.view, show_progress="hidden")

    def on_upload(f, collapse_v, whole_v):
        n_inputs = 15
        try:
            if f is None:
                return [gr.skip()] * (len(RUN_OUTPUTS) + 2 + n_inputs)
            p = Path(f if isinstance(f, str) else f.name)
            if p.stat().st_size > MAX_UPLOAD_BYTES:
                raise CfsmError("input_too_large", f"trace file is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
            trace = validate_trace(p.read_text(encoding="utf-8"))
            return RunOutputs().set(**finished_run(trace, collapse_v, whole_v)) + [None, ""] + restore_inputs(trace)
        except BaseException as exc:  # noqa: BLE001
            return [gr.skip()] * len(RUN_OUTPUTS) + [None, _msg(exc)] + [gr.skip()] * n_inputs

    ui.up_trace.upload(on_upload, [ui.up_trace, ui.collapse, ui.whole],
                       outputs + [ui.up_trace, ui.up_err, ui.kind, ui.ctabs, ui.rx, ui.sch, ui.gram, ui.prompt, ui.ws, ui.lenient, ui.spec,
                                  ui.backend, ui.mode, ui.max_new, ui.temp, ui.top_p, ui.seed])


def _wire_compare(ui: Playground, cmp: Compare, hub: EngineHub) -> None:
    def do_compare(kind, rx_t, sch_t, gram_t, prompt_t, model_t, max_v, temp_v, top_v, seed_v, ma, ba, wa, mb, bb, wb):
        try:
            eng = hub.get(check_page_model(model_t))
            traces = []
            for m, b, w in ((ma, ba, wa), (mb, bb, wb)):
                c = None if m == "free" else make_constraint(kind, rx_t, sch_t, gram_t, w)
                traces.append(eng.generate(GenerateRequest(prompt=prompt_t, constraint=c, mode=m, backend=b,
                                                           max_new_tokens=int(max_v), temperature=float(temp_v),
                                                           top_p=float(top_v), seed=int(seed_v or 0), trace_detail=False)))
            a, b = traces
            md = compare_md(a, b, f"{ma} / {ba} / {wa}", f"{mb} / {bb} / {wb}", float(temp_v), int(seed_v or 0))
            return "", md, token_strip(a), token_strip(b)
        except BaseException as exc:  # noqa: BLE001
            return _msg(exc), "", "", ""

    cmp.btn.click(do_compare, [ui.kind, ui.rx, ui.sch, ui.gram, ui.prompt, ui.model, ui.max_new, ui.temp, ui.top_p, ui.seed,
                               cmp.mode_a, cmp.backend_a, cmp.ws_a, cmp.mode_b, cmp.backend_b, cmp.ws_b],
                  [cmp.err, cmp.table, cmp.strip_a, cmp.strip_b], concurrency_limit=DECODE_SLOTS, concurrency_id="decode")


def _wire_doctor(ui: Playground, doc: Doctor, hub: EngineHub) -> None:
    def do_doctor(kind, rx_t, sch_t, gram_t, ws_v, prompt_t, model_t, n, with_model, lenient_v=False, spec_v=False):
        from engine.analysis.doctor import diagnose

        try:
            c = make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, spec_v)
            if c.kind == "grammar":
                raise CfsmError("unsupported_feature", "the doctor needs a regex or a JSON schema: a grammar has "
                                "no finite automaton to analyse")
            eng = hub.get(check_page_model(model_t))
            samples = None
            if with_model:
                samples = []
                for i in range(int(n)):
                    tr = eng.generate(GenerateRequest(prompt=prompt_t, constraint=c, mode="jump", temperature=0 if i == 0 else 0.8,
                                                      seed=i, max_new_tokens=256, trace_detail=False))
                    if tr["totals"]["finished"]:
                        samples.append(tr["text"])
            dfa = eng.compile(c, "fsm").dfa
            rep = diagnose(c, eng.ctx.tokenizer, eng.ctx.vocab.token_bytes, samples=samples, n=int(n), dfa=dfa)
            return "", doctor_md(rep, c.text), doctor_plot(rep)
        except BaseException as exc:  # noqa: BLE001
            return _msg(exc), "", None

    doc.btn.click(do_doctor, [ui.kind, ui.rx, ui.sch, ui.gram, ui.ws, ui.prompt, ui.model, doc.samples, doc.with_model,
                              ui.lenient, ui.spec],
                  [doc.err, doc.md, doc.plot], concurrency_limit=DECODE_SLOTS, concurrency_id="decode")


def _wire_load(ui: Playground, demo: gr.Blocks) -> None:
    def on_load(request: gr.Request):
        q = dict(request.query_params) if request is not None else {}
        if not q:
            return [gr.skip()] * 14
        k = q.get("kind", "regex") if q.get("kind") in KINDS else "regex"
        c = q.get("c", "")
        return [
            k, gr.Tabs(selected=k),
            c if k == "regex" else gr.skip(), c if k == "schema" else gr.skip(), c if k == "grammar" else gr.skip(),
            q.get("prompt", gr.skip()),
            q["ws"] if q.get("ws") in WS else gr.skip(),
            q["backend"] if q.get("backend") in BACKENDS else gr.skip(),
            q["mode"] if q.get("mode") in MODES else gr.skip(),
            _num(q.get("max"), 1, 512, gr.skip()), _num(q.get("temp"), 0, 2, gr.skip()),
            _num(q.get("seed"), 0, 2**31, gr.skip()),
            q.get("model", gr.skip()),
            CUSTOM,
        ]

    demo.load(on_load, None, [ui.kind, ui.ctabs, ui.rx, ui.sch, ui.gram, ui.prompt, ui.ws, ui.backend, ui.mode, ui.max_new,
                              ui.temp, ui.seed, ui.model, ui.preset], queue=False)


def _wire_api(hub: EngineHub) -> None:
    def api_compile(kind: str, constraint: str, whitespace: str = "compact", backend: str = "fsm",
                    lenient: bool = False, spec: bool = False) -> dict:
        """Compile a regex/schema/grammar; returns the automaton description (engine JSON)."""
        try:
            eng = hub.get()
            return eng.compile_report(make_constraint(kind, constraint, constraint, constraint, whitespace, lenient, spec),
                                      backend)
        except CfsmError as exc:
            raise gr.Error(f"{exc.kind}: {exc.message}") from None

    def api_run(prompt: str, kind: str, constraint: str, whitespace: str = "compact", backend: str = "fsm",
                mode: str = "jump", max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0,
                lenient: bool = False, spec: bool = False) -> dict:
        """Decode under a constraint; returns the engine's trace JSON."""
        try:
            eng = hub.get()
            c = None if mode == "free" else make_constraint(kind, constraint, constraint, constraint, whitespace, lenient, spec)
            return eng.generate(GenerateRequest(prompt=prompt, constraint=c, mode=mode, backend=backend,
                                                max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                                                seed=int(seed)))
        except CfsmError as exc:
            raise gr.Error(f"{exc.kind}: {exc.message}") from None

    gr.api(api_compile, api_name="compile", concurrency_limit=2)
    gr.api(api_run, api_name="run", concurrency_limit=DECODE_SLOTS, concurrency_id="decode")


def doctor_md(rep: dict, source: str = "") -> str:
    """The doctor's report; with the constraint's `source`, the node or regex span the top
    cause points at is shown highlighted."""
    f = rep["fsm"]
    out = [
        f"### Ideal forward-pass reduction: **{rep['ideal_reduction']}x**",
        f"{rep['total_tokens']} output tokens, {rep['model_tokens']} chosen by the model, over {rep['samples']['count']} "
        f"{rep['samples']['source']} samples. Compressed FSM: {f['num_states']} states, {f['jumpable_states']} jumpable "
        f"({f['jumpable_share']:.0%}), {f['num_chains']} chains, longest {f['longest_chain']} characters.",
        "", "| share | cause | where | suggestion |", "|---:|---|---|---|",
    ]
    for c in rep["causes"]:
        where = ", ".join(f"`{p}`" for p in c["places"][:3])
        out.append(f"| {c['share']:.0%} | **{c['title']}**: {c['why']} | {where} | {c['suggestion']} |")
    b = rep["token_boundaries"]
    out.append(f"\n{b['share']:.0%} of those tokens also carry forced text ({b['title'].lower()}): {b['suggestion']}")
    if rep["what_if"]:
        out += ["", "#### What if", "| change | before | after | verdict |", "|---|---:|---:|---|"]
        for w in rep["what_if"]:
            if "error" in w:
                out.append(f"| {w['change']} | | {w['error']} | |")
            else:
                out.append(f"| {w['change']} | {w['ideal_reduction_before']}x | **{w['ideal_reduction_after']}x** | "
                           f"{w['advice']} |")
    top = next((c for c in rep["causes"] if c["places"] and c["places"][0] not in ("end", "/")), None)
    if top is not None and source:
        from viz.highlight import regex_span_html, schema_node_html

        place = top["places"][0]
        mark = schema_node_html(source, place) if rep["constraint"]["kind"] == "schema" else regex_span_html(source, place)
        if mark:
            out += ["", f"#### Where \u201c{top['title']}\u201d points: `{place}`", mark]
    if rep["samples"]["texts"]:
        out += ["", "Sample: `" + rep["samples"]["texts"][0][:200].replace("`", "'").replace("\n", "\u21b5") + "`"]
    return "\n".join(out)


def doctor_plot(rep: dict):
    import plotly.graph_objects as go

    cs = rep["causes"]
    fig = go.Figure(go.Bar(x=[c["share"] * 100 for c in cs], y=[c["title"] for c in cs], orientation="h", marker_color="#2563eb"))
    fig.update_layout(height=80 + 40 * len(cs), margin=dict(l=10, r=10, t=30, b=30), xaxis_title="% of model-chosen tokens",
                      yaxis=dict(autorange="reversed"), title="Where the forward passes go")
    return fig


def _num(v, lo, hi, default):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return default
    return min(hi, max(lo, x))


def permalink_md(kind, text, ws, prompt, model, backend, mode, max_v, temp, seed) -> str:
    q = {"kind": kind, "c": text, "ws": ws, "prompt": prompt, "backend": backend, "mode": mode,
         "max": int(max_v), "temp": temp, "seed": int(seed or 0)}
    if model and model != "embedded":
        q["model"] = model
    url = "?" + urllib.parse.urlencode(q)
    if len(url) > 8000:
        return "Permalink unavailable: the inputs are too long for a URL (download the trace instead)."
    return f"[Permalink to these inputs]({url})"


def write_trace_file(trace: dict) -> str:
    path = Path(tempfile.mkdtemp(prefix="cfsm-")) / "trace.json"
    path.write_text(json.dumps(trace, ensure_ascii=False), encoding="utf-8")
    return str(path)


def serve(host: str = "127.0.0.1", port: int = 7860, model: str | None = None, device: str | None = None,
          prevent_thread_lock: bool = False, max_states: int | None = None, compile_timeout_s: float | None = None):
    hub = EngineHub(model, device, max_states=max_states, compile_timeout_s=compile_timeout_s)
    hub.start()
    demo = build_demo(hub)
    demo.queue(default_concurrency_limit=2, max_size=32)
    demo.launch(server_name=host, server_port=port, css=APP_CSS, head=head_html(), show_error=False,
                prevent_thread_lock=prevent_thread_lock, quiet=True, ssr_mode=False)
    return demo, hub
