"""The page's widgets, laid out; app.main wires them to the engine and viz."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine.decoding.model_runtimes import RUNTIME_CHOICES
from engine.decoding.request import TRIGGER_IMPLS, page_default
from viz.step_bundle import empty_view

CUSTOM = "(edited: no preset)"
TOOLS_PRESET = "Tool calls, auto (tools)"
NO_RUN = (
    "Run something to see its steps: the output, the automaton and what the constraint allowed at "
    "each step."
)
INTRO = (
    "Type a regex, a JSON schema or a grammar and a prompt, then **Run**: a real model decodes "
    "under the constraint. The step view below shows, step by step, the output, the automaton "
    "(forced stretches collapsed into one edge, which jump-forward appends without decoding) and "
    "which tokens the constraint allowed."
)


@dataclass
class Playground:
    """Every widget of the Playground tab, by role (gradio components)."""

    kind: Any
    trace: Any
    stop: Any
    status: Any
    tour: Any
    status_timer: Any
    preset: Any
    ctabs: Any
    tools: Any
    tools_err: Any
    tool_choice: Any
    tool_start: Any
    tool_end: Any
    reasoning: Any
    think_budget: Any
    trigger_impl: Any
    rx: Any
    rx_err: Any
    sch: Any
    sch_err: Any
    gram: Any
    gram_err: Any
    prompt: Any
    ts_text: Any
    ts_btn: Any
    ts_out: Any
    model: Any
    runtime: Any
    raw: Any
    backend: Any
    mode: Any
    ws: Any
    lenient: Any
    spec: Any
    max_new: Any
    temp: Any
    top_p: Any
    seed: Any
    run_btn: Any
    stop_btn: Any
    error: Any
    stop_msg: Any
    summary: Any
    cards: Any
    live: Any
    scrub: Any
    play: Any
    pause: Any
    present: Any
    collapse: Any
    whole: Any
    view: Any
    view_rest: Any
    timeline: Any
    dl_trace: Any
    up_trace: Any
    up_err: Any
    permalink: Any


@dataclass
class Compare:
    mode_a: Any
    backend_a: Any
    ws_a: Any
    mode_b: Any
    backend_b: Any
    ws_b: Any
    btn: Any
    err: Any
    table: Any
    strip_a: Any
    strip_b: Any


@dataclass
class Replay:
    endpoint: Any
    model: Any
    key_env: Any
    flavor: Any
    pasted: Any
    btn: Any
    err: Any
    md: Any


@dataclass
class Doctor:
    samples: Any
    with_model: Any
    btn: Any
    err: Any
    md: Any
    plot: Any


# The constraint kinds are a choice (`ctabs`, a radio drawn as tabs) over boxes that Gradio
# always counts as shown; the page's CSS hides the other kinds' boxes (KIND_CSS). Gradio's
# own tabs set a tab's contents up again a few frames after the tab is first shown: text
# typed or pasted in those frames was lost, and the box's change event then fired 25 times
# a second for as long as the page stayed open (Gradio 6.31).
KINDS_SHOWN = (("Regex", "regex"), ("JSON schema", "schema"), ("Grammar", "grammar"),
               ("Tools", "tools"))  # fmt: skip
# the boxes are found by class: Gradio writes a Group's elem_id on two nested elements, so
# each `kind-*` id appeared twice in the page
KIND_CSS = (
    ",".join(
        f"body[data-cfsm-kind]:not([data-cfsm-kind={k}]) .kind-{k}"
        + ("" if k == "regex" else f",body:not([data-cfsm-kind]) .kind-{k}")
        for _, k in KINDS_SHOWN
    )
    + "{display:none !important;}"
)
# shows the chosen kind's boxes (run in the browser at each change of the choice, a
# preset's and a permalink's included) and hands the kind on to the server
KIND_JS = "(k) => { document.body.dataset.cfsmKind = k; return k; }"


def _constraint_inputs(P: dict, first: str) -> dict:
    w: dict = {}
    w["preset"] = gr.Dropdown([*P, CUSTOM], value=first, label="Preset", elem_id="preset")
    w["ctabs"] = gr.Radio(
        list(KINDS_SHOWN), value="regex", show_label=False, container=False, elem_id="kind-choice"
    )
    with gr.Group(elem_classes=["cfsm-kind-box", "kind-regex"]):
        w["rx"] = gr.Textbox(
            P[first]["text"],
            label="Regex (full match, Python syntax)",
            lines=4,
            elem_id="regex-input",
        )
        w["rx_err"] = gr.HTML("", elem_id="regex-error")
    with gr.Group(elem_classes=["cfsm-kind-box", "kind-schema"]):
        w["sch"] = gr.Code(
            P["Person (JSON schema)"]["text"],
            language="json",
            label="JSON schema",
            elem_id="schema-input",
        )
        w["sch_err"] = gr.HTML("", elem_id="schema-error")
    with gr.Group(elem_classes=["cfsm-kind-box", "kind-grammar"]):
        w["gram"] = gr.Textbox(
            P["Colour (EBNF grammar)"]["text"],
            lines=4,
            elem_id="grammar-input",
            label="Grammar: EBNF for xgrammar, Lark for llguidance",
        )
        w["gram_err"] = gr.HTML("", elem_id="grammar-error")
    with gr.Group(elem_classes=["cfsm-kind-box", "kind-tools"]):
        w["tools"] = gr.Code(
            P[TOOLS_PRESET]["text"],
            language="json",
            label="Tools (OpenAI style): free text; a call the model opens with the start "
            'tag is held to {"name": ..., "arguments": ...} for one of these tools',
            elem_id="tools-input",
        )
        w["tools_err"] = gr.HTML("", elem_id="tools-error")
        with gr.Row():
            w["tool_choice"] = gr.Textbox(
                "auto",
                label="Tool choice: auto (the model decides), required (calls only), or a "
                "tool's name",
                elem_id="tool-choice",
            )
            w["tool_start"] = gr.Textbox(
                P[TOOLS_PRESET]["tool_start"],
                label="Start tag (the trigger)",
                elem_id="tool-start",
            )
            w["tool_end"] = gr.Textbox(
                P[TOOLS_PRESET]["tool_end"], label="End tag", elem_id="tool-end"
            )
    w["prompt"] = gr.Textbox(
        P[first]["prompt"], label="Prompt (chat template applied)", lines=3, elem_id="prompt"
    )
    with gr.Row():
        w["reasoning"] = gr.Checkbox(
            page_default("reasoning"),
            label="Reasoning first: free text in <think> … </think>, then the constraint",
            elem_id="reasoning",
        )
        w["think_budget"] = gr.Number(
            page_default("think_budget"),
            precision=0,
            minimum=0,
            maximum=512,
            label="Thinking budget (tokens; 0 = none): then </think> is forced",
            elem_id="think-budget",
        )
        w["trigger_impl"] = gr.Radio(
            list(TRIGGER_IMPLS),
            value=page_default("trigger_impl"),
            label="Triggers found by: the backend (native: xgrammar's structural tags) or the "
            "engine's layer (every backend); auto = native where the backend has it",
            elem_id="trigger-impl",
        )
    # open from the start, as regex101's test strings are: Gradio mounts a closed accordion's
    # contents only when it opens, then resets the new box to its initial value a few tens
    # of ms later, so text typed or pasted at once was lost and Check saw an empty box
    with gr.Accordion("Test strings", open=True, elem_id="test-strings"):
        w["ts_text"] = gr.Textbox(
            "",
            lines=3,
            elem_id="test-strings-input",
            label="One text per line: does the constraint accept it (with the chosen backend)?",
        )
        w["ts_btn"] = gr.Button("Check", size="sm", elem_id="test-strings-run")
        w["ts_out"] = gr.HTML("", elem_id="test-strings-output")
    return w


def _run_settings(modes, backends, wss) -> dict:
    w: dict = {}
    with gr.Row():
        w["run_btn"] = gr.Button("Run", variant="primary", elem_id="run")
        w["stop_btn"] = gr.Button("Stop", elem_id="stop")
    with gr.Row():
        w["backend"] = gr.Dropdown(backends, value=backends[0], label="Backend", elem_id="backend")
        w["mode"] = gr.Radio(modes, value=page_default("mode"), label="Mode", elem_id="mode")
    with gr.Row():
        w["ws"] = gr.Radio(
            wss, value="compact", label="JSON whitespace policy", elem_id="whitespace"
        )
    # the two reading options on a row of their own: beside the whitespace radio, a
    # 1024-px page wrapped their labels a word per line
    with gr.Row():
        w["lenient"] = gr.Checkbox(
            False,
            label="Lenient: compile schema keywords the backend cannot enforce, with a warning",
            elem_id="lenient",
        )
        w["spec"] = gr.Checkbox(
            False,
            label="Spec reading: open objects, 1.0 as an integer",
            elem_id="spec",
            info="JSON Schema's own reading; the default closes objects that list properties",
        )
    with gr.Row():
        w["max_new"] = gr.Slider(
            1,
            512,
            value=page_default("max_new_tokens"),
            step=1,
            label="Max new tokens",
            elem_id="max-new",
        )
        w["temp"] = gr.Slider(
            0, 2, value=page_default("temperature"), step=0.05, label="Temperature (0 = greedy)"
        )
    with gr.Row():
        w["top_p"] = gr.Slider(
            0.05, 1, value=page_default("top_p"), step=0.05, label="Top-p", elem_id="top-p"
        )
        w["seed"] = gr.Number(page_default("seed"), precision=0, label="Seed")
    w["runtime"] = gr.Dropdown(
        list(RUNTIME_CHOICES),
        value=page_default("runtime"),
        label="Runtime (auto: llama.cpp for a GGUF model on the CPU, else transformers)",
        elem_id="runtime",
    )
    w["model"] = gr.Textbox(
        "embedded",
        label="Model: 'embedded' (SmolLM2-135M-Instruct), an HF id from the local "
        "cache, or a folder in the models dir",
        elem_id="model",
    )
    return w


def _step_view() -> dict:
    w: dict = {}
    with gr.Row(elem_id="step-controls"):
        w["scrub"] = gr.Slider(
            0,
            1,
            value=0,
            step=1,
            label="Step (the last position is the end of the run)",
            elem_id="step-slider",
            interactive=False,
            scale=4,
        )
        with gr.Column(scale=1, min_width=160, elem_id="step-buttons"):
            w["play"] = gr.Button("\u25b6 Play", size="sm", elem_id="play")
            w["pause"] = gr.Button("\u23f8 Pause", size="sm", elem_id="pause")
            # for a projector: the caption, the token strip and the graph only, in large
            # type (viz/static/present.js); Esc or this button leaves
            w["present"] = gr.Button("Presentation", size="sm", elem_id="present")
        with gr.Column(scale=1, min_width=160, elem_id="view-options"):
            w["collapse"] = gr.Checkbox(True, label="Collapse chains", elem_id="collapse")
            w["whole"] = gr.Checkbox(False, label="Whole automaton", elem_id="whole")
            w["raw"] = gr.Checkbox(
                False,
                label="Raw character classes",
                elem_id="raw-classes",
                info="edges read in words; hover an edge for its exact class",
            )
    w["view"] = gr.HTML(empty_view(NO_RUN), elem_id="step-view-host")
    # the finished run's later layouts and masks (viz.step_bundle.split_bundle), not shown
    w["view_rest"] = gr.HTML("", elem_id="step-view-rest")
    return w


def playground_tab(P: dict, status: str, modes, backends, wss) -> Playground:
    """The Playground's widgets; the choice lists come from the engine (app/main.py)."""
    first = "SGLang character (regex)"
    w: dict = {"kind": gr.State(P[first]["kind"]), "trace": gr.State(None), "stop": gr.State(None)}
    with gr.Tab("Playground", id="playground"):
        gr.Markdown(INTRO, elem_id="intro")
        w["tour"] = gr.Button(
            "New here? Take the tour: the character preset, decoded and explained step by step",
            size="sm",
            elem_id="tour-start",
        )
        w["status"] = gr.Markdown(status, elem_id="model-status")
        w["status_timer"] = gr.Timer(1.0)
        with gr.Row():
            with gr.Column(scale=3):
                w.update(_constraint_inputs(P, first))
            with gr.Column(scale=2):
                w.update(_run_settings(list(modes), list(backends), list(wss)))
        w["error"] = gr.HTML("", elem_id="run-error")
        w["stop_msg"] = gr.Markdown("", elem_id="stop-message")
        w["summary"] = gr.Markdown("", elem_id="summary")
        w["live"] = gr.HTML("", elem_id="live-strip")
        w.update(_step_view())
        w["cards"] = gr.HTML("", elem_id="stat-cards-host")
        w["timeline"] = gr.Plot(label="Timeline", elem_id="timeline-plot")
        with gr.Accordion("Share and export", open=False, elem_id="share-export"):
            with gr.Row():
                w["dl_trace"] = gr.File(label="Trace JSON", elem_id="dl-trace")
                with gr.Column():
                    w["up_trace"] = gr.File(
                        label="Upload a trace to view it", file_types=[".json"], elem_id="up-trace"
                    )
                    w["up_err"] = gr.HTML("", elem_id="upload-error")
            w["permalink"] = gr.Markdown("", elem_id="permalink")
    return Playground(**w)


