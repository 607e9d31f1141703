"""The Gradio playground: wiring only. Engine work lives in engine/, pictures in viz/."""

from __future__ import annotations

import html
import json
import queue
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import gradio as gr

from engine.constraint import Constraint, parse_schema, schema_to_regex
from engine.decode import GenerateRequest
from engine.errors import CfsmError
from engine.regex_dfa import validate_regex
from engine.trace import validate_trace
from viz.graph import svg_document
from viz.panels import CSS as PANEL_CSS
from viz.panels import token_strip
from viz.plots import gauges, timeline
from viz.step_view import graph_svg, render_step

from .presets import presets
from .state import DECODE_SLOTS, EngineHub, RunHandle, check_page_model

BACKENDS = ["fsm", "outlines", "xgrammar", "llguidance"]
MODES = ["jump", "masked", "free"]
WS = ["compact", "spaced", "flexible"]
KINDS = ["regex", "schema", "grammar"]
MAX_UPLOAD_BYTES = 8 * 1024 * 1024
STREAM_EVERY_S = 0.25

APP_CSS = """
.cfsm-error{color:#b91c1c;font-weight:600;}
#caption{font-size:15px;background:#f8fafc;border-left:4px solid #2563eb;padding:6px 10px;}
"""


def _msg(exc: BaseException) -> str:
    if isinstance(exc, CfsmError):
        return f'<div class="cfsm-error" id="error-box">\u26a0 {exc.kind}: {exc.message}</div>'
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return f'<div class="cfsm-error" id="error-box">\u26a0 internal error: {text}</div>'


def make_constraint(kind: str, rx: str, sch: str, gram: str, ws: str, lenient: bool = False) -> Constraint:
    text = {"regex": rx, "schema": sch, "grammar": gram}.get(kind, "")
    if not (text or "").strip():
        raise CfsmError("invalid_input", f"the {kind} is empty")
    return Constraint(kind, text, ws, bool(lenient) and kind == "schema")


def live_check(kind: str, text: str, ws: str) -> str:
    """Validation while typing, in the engine's words (cheap checks only)."""
    if not (text or "").strip():
        return ""
    try:
        if kind == "regex":
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
    """The step scrubber for a run of n steps (Gradio refuses a 0..0 slider: a one-step
    run gets 0..1, locked at step 0)."""
    return gr.Slider(minimum=0, maximum=max(1, n_steps - 1), value=0, step=1, interactive=n_steps > 1)


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
    if ideal:
        parts.append(f"Ideal for this output: {ideal['ideal_forward_passes']} passes ({ideal['ideal_reduction']}x fewer than one per token).")
    return "  \n".join(parts)


def step_outputs(trace: dict | None, step: int, collapse: bool, whole: bool):
    if not trace:
        return ["", "Run something to see its steps.", None, None, "", "", ""]
    v = render_step(trace, int(step) if step is not None else None, collapse, whole)
    return [v["graph"], v["caption"], v["mask"], v["topk"], v["allowed"], v["strip"], v["jump"]]


def strings_checker(hub: EngineHub):
    """The Test strings panel's handler: each line checked with the chosen backend."""

    def do_test_strings(kind, rx_t, sch_t, gram_t, ws_v, lenient_v, backend_v, model_t, lines):
        from engine.check import check_text
        from viz.highlight import test_strings_html

        try:
            c = make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v)
            eng = hub.get(check_page_model(model_t))
            res = eng.compile(c, backend_v)
            texts = [t for t in (lines or "").split("\n") if t != ""][:50]
            return test_strings_html([{"text": t, **check_text(res.compiled, res.dfa, eng.ctx, t)} for t in texts])
        except BaseException as exc:  # noqa: BLE001 - one line, the app keeps serving
            return _msg(exc)

    return do_test_strings


