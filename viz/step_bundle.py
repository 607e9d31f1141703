"""A run's step view as one compact bundle the page renders on the client.

Scrubbing used to re-render every panel on the server and ship ~600 KB per step (mostly a
49k-cell plotly heatmap). Now the server builds, once per run, the graph layouts (see
viz.graph), one small PNG per distinct mask and a few hundred bytes per step; the page's
script (viz/static/step_view.js) swaps them in as the scrubber moves.

Positions 0..n-1 are the run's steps; position n is the end (final state, every jump
made), so a run with zero steps still has a view."""

from __future__ import annotations

import base64
import dataclasses
import functools
import io
import json
import uuid
from pathlib import Path

import numpy as np

from engine.decoding.trace import StepRecord, Trace
from engine.lazy import lazy_module
from engine.schema.places import place_words, places_along
from engine.schema.pointer import walkable

from .bundle_shape import StepBundle, StepEntry
from .graph import (
    MARK_CSS,
    MAX_FULL_NODES,
    WHOLE_LIMIT,
    GraphView,
    dot_source,
    graph_view,
    plan_focus,
    render_svg,
    trail,
)
from .panels import (
    CSS,
    caption,
    glossary_html,
    jump_for_step,
    jump_panel,
    no_jump_text,
    output_panel,
    token_strip,
)
from .plots import decode_mask
from .present import PRESENT_CSS
from .segments import segment_note
from .step_panels import panel_columns, panel_css, panel_hosts
from .text import esc, visible

pil_image = lazy_module("PIL.Image")

MASK_WIDTH = 256
ALLOWED_SHOWN = 32