def compare_tab(modes, backends, wss) -> Compare:
    w: dict = {}
    with gr.Tab("Compare", id="compare"):
        gr.Markdown(
            "The same prompt, constraint and sampling settings (from the Playground tab) in two "
            "configurations, side by side."
        )
        with gr.Row():
            for side, mode in (("a", "masked"), ("b", "jump")):
                with gr.Column():
                    w[f"mode_{side}"] = gr.Radio(modes, value=mode, label=f"{side.upper()}: mode")
                    w[f"backend_{side}"] = gr.Dropdown(
                        backends, value=backends[0], label=f"{side.upper()}: backend"
                    )
                    w[f"ws_{side}"] = gr.Radio(
                        wss, value="compact", label=f"{side.upper()}: whitespace"
                    )
        w["btn"] = gr.Button("Compare", variant="primary", elem_id="compare-run")
        w["err"] = gr.HTML("")
        w["table"] = gr.Markdown("", elem_id="compare-table")
        with gr.Row():
            w["strip_a"] = gr.HTML("", elem_id="strip-a")
            w["strip_b"] = gr.HTML("", elem_id="strip-b")
    return Compare(**w)


def doctor_tab() -> Doctor:
    w: dict = {}
    with gr.Tab("Doctor", id="doctor"):
        gr.Markdown(
            "Why does this constraint (from the Playground tab) get a poor jump-forward speedup, "
            "where, and what would change it. Samples are synthesized from the automaton, or "
            "generated by the model from the Playground prompt."
        )
        with gr.Row():
            w["samples"] = gr.Slider(1, 20, value=6, step=1, label="Samples")
            w["with_model"] = gr.Checkbox(False, label="Generate samples with the model (slower)")
            w["btn"] = gr.Button("Diagnose", variant="primary", elem_id="doctor-run")
        w["err"] = gr.HTML("")
        w["md"] = gr.Markdown("", elem_id="doctor-report")
        w["plot"] = gr.Plot(label="Where the forward passes go", elem_id="doctor-plot")
    return Doctor(**w)