def build_demo(hub: EngineHub) -> gr.Blocks:
    P = presets()
    first = "SGLang character (regex)"

    with gr.Blocks(title="cfsm-lab: compressed-FSM constrained decoding") as demo:
        trace_state = gr.State(None)
        stop_state = gr.State(None)
        kind_state = gr.State(P[first]["kind"])
        gr.Markdown("# cfsm-lab \u2014 constrained decoding with a compressed FSM and jump-forward")
        status = gr.Markdown(hub.status(), elem_id="model-status")
        status_timer = gr.Timer(1.0)

        with gr.Tab("Playground", id="playground"):
            with gr.Row():
                with gr.Column(scale=3):
                    preset = gr.Dropdown(list(P), value=first, label="Preset", elem_id="preset")
                    with gr.Tabs(selected="regex") as ctabs:
                        with gr.Tab("Regex", id="regex") as tab_rx:
                            rx = gr.Textbox(P[first]["text"], label="Regex (full match, Python syntax)", lines=4, elem_id="regex-input")
                            rx_err = gr.HTML("", elem_id="regex-error")
                        with gr.Tab("JSON schema", id="schema") as tab_sch:
                            sch = gr.Code(P["Person (JSON schema)"]["text"],
                                          language="json", label="JSON schema", elem_id="schema-input")
                            sch_err = gr.HTML("", elem_id="schema-error")
                        with gr.Tab("Grammar", id="grammar") as tab_g:
                            gram = gr.Textbox(P["Colour (EBNF grammar)"]["text"], lines=4, elem_id="grammar-input",
                                              label="Grammar: EBNF for xgrammar, Lark for llguidance")
                            gram_err = gr.HTML("", elem_id="grammar-error")
                    prompt = gr.Textbox(P[first]["prompt"], label="Prompt (chat template applied)", lines=3, elem_id="prompt")
                    with gr.Accordion("Test strings", open=False, elem_id="test-strings"):
                        ts_text = gr.Textbox("", lines=3, elem_id="test-strings-input",
                                             label="One text per line: does the constraint accept it (with the chosen backend)?")
                        ts_btn = gr.Button("Check", size="sm", elem_id="test-strings-run")
                        ts_out = gr.HTML("", elem_id="test-strings-output")
                with gr.Column(scale=2):
                    model = gr.Textbox("embedded", label="Model: 'embedded' (SmolLM2-135M-Instruct), an HF id from the local cache, or a folder in the models dir", elem_id="model")
                    with gr.Row():
                        backend = gr.Dropdown(BACKENDS, value="fsm", label="Backend", elem_id="backend")
                        mode = gr.Radio(MODES, value="jump", label="Mode", elem_id="mode")
                    with gr.Row():
                        ws = gr.Radio(WS, value="compact", label="JSON whitespace policy", elem_id="whitespace")
                        lenient = gr.Checkbox(False, label="Lenient: compile schema keywords the backend cannot "
                                              "enforce, with a warning", elem_id="lenient")
                    with gr.Row():
                        max_new = gr.Slider(1, 512, value=200, step=1, label="Max new tokens")
                        temp = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                    with gr.Row():
                        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
                        seed = gr.Number(0, precision=0, label="Seed")
                    with gr.Row():
                        run_btn = gr.Button("Run", variant="primary", elem_id="run")
                        stop_btn = gr.Button("Stop", elem_id="stop")
            error_box = gr.HTML("", elem_id="run-error")
            stop_msg = gr.Markdown("", elem_id="stop-message")
            summary = gr.Markdown("", elem_id="summary")
            gauge_plot = gr.Plot(label="Gauges", elem_id="gauges")
            with gr.Row():
                scrub = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="scrubber")
                play = gr.Button("\u25b6 Play", size="sm", elem_id="play")
                pause = gr.Button("\u23f8 Pause", size="sm", elem_id="pause")
                collapse = gr.Checkbox(True, label="Collapse chains", elem_id="collapse")
                whole = gr.Checkbox(False, label="Whole automaton", elem_id="whole")
            play_timer = gr.Timer(0.8, active=False)
            caption = gr.Markdown("", elem_id="caption")
            with gr.Row():
                with gr.Column(scale=3):
                    graph = gr.HTML("", label="FSM", elem_id="graph-panel")
                with gr.Column(scale=2):
                    jump_html = gr.HTML("", elem_id="jump-html")
                    allowed_html = gr.HTML("", elem_id="allowed-html")
            strip = gr.HTML("", elem_id="strip-html")
            with gr.Row():
                mask_plot = gr.Plot(label="Mask", elem_id="mask-plot")
                topk_plot = gr.Plot(label="Top-k", elem_id="topk-plot")
            timeline_plot = gr.Plot(label="Timeline", elem_id="timeline-plot")
            with gr.Accordion("Share and export", open=False):
                with gr.Row():
                    dl_trace = gr.File(label="Trace JSON", elem_id="dl-trace")
                    dl_svg = gr.File(label="FSM SVG", elem_id="dl-svg")
                    up_trace = gr.File(label="Upload a trace to view it", file_types=[".json"], elem_id="up-trace")
                permalink = gr.Markdown("", elem_id="permalink")

        ts_btn.click(strings_checker(hub), [kind_state, rx, sch, gram, ws, lenient, backend, model, ts_text], ts_out,
                     concurrency_limit=DECODE_SLOTS, concurrency_id="decode")

        with gr.Tab("Compare", id="compare"):
            gr.Markdown("The same prompt and constraint (from the Playground tab) in two configurations, side by side.")
            with gr.Row():
                with gr.Column():
                    mode_a = gr.Radio(MODES, value="masked", label="A: mode")
                    backend_a = gr.Dropdown(BACKENDS, value="fsm", label="A: backend")
                    ws_a = gr.Radio(WS, value="compact", label="A: whitespace")
                with gr.Column():
                    mode_b = gr.Radio(MODES, value="jump", label="B: mode")
                    backend_b = gr.Dropdown(BACKENDS, value="fsm", label="B: backend")
                    ws_b = gr.Radio(WS, value="compact", label="B: whitespace")
            cmp_btn = gr.Button("Compare", variant="primary", elem_id="compare-run")
            cmp_err = gr.HTML("")
            cmp_table = gr.Markdown("", elem_id="compare-table")
            with gr.Row():
                strip_a = gr.HTML("", elem_id="strip-a")
                strip_b = gr.HTML("", elem_id="strip-b")

        with gr.Tab("Doctor", id="doctor"):
            gr.Markdown("Why does this constraint (from the Playground tab) get a poor jump-forward speedup, where, and "
                        "what would change it. Samples are synthesized from the automaton, or generated by the model "
                        "from the Playground prompt.")
            with gr.Row():
                doc_samples = gr.Slider(1, 20, value=6, step=1, label="Samples")
                doc_model = gr.Checkbox(False, label="Generate samples with the model (slower)")
                doc_btn = gr.Button("Diagnose", variant="primary", elem_id="doctor-run")
            doc_err = gr.HTML("")
            doc_md = gr.Markdown("", elem_id="doctor-report")
            doc_plot = gr.Plot(label="Where the forward passes go", elem_id="doctor-plot")

        # ------------------------------------------------------------ wiring
        status_timer.tick(lambda: hub.status(), None, status, show_progress="hidden", queue=False)

        for box, err, k in ((rx, rx_err, "regex"), (sch, sch_err, "schema"), (gram, gram_err, "grammar")):
            box.change(lambda text, w, k=k: live_check(k, text, w), [box, ws], err, show_progress="hidden", queue=False)
        tab_rx.select(lambda: "regex", None, kind_state, queue=False)
        tab_sch.select(lambda: "schema", None, kind_state, queue=False)
        tab_g.select(lambda: "grammar", None, kind_state, queue=False)

        def on_preset(name):
            p = P.get(name)
            if not p:
                return [gr.skip()] * 9
            k = p["kind"]
            return [
                k,
                gr.Tabs(selected=k),
                p["text"] if k == "regex" else gr.skip(),
                p["text"] if k == "schema" else gr.skip(),
                p["text"] if k == "grammar" else gr.skip(),
                p["prompt"],
                p["whitespace"],
                p["mode"],
                p.get("backend", "fsm"),
            ]

        preset.input(on_preset, preset, [kind_state, ctabs, rx, sch, gram, prompt, ws, mode, backend], queue=False)

        view_outputs = [graph, caption, mask_plot, topk_plot, allowed_html, strip, jump_html]

        def do_run(kind, rx_t, sch_t, gram_t, ws_v, prompt_t, model_t, backend_v, mode_v, max_v, temp_v, top_v, seed_v,
                   collapse_v, whole_v, lenient_v=False):
            handle = RunHandle()
            stop = handle.event
            n_out = 9 + len(view_outputs)
            skip = [gr.skip()] * n_out

            def out(**kw):
                row = list(skip)
                names = ["trace", "stop", "error", "summary", "gauges", "timeline", "scrub", "permalink", "dl"] + \
                        ["graph", "caption", "mask", "topk", "allowed", "strip", "jump"]
                for k, v in kw.items():
                    row[names.index(k)] = v
                return row

            try:
                constraint = None if mode_v == "free" else make_constraint(kind, rx_t, sch_t, gram_t, ws_v, lenient_v)
                name = check_page_model(model_t)
                req = GenerateRequest(prompt=prompt_t or "", constraint=constraint, mode=mode_v, backend=backend_v,
                                      max_new_tokens=int(max_v), temperature=float(temp_v), top_p=float(top_v),
                                      seed=int(seed_v or 0))
                req.validate()
                yield out(stop=handle, error="", summary="Loading the model \u2026")
                eng = hub.get(name)
                if constraint is not None:
                    handle.set_phase("compiling", f"the {constraint.kind} for {backend_v}")
                    fut = eng.cache.submit(constraint, backend_v)
                    t0 = time.time()
                    while not fut.done():
                        yield out(summary=f"Compiling the {constraint.kind} for {backend_v} \u2026 {time.time() - t0:.1f} s")
                        time.sleep(0.3)
                    eng.cache.get(constraint, backend_v)  # raises the compile error, if any
                handle.set_phase("decoding")
                events: queue.Queue = queue.Queue()
                box: dict = {}

                def work():
                    try:
                        box["trace"] = eng.generate(req, on_event=lambda k, d: events.put((k, d)), should_stop=stop.is_set)
                    except BaseException as exc:  # noqa: BLE001 - shown in the page
                        box["error"] = exc
                    finally:
                        events.put(("done", None))

                threading.Thread(target=work, daemon=True).start()
                last = 0.0
                latest = None
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
                        partial = {"tokens": [{"id": t, "text": x, "origin": o, "step": s} for t, x, o, s in latest["tokens"]],
                                   "steps": []}
                        el = max(1e-6, latest["elapsed_s"])
                        live = {"totals": {"output_tokens": len(partial["tokens"]), "forward_passes": latest["forward_passes"],
                                           "tokens_per_s": round(len(partial["tokens"]) / el, 1),
                                           "jumped_tokens": sum(1 for t in partial["tokens"] if t["origin"] == "jump")}}
                        yield out(strip=token_strip(partial), gauges=gauges(live),
                                  summary=f"Decoding \u2026 step {latest['step']['index']} \u00b7 {len(partial['tokens'])} tokens \u00b7 "
                                          f"{latest['forward_passes']} forward passes \u00b7 {latest['jumps']} jumps")
                handle.set_phase("done")
                if "error" in box:
                    raise box["error"]
                trace = box["trace"]
                n = len(trace["steps"])
                link = permalink_md(kind, {"regex": rx_t, "schema": sch_t, "grammar": gram_t}[kind], ws_v, prompt_t, model_t,
                                    backend_v, mode_v, max_v, temp_v, seed_v)
                views = step_outputs(trace, 0, collapse_v, whole_v)
                yield out(trace=trace, error="", summary=summary_md(trace), gauges=gauges(trace), timeline=timeline(trace, 0),
                          scrub=scrub_slider(n), permalink=link,
                          dl=write_trace_file(trace),
                          **dict(zip(["graph", "caption", "mask", "topk", "allowed", "strip", "jump"], views, strict=True)))
            except GeneratorExit:
                stop.set()
                raise
            except BaseException as exc:  # noqa: BLE001 - the page shows one line and keeps serving
                stop.set()
                yield out(error=_msg(exc), summary="")

        run_evt = run_btn.click(
            do_run,
            [kind_state, rx, sch, gram, ws, prompt, model, backend, mode, max_new, temp, top_p, seed, collapse, whole, lenient],
            [trace_state, stop_state, error_box, summary, gauge_plot, timeline_plot, scrub, permalink, dl_trace] + view_outputs,
            concurrency_limit=DECODE_SLOTS, concurrency_id="decode",
        )
        # Stop's message has its own element: the cancelled run's outputs are restored on cancel
        stop_btn.click(lambda h: (h.stop() if h is not None else "") or gr.skip(), stop_state, stop_msg,
                       cancels=[run_evt], queue=False)
        run_btn.click(lambda: "", None, stop_msg, queue=False)

        def on_scrub(trace, step, collapse_v, whole_v):
            if not trace:
                return [gr.skip()] * (len(view_outputs) + 1)
            return step_outputs(trace, step, collapse_v, whole_v) + [timeline(trace, int(step))]

        for comp in (scrub, collapse, whole):
            comp.change(on_scrub, [trace_state, scrub, collapse, whole], view_outputs + [timeline_plot], show_progress="hidden")

        play.click(lambda: gr.Timer(active=True), None, play_timer, queue=False)
        pause.click(lambda: gr.Timer(active=False), None, play_timer, queue=False)

        def tick(trace, step):
            if not trace:
                return gr.skip(), gr.Timer(active=False)
            n = len(trace["steps"])
            nxt = int(step) + 1
            if nxt >= n:
                return gr.skip(), gr.Timer(active=False)
            return nxt, gr.skip()

        play_timer.tick(tick, [trace_state, scrub], [scrub, play_timer], show_progress="hidden")

        def on_svg(trace, step, collapse_v):
            if not trace or not trace.get("automaton"):
                return None
            html_ = graph_svg(trace, int(step), collapse_v)
            svg = html_[html_.index("<svg"): html_.rindex("</svg>") + 6]
            path = Path(tempfile.mkdtemp(prefix="cfsm-")) / "fsm.svg"
            path.write_text(svg_document(svg), encoding="utf-8")
            return str(path)

        scrub.release(on_svg, [trace_state, scrub, collapse], dl_svg, show_progress="hidden")
        run_evt.then(on_svg, [trace_state, scrub, collapse], dl_svg, show_progress="hidden")

        def on_upload(f, collapse_v, whole_v):
            try:
                if f is None:
                    return [gr.skip()] * (6 + len(view_outputs))
                p = Path(f if isinstance(f, str) else f.name)
                if p.stat().st_size > MAX_UPLOAD_BYTES:
                    raise CfsmError("input_too_large", f"trace file is larger than {MAX_UPLOAD_BYTES // 2**20} MB")
                trace = validate_trace(p.read_text(encoding="utf-8"))
                n = len(trace["steps"])
                return [trace, "", summary_md(trace), gauges(trace), timeline(trace, 0),
                        scrub_slider(n)] + step_outputs(trace, 0, collapse_v, whole_v)
            except BaseException as exc:  # noqa: BLE001
                return [gr.skip(), _msg(exc)] + [gr.skip()] * (4 + len(view_outputs))

        up_trace.upload(on_upload, [up_trace, collapse, whole],
                        [trace_state, error_box, summary, gauge_plot, timeline_plot, scrub] + view_outputs)

        def do_compare(kind, rx_t, sch_t, gram_t, prompt_t, model_t, max_v, ma, ba, wa, mb, bb, wb):
            try:
                eng = hub.get(check_page_model(model_t))
                traces = []
                for m, b, w in ((ma, ba, wa), (mb, bb, wb)):
                    c = None if m == "free" else make_constraint(kind, rx_t, sch_t, gram_t, w)
                    traces.append(eng.generate(GenerateRequest(prompt=prompt_t, constraint=c, mode=m, backend=b,
                                                               max_new_tokens=int(max_v), trace_detail=False)))
                a, b = traces
                ta, tb = a["totals"], b["totals"]
                speed = ta["wall_s"] / max(1e-9, tb["wall_s"])
                rows = [
                    "| | A | B |", "|---|---|---|",
                    f"| config | {ma} / {ba} / {wa} | {mb} / {bb} / {wb} |",
                    f"| output | `{a['text'][:80]!r}` | `{b['text'][:80]!r}` |",
                    f"| tokens | {ta['output_tokens']} | {tb['output_tokens']} |",
                    f"| forward passes | {ta['forward_passes']} | {tb['forward_passes']} |",
                    f"| wall time | {ta['wall_s']} s | {tb['wall_s']} s |",
                    f"| finished | {ta['finished']} ({ta['reason']}) | {tb['finished']} ({tb['reason']}) |",
                    "", f"**B is {speed:.2f}x {'faster' if speed >= 1 else 'slower'} than A in wall time, with "
                        f"{ta['forward_passes'] / max(1, tb['forward_passes']):.2f}x fewer forward passes.**",
                ]
                return "", "\n".join(rows), token_strip(a), token_strip(b)
            except BaseException as exc:  # noqa: BLE001
                return _msg(exc), "", "", ""

        cmp_btn.click(do_compare, [kind_state, rx, sch, gram, prompt, model, max_new, mode_a, backend_a, ws_a, mode_b, backend_b, ws_b],
                      [cmp_err, cmp_table, strip_a, strip_b], concurrency_limit=DECODE_SLOTS, concurrency_id="decode")

        def do_doctor(kind, rx_t, sch_t, gram_t, ws_v, prompt_t, model_t, n, with_model):
            from engine.doctor import diagnose

            try:
                c = make_constraint(kind, rx_t, sch_t, gram_t, ws_v)
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

        doc_btn.click(do_doctor, [kind_state, rx, sch, gram, ws, prompt, model, doc_samples, doc_model], [doc_err, doc_md, doc_plot],
                      concurrency_limit=DECODE_SLOTS, concurrency_id="decode")

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
                gr.skip(),
            ]

        demo.load(on_load, None, [kind_state, ctabs, rx, sch, gram, prompt, ws, backend, mode, max_new, temp, seed, model, preset],
                  queue=False)

        # ------------------------------------------------------------ API (gradio_client)
        def api_compile(kind: str, constraint: str, whitespace: str = "compact", backend: str = "fsm",
                        lenient: bool = False) -> dict:
            """Compile a regex/schema/grammar; returns the automaton description (engine JSON)."""
            try:
                eng = hub.get()
                return eng.compile_report(Constraint(kind, constraint, whitespace, bool(lenient) and kind == "schema"), backend)
            except CfsmError as exc:
                raise gr.Error(f"{exc.kind}: {exc.message}") from None

        def api_run(prompt: str, kind: str, constraint: str, whitespace: str = "compact", backend: str = "fsm",
                    mode: str = "jump", max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0,
                    lenient: bool = False) -> dict:
            """Decode under a constraint; returns the engine's trace JSON."""
            try:
                eng = hub.get()
                c = None if mode == "free" else Constraint(kind, constraint, whitespace, bool(lenient) and kind == "schema")
                return eng.generate(GenerateRequest(prompt=prompt, constraint=c, mode=mode, backend=backend,
                                                    max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                                                    seed=int(seed)))
            except CfsmError as exc:
                raise gr.Error(f"{exc.kind}: {exc.message}") from None

        gr.api(api_compile, api_name="compile", concurrency_limit=2)
        gr.api(api_run, api_name="run", concurrency_limit=DECODE_SLOTS, concurrency_id="decode")
    return demo


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
          prevent_thread_lock: bool = False):
    hub = EngineHub(model, device)
    hub.start()
    demo = build_demo(hub)
    demo.queue(default_concurrency_limit=2, max_size=32)
    demo.launch(server_name=host, server_port=port, css=APP_CSS, head=PANEL_CSS, show_error=False,
                prevent_thread_lock=prevent_thread_lock, quiet=True, ssr_mode=False)
    return demo, hub