@functools.lru_cache(maxsize=1024)  # ~6 KB each: a mask is drawn once, whatever run shows it
def mask_png(blob: str | None, vocab: int, allowed_all: bool = False) -> str:
    """The allowed-token mask as a 256-wide PNG data URI, one pixel per token id."""
    rows = -(-vocab // MASK_WIDTH)
    grid = np.full(rows * MASK_WIDTH, 2, dtype=np.uint8)
    grid[:vocab] = 1 if allowed_all else 0
    if blob is not None:
        grid[:vocab] = decode_mask(blob, vocab)
    img = pil_image.frombytes("P", (MASK_WIDTH, rows), grid.tobytes())
    img.putpalette([0xE2, 0xE8, 0xF0, 0x25, 0x63, 0xEB, 0xFF, 0xFF, 0xFF])
    buf = io.BytesIO()
    img.save(buf, format="PNG")  # `optimize` took twice as long for a few % of size
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def token_offsets(trace: Trace) -> list[int]:
    """Characters of output written before each output token (and after the last): the
    bytes of the tokens so far, decoded; byte tokens count once their character is whole."""
    buf, out = b"", [0]
    for t in trace.tokens:
        buf += bytes.fromhex(t["hex"]) if t.get("hex") else str(t.get("text", "")).encode("utf-8")
        out.append(len(buf.decode("utf-8", errors="ignore")))
    return out


def positions(trace: Trace) -> list[tuple[int | None, int]]:
    """(char state, char offset) at each position, the end included. Runs without an
    automaton (grammars, free decoding) have no state; their offsets come from the tokens."""
    auto = trace.automaton or {}
    path = auto.get("path") or [auto.get("initial", 0)]
    by_tokens = token_offsets(trace)
    # a triggered run's path walks one segment (engine.serving.service._annotate_segments)
    p0, pseg = int(auto.get("path_offset") or 0), auto.get("path_segment")
    out: list[tuple[int | None, int]] = []
    for s in trace.steps:
        off = s.char_offset
        if off is None:
            off = by_tokens[min(s.output_len, len(by_tokens) - 1)]
        st = s.char_state
        if st is None and auto and (pseg is None or s.segment == pseg):
            st = path[max(0, min(off - p0, len(path) - 1))]
        out.append((st, int(off)))
    out.append((path[-1] if auto else None, len(trace.text)))
    return out


def graph_plan(
    trace: Trace, view: GraphView, where: list[str], whole: bool, raw: bool = False
) -> tuple[list[str], list[int], str]:
    """The layouts a run needs, each position's layout, and a note about the view."""
    n = len(view.states)
    if n <= MAX_FULL_NODES or (whole and n <= WHOLE_LIMIT):
        return [render_svg(dot_source(view, raw=raw))], [0] * len(where), ""
    note = ""
    if whole:
        note = (
            f"Whole automaton is off for this constraint: {n:,} states remain after collapsing "
            f"chains (the limit is {WHOLE_LIMIT}; beyond it `dot` takes seconds and the drawing "
            "cannot be read). Showing focus views."
        )
    keeps, which = plan_focus(view, where)
    return [render_svg(dot_source(view, k, raw)) for k in keeps], which, note


def _allowed(s: StepRecord, view: GraphView | None) -> list[list]:
    out = []
    for row in (s.allowed_sample or [])[:ALLOWED_SHOWN]:
        tid, text, nxt = row[0], row[1], row[2]
        p = row[3] if len(row) > 3 else None
        el = view.element(nxt) if view is not None and nxt is not None else None
        out.append(
            [
                int(tid),
                visible(str(text)),
                None if p is None else float(p),
                None if nxt is None else int(nxt),
                el,
            ]
        )
    return out


def _top(s: StepRecord) -> list[list]:
    raw = {i: p for i, _t, p in s.top_raw}
    masked = {i: p for i, _t, p in s.top_masked}
    text = {i: t for i, t, _ in s.top_raw + s.top_masked}
    ids = list(dict.fromkeys([i for i, _t, _p in s.top_raw] + list(masked)))
    # a token the mask keeps may lie outside the model's own top-k: its raw share is not
    # recorded (None, "below the top-k"), not 0
    return [
        [
            visible(str(text[i])),
            int(i),
            None if i not in raw else float(raw[i]),
            float(masked.get(i, 0.0)),
        ]
        for i in ids
    ]


def text_places(trace: Trace) -> list[dict] | None:
    """The place in the schema before each character of a schema run's output (and at its
    end), read from the text itself (engine/schema/places.places_along): what the step view
    and the outline show, so they follow the output even where the drawn automaton does not
    (a key it reads as closed). None for other runs and for triggered ones."""
    c = trace.request.get("constraint") or {}
    auto = trace.automaton or {}
    if c.get("kind") != "schema" or auto.get("path_offset") or trace.segments:
        return None
    return places_along(trace.text, walkable(str(c.get("text", ""))))


def _past_path(auto: dict, rel: int) -> str:
    """Where a position lies past the end of the output's path in the drawn automaton."""
    n = len(auto.get("path") or []) - 1
    if n < 0 or rel <= n:
        return ""
    return (
        f"the output left the drawn automaton at character {n} (the backend admitted "
        "what this automaton does not); the state is where it left"
    )


def _step_entry(
    trace: Trace,
    k: int,
    pos: tuple,
    view: GraphView | None,
    upto: list[int],
    layout: int,
    places: list[dict] | None = None,
) -> StepEntry:
    steps, auto = trace.steps, trace.automaton or {}
    state, off = pos
    e = StepEntry(caption=caption(trace, k if k < len(steps) else None), offset=off)
    rel = max(0, off - int(auto.get("path_offset") or 0))
    if view is not None:
        here = places[min(off, len(places) - 1)] if places else None
        e.element, e.state = view.element(state), state
        e.position = _past_path(auto, rel) or view.position(state)
        e.place = place_words(here) if here else view.place(state)
        e.pointer = here["pointer"] if here else view.places.get(state, ("",))[0]
        e.layout, e.trail_index = layout, upto[min(rel, len(upto) - 1)]
    j = jump_for_step(trace, k) if k < len(steps) else None
    e.jump_html = jump_panel(trace, k) if j is not None or k >= len(steps) else ""
    e.jumps_done = sum(1 for jj in trace.jumps if k >= len(steps) or jj.step <= k)
    if k < len(steps):
        s = steps[k]
        e.mask = s.mask_key or ("*" if trace.mode == "free" else None)
        e.token_id, e.allowed = s.token_id, s.allowed
        e.feasible_mass = float(s.feasible_mass or 0)
        e.allowed_sample, e.top = _allowed(s, view), _top(s)
        e.free = trace.mode == "free"
        note = segment_note(trace, s)
        if note:
            e.segment_note = note  # outside any constrained segment: grammar inactive
            e.no_mask = s.mask_key is None  # free text: no mask recorded, nothing masked
    return e


ORIGIN_COLUMN = {"model": 1, "forced": 2, "jump": 3}


def schema_outline(trace: Trace, places: list[dict] | None) -> list[list]:
    """A schema run's pointers in the order the output writes them, each with the output
    characters written there by the model, forced (one allowed token) and jumped:
    [[pointer, model, forced, jumped], ...]; [] without places (`text_places`)."""
    if not places:
        return []
    offs, rows = token_offsets(trace), {}
    for i, t in enumerate(trace.tokens):
        col = ORIGIN_COLUMN.get(t.get("origin", "model"), 1)
        for c in range(offs[i], min(offs[i + 1], len(places) - 1)):
            ptr = places[c]["pointer"]  # the place before the character
            rows.setdefault(ptr, [ptr, 0, 0, 0])[col] += 1
    return list(rows.values())


def step_bundle(
    trace: Trace, collapse: bool = True, whole: bool = False, raw: bool = False, live: bool = False
) -> StepBundle:
    """Everything the client needs to show any position of the run; `live`: a decoding
    run's trace so far, its last step only (the view follows the run)."""
    auto = trace.automaton
    where = positions(trace)
    ks = [max(0, len(where) - 2)] if live else list(range(len(where)))
    view = graph_view(auto, collapse) if auto else None
    places = text_places(trace)
    layouts, which, note, trail_els, jumps, upto = [], [0] * len(ks), "", [], [], [0]
    if view is not None:
        path = auto.get("path") or [auto["initial"]]
        trail_els, upto = trail(view, path)
        at = [view.element(where[k][0]) or f"s{auto['initial']}" for k in ks]
        layouts, which, note = graph_plan(trace, view, at, whole, raw)
        jumps = _jump_edges(trace, view, path)
    vocab = int(trace.model.get("vocab_size", 0)) or 1
    entries = [
        _step_entry(trace, k, where[k], view, upto, which[i], places) for i, k in enumerate(ks)
    ]
    shown = {e.mask for e in entries} if live else None
    masks = {k: mask_png(v, vocab) for k, v in trace.masks.items() if shown is None or k in shown}
    if trace.mode == "free":
        masks["*"] = mask_png(None, vocab, allowed_all=True)
    return StepBundle(
        run=uuid.uuid4().hex[:12],
        n=len(trace.steps),
        live=live,
        vocab=vocab,
        mask_width=MASK_WIDTH,
        text=trace.text,
        layouts=layouts,
        note=note,
        trail=trail_els,
        jumps=jumps,
        masks=masks,
        no_jump=no_jump_text(trace),
        replay=trace.mode == "replay",
        outline=schema_outline(trace, places),
        mark_css=MARK_CSS,
        steps=entries,
        panels=panel_columns(trace, ks, len(trace.steps), live),
    )


def _jump_edges(trace: Trace, view: GraphView, path: list[int]) -> list[list[str]]:
    """Each jump's edges in the drawn automaton: the part of its string the drawn path
    holds ([] for a jump wholly outside it). A triggered run's path starts at its segment,
    so a jump that writes the tag and then the segment's first characters (tool_choice
    required: `<tool_call>{"name": "`) lights the edges of those characters."""
    auto, out = trace.automaton or {}, []
    p0 = int(auto.get("path_offset") or 0)
    for j in trace.jumps:
        a = j.char_start - p0
        b = min(a + len(j.string), len(path) - 1)
        if b <= max(a, 0):
            out.append([])
            continue
        els, _ = trail(view, path[max(a, 0) : b + 1])
        out.append([e for e in els if e.startswith("e")])
    return out


def _no_graph(trace: Trace, live: bool = False) -> str:
    kind = (trace.request.get("constraint") or {}).get("kind")
    if live and kind != "grammar" and trace.mode != "free":
        return (  # a run with triggers: its constrained stretch is known at its end
            "The automaton is drawn when the run ends (this run's constrained stretch is "
            "placed in the output then)."
        )
    if kind == "grammar":
        return (
            "No finite automaton to draw: a grammar is context-free (it needs a stack, not a "
            "finite set of states). The tokens, masks and jumps below are the grammar backend's."
        )
    if trace.mode == "free":
        return "No finite automaton to draw: free decoding has no constraint."
    return "No finite automaton to draw: the automaton was not built."


LEGEND = (
    '<div class="cfsm-legend" id="graph-legend">'
    '<span><i class="lg cur"></i>current state (or the chain it is inside)</span>'
    '<span><i class="lg path"></i>path so far</span><span><i class="lg jump"></i>jumped</span>'
    '<span><i class="lg acc"></i>accepting (double circle)</span>'
    '<span><b>thick edge</b> = a <a class="cfsm-g" href="#g-chain">chain</a>, drawn once</span>'
    '<span><i class="lg stub"></i>+n = edges to states outside this focus view</span></div>'
)


def split_bundle(b: StepBundle) -> tuple[StepBundle, dict]:
    """The bundle cut in two: what position 0 draws (its layout and its mask; the other
    layouts and masks are null, and `pending` says so), and those others, which the page
    merges in when they arrive (`rest_html`). Of the character preset's 453 KB, 325 KB are
    layouts and masks of later positions, and Gradio's page copies an output's value several
    times per update; without them in the first update the step view came 0.06 s sooner
    (`cfsm bench --suite page-run`'s page, median of 10 alternating pairs)."""
    e0 = b.steps[0]
    rest = {
        "run": b.run,
        "layouts": {str(i): x for i, x in enumerate(b.layouts) if i != e0.layout},
        "masks": {k: v for k, v in b.masks.items() if k != e0.mask},
        "panels": {},
    }
    pending = bool(rest["layouts"] or rest["masks"])
    if pending:  # the registered panels past position 0 go too (viz/step_panels.py)
        rest["panels"] = {k: [None, *col[1:]] for k, col in b.panels.items()}
    first = dataclasses.replace(
        b,
        layouts=[x if i == e0.layout else None for i, x in enumerate(b.layouts)],
        masks={k: (v if k == e0.mask else None) for k, v in b.masks.items()},
        panels={k: col[:1] + [None] * (len(col) - 1) for k, col in b.panels.items()}
        if pending
        else b.panels,
        pending=pending,
    )
    return first, rest


def _json_script(obj: dict | StepBundle, cls: str, attrs: str = "") -> str:
    if isinstance(obj, StepBundle):
        obj = obj.to_json()
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace(
        "<", "\\u003c"
    )  # inert in <script>
    return f'<script type="application/json" class="{cls}"{attrs}>{data}</script>'


def step_view_html(
    trace: Trace, collapse: bool = True, whole: bool = False, raw: bool = False
) -> str:
    """The step view's skeleton plus its whole bundle; the page's script fills it in. Edges
    read in words unless `raw` asks for the exact character classes."""
    return _view_html(trace, step_bundle(trace, collapse, whole, raw))


def step_view_parts(
    trace: Trace, collapse: bool = True, whole: bool = False, raw: bool = False
) -> tuple[str, str]:
    """A finished run's step view with what position 0 draws, and the rest of its bundle
    (`rest_html`), which the page sends after everything else: nothing waits for it but a
    scrub to a later layout or mask."""
    first, rest = split_bundle(step_bundle(trace, collapse, whole, raw))
    return _view_html(trace, first), rest_html(rest)


def live_view_html(
    trace: Trace, collapse: bool = True, whole: bool = False, raw: bool = False
) -> str:
    """A decoding run's step view: its last step so far (`step_bundle(live=True)`), no
    tour and no token strip of its own (the page streams the tokens above it)."""
    return _view_html(trace, step_bundle(trace, collapse, whole, raw, live=True))


def rest_html(rest: dict) -> str:
    """The layouts and masks `split_bundle` left out, for the page's hidden host
    (#step-view-rest); the script merges them into the view of the same run. Sent even
    when empty: it comes in the run's last update, so its run id says that update came."""
    return _json_script(rest, "cfsm-bundle-rest", f' data-run="{rest["run"]}"')


def _view_html(trace: Trace, b: StepBundle) -> str:
    graph = (
        '<div id="graph-box" class="cfsm-graph-box"><div class="cfsm-graph-tools"><button '
        'data-z="in" title="zoom in">+</button><button data-z="out" title="zoom out">\u2212'
        '</button><button data-z="fit" title="the focus at no less than 10 px labels">fit'
        '</button><button data-z="cur">current</button><button data-z="full" id="graph-full" '
        'title="full screen (Esc leaves)">full screen</button><a id="dl-svg" '
        'download="fsm.svg" href="#">download SVG</a></div><div id="fsm-graph" '
        'title="drag to pan, wheel to zoom; drag the lower right corner to resize"></div></div>'
        + LEGEND
        if b.layouts
        else '<div id="fsm-graph" class="cfsm-muted cfsm-nograph">'
        f"{esc(_no_graph(trace, b.live))}</div>"
    )
    live = b.live
    tour = (
        '<div class="cfsm-tour-start"><a href="#" data-tour-start id="tour-run">Tour this run'
        "</a> (a choice, a chain, a jump, a re-tokenization)</div>"
        if not live
        else ""
    )
    strip = "" if live else f'<div id="strip-html">{token_strip(trace)}</div>'
    return (
        f'<div id="step-view" data-step="-1" data-run="{b.run}" data-steps="{b.n}"'
        f"{' data-live' if live else ''}>{tour}"
        '<div id="caption" class="cfsm-caption"></div>'
        '<div class="cfsm-row"><div class="cfsm-col-graph">'
        '<div id="graph-where" class="cfsm-muted"></div><div id="schema-outline"></div>'
        '<div id="graph-note" '
        f'class="cfsm-muted"></div>{graph}</div><div '
        f'class="cfsm-col-side">{output_panel(trace)}<div id="jump-html"></div>{panel_hosts()}'
        f'<div id="allowed-html"></div></div></div>{strip}'
        '<div class="cfsm-row"><div id="mask-panel" class="cfsm-panel"></div><div id="topk-panel" '
        f'class="cfsm-panel"></div></div>{glossary_html()}{_json_script(b, "cfsm-bundle")}</div>'
    )


def empty_view(message: str) -> str:
    """What the step view shows before a run, or while a new one decodes."""
    return (
        '<div id="step-view" data-step="-1" data-steps="0"><div '
        f'class="cfsm-muted">{esc(message)}</div></div>'
    )


def head_html() -> str:
    """What the page's <head> needs for the step view: its CSS and its script."""

    static = Path(__file__).parent / "static"
    js = "".join(
        f"<script>{(static / name).read_text(encoding='utf-8')}</script>"
        for name in ("step_view.js", "present.js")  # presentation mode: viz/present.py
    )
    return f"<style>{CSS}{MARK_CSS}{PRESENT_CSS}{panel_css()}</style>{js}"