def replay_tab() -> Replay:
    w: dict = {}
    with gr.Tab("Replay", id="replay", render_children=True):
        gr.Markdown(
            "Another engine's output for the Playground's constraint and prompt, walked through "
            "this lab's automaton and masks: which of its tokens were forced (jump-forward "
            "would have skipped them), where the mask was tight, its top alternatives against "
            "the mask, and any token outside the constraint. The engine is asked with "
            "`logprobs`; its key is read from the server's environment variable you name "
            "(`CFSM_REPLAY_KEY...`), never stored. "
            "Or paste a response (JSON, with logprobs) it gave. The Playground's step view "
            "shows the replay."
        )
        with gr.Row():
            w["endpoint"] = gr.Textbox(label="Endpoint", placeholder="http://127.0.0.1:8000/v1",
                                       elem_id="replay-endpoint")  # fmt: skip
            w["model"] = gr.Textbox(label="Model name", elem_id="replay-model")
            w["key_env"] = gr.Textbox(
                label="Key from environment variable",
                placeholder="CFSM_REPLAY_KEY",
                elem_id="replay-key",
            )
            w["flavor"] = gr.Dropdown(
                ["openai", "sglang", "llama-server"],
                value="openai",
                label="Constraint fields",
                elem_id="replay-flavor",
            )
        w["pasted"] = gr.Textbox(label="Or paste a response (JSON)", lines=4,
                                 elem_id="replay-pasted")  # fmt: skip
        w["btn"] = gr.Button("Replay", variant="primary", elem_id="replay-run")
        w["err"] = gr.HTML("", elem_id="replay-error")
        w["md"] = gr.Markdown("", elem_id="replay-summary")
    return Replay(**w)
