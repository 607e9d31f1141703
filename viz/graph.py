"""FSM graph: the automaton with single-edge chains collapsed, laid out by Graphviz `dot`.

Scrubbing must be cheap in the browser, so a run's layouts are computed once: the whole
automaton when it is small, else a few *focus* layouts (a readable neighbourhood of the
current state, with stubs for what lies outside) that together cover every step. Each
step then only names element ids (`s<state>` for a state, `e<i>` for an edge or chain)
that the page marks as current, on the path, or jumped; nothing is re-laid out."""

from __future__ import annotations

import hashlib
import re
import textwrap
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from engine.lazy import lazy_module

from .charclass import class_set, describe, raw_label, union
from .text import visible

graphviz = lazy_module("graphviz")

CURRENT = "#f97316"
PATH = "#2563eb"
JUMP = "#16a34a"
MAX_FULL_NODES = 60  # automata up to this many visible states are drawn whole
FOCUS_NODES = 24  # a focus layout's size: labels stay readable at the panel's width
WHOLE_LIMIT = 400  # beyond this, `dot` takes seconds and the drawing is a tangle
_LAYOUTS: OrderedDict[str, str] = OrderedDict()
_LAYOUT_CAP = 256

# The marks a step applies, as CSS (the page's head and a downloaded SVG use the same). An
# accepting state's outer ring (the last ellipse of a double circle) is never filled.
MARK_CSS = f"""
g#graph0.graph text {{ font-family: Helvetica, sans-serif; }}
g.node.path ellipse {{ fill: #dbeafe; stroke: {PATH}; }}
g.edge.path path {{ stroke: {PATH}; stroke-width: 2.2px; }} \
g.edge.path polygon {{ fill: {PATH}; stroke: {PATH}; }}
g.edge.jumped path {{ stroke: {JUMP}; stroke-width: 3px; }} \
g.edge.jumped polygon {{ fill: {JUMP}; stroke: {JUMP}; }}
g.edge.jumped text {{ fill: {JUMP}; font-weight: bold; }}
g.node.current ellipse {{ fill: {CURRENT}; stroke: #9a3412; stroke-width: 2px; }}
g.node.current text {{ fill: white; font-weight: bold; }}
g.node.current ellipse:last-of-type:not(:first-of-type), \
g.node.path ellipse:last-of-type:not(:first-of-type) {{ fill: none; }}
g.edge.current path {{ stroke: {CURRENT}; stroke-width: 4px; }} \
g.edge.current polygon {{ fill: {CURRENT}; stroke: {CURRENT}; }}
g.edge.current text {{ fill: #9a3412; font-weight: bold; }}
g.node.hint ellipse, g.edge.hint path {{ stroke: #db2777; stroke-width: 3px; }}
"""


@dataclass
class GraphView:
    """The drawable graph: visible states, edges (chains as one edge) and, for every
    state hidden inside a chain, where it sits."""

    states: list[int]
    edges: list[dict]
    accepting: set[int]
    initial: int
    inside: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # state -> (edge index, chars in)
    hop_edge: dict[tuple[int, int], int] = field(default_factory=dict)  # (a, b) -> edge index
    succ: dict[int, list[int]] = field(default_factory=dict)
    pred: dict[int, list[int]] = field(default_factory=dict)
    # a schema's automaton: state -> (JSON pointer, part), engine/schema/places.py
    places: dict[int, tuple[str, str]] = field(default_factory=dict)

    def place(self, state: int | None) -> str:
        """Where a state sits in the schema, in words ('' without places)."""
        p = self.places.get(state) if state is not None else None
        return f"in {p[0]}: {p[1]}" if p else ""

    def element(self, state: int | None) -> str | None:
        """The SVG id that stands for a state: its node, or the chain that hides it."""
        if state is None:
            return None
        if state in self.inside:
            return f"e{self.inside[state][0]}"
        return f"s{state}"

    def position(self, state: int | None) -> str:
        """Where a hidden state sits in its chain, in words ('' for a drawn state); the
        chain's spaces and newlines shown as on the graph (\u2423, \u21b5)."""
        if state not in self.inside:
            return ""
        i, k = self.inside[state]
        label = self.edges[i]["label"]
        return f"inside chain \u201c{visible(label)}\u201d after {k} of {len(label)} characters"

    def nodes_of(self, el: str) -> list[int]:
        if el.startswith("s"):
            return [int(el[1:])]
        e = self.edges[int(el[1:])]
        return [e["from"], e["to"]]


def edge_labels(automaton: dict, group: list[dict]) -> dict:
    """A merged edge's label in words and its exact class (`raw`): the classes of all the
    parallel transitions as one set. Traces without class contents (version 1-3 automata
    of older runs) keep the partition's labels, joined."""
    if automaton.get("classes") is None or any("class" not in e for e in group):
        labels = [e["label"] for e in group]
        label = (
            labels[0]
            if len(labels) == 1
            else "|".join(labels[:3]) + ("|\u2026" if len(labels) > 3 else "")
        )
        return {"label": label, "raw": label}
    cs = class_set(automaton, group[0]["class"])
    for e in group[1:]:
        cs = union(cs, class_set(automaton, e["class"]))
    return {"label": describe(cs), "raw": raw_label(cs)}


def graph_view(automaton: dict, collapse: bool = True) -> GraphView:
    """Visible states and edges. With `collapse`, inner states of chains disappear and
    each chain becomes one edge labelled with its string. Parallel edges are merged."""
    hidden: dict[int, tuple[int, int]] = {}
    edges: list[dict] = []
    hop_edge: dict[tuple[int, int], int] = {}
    if collapse:
        for c in automaton.get("chains", []):
            st = c["states"]
            i = len(edges)
            for k, s in enumerate(st[1:-1], 1):
                hidden[s] = (i, k)
            for hop in zip(st, st[1:], strict=False):
                hop_edge[hop] = i
            edges.append(
                {
                    "from": c["from"],
                    "to": c["to"],
                    "label": c["string"],
                    "raw": c["string"],
                    "chain": True,
                }
            )
    merged: dict[tuple[int, int], list[dict]] = {}
    for e in automaton["transitions"]:
        a, b = e["from"], e["to"]
        if a in hidden or (a, b) in hop_edge:
            continue
        merged.setdefault((a, b), []).append(e)
    for (a, b), group in merged.items():
        hop_edge[(a, b)] = len(edges)
        edges.append({"from": a, "to": b, "chain": False, **edge_labels(automaton, group)})
    view = GraphView(
        states=[s for s in range(automaton["num_states"]) if s not in hidden],
        edges=edges,
        accepting=set(automaton["accepting"]),
        initial=automaton["initial"],
        inside=hidden,
        hop_edge=hop_edge,
        places={int(k): (v[0], v[1]) for k, v in (automaton.get("places") or {}).items()},
    )
    for e in edges:
        view.succ.setdefault(e["from"], []).append(e["to"])
        view.pred.setdefault(e["to"], []).append(e["from"])
    return view


def trail(view: GraphView, path: list[int]) -> tuple[list[str], list[int]]:
    """The elements a path of states passes through, in order (each once), and for each
    character offset how many of them have been reached."""
    els: list[str] = []
    seen: set[str] = set()
    upto: list[int] = []

    def add(el: str | None) -> None:
        if el is not None and el not in seen:
            seen.add(el)
            els.append(el)

    for k, s in enumerate(path):
        if k:
            i = view.hop_edge.get((path[k - 1], s))
            add(None if i is None else f"e{i}")
        add(view.element(s))
        upto.append(len(els))
    return els, upto


def focus_nodes(view: GraphView, seeds: list[int], limit: int = FOCUS_NODES) -> set[int]:
    """A readable neighbourhood: what lies ahead of the seeds first (decoding moves
    forward), then what leads to them, breadth first, at most `limit` states."""
    keep = set(seeds)
    keep.update(view.succ.get(seeds[-1], ())[:6])  # what `covers` asks for comes first
    home = view.places.get(seeds[-1], ("",))[0]

    def order(ts: list[int]) -> list[int]:
        # a schema's states: those of the current pointer first (the value being written,
        # not the escape machinery of the string beside it)
        return sorted(ts, key=lambda t: view.places.get(t, ("",))[0] != home) if home else ts

    for nbrs, share in ((view.succ, 0.7), (view.pred, 1.0)):
        q = deque(seeds)
        seen = set(seeds)
        while q and len(keep) < limit * share:
            s = q.popleft()
            for t in order(nbrs.get(s, [])):
                if t not in seen:
                    seen.add(t)
                    keep.add(t)
                    q.append(t)
                    if len(keep) >= limit * share:
                        break
    return keep


def covers(view: GraphView, keep: set[int], el: str) -> bool:
    """A focus layout serves a step when its current element and what follows it are drawn."""
    nodes = view.nodes_of(el)
    return all(n in keep for n in nodes) and all(
        t in keep for t in view.succ.get(nodes[-1], ())[:6]
    )


def plan_focus(
    view: GraphView, current: list[str], limit: int = FOCUS_NODES
) -> tuple[list[set[int]], list[int]]:
    """Focus layouts for a run: reuse the last one while it covers the step, else centre a
    new one on the current element. Returns the layouts and each step's layout index."""
    layouts: list[set[int]] = []
    which: list[int] = []
    for el in current:
        hit = next(
            (i for i in ([len(layouts) - 1] if layouts else []) if covers(view, layouts[i], el)),
            None,
        )
        if hit is None:
            hit = next((i for i, k in enumerate(layouts) if covers(view, k, el)), None)
        if hit is None:
            keep = focus_nodes(view, view.nodes_of(el), limit)
            hit = next(
                (i for i, k in enumerate(layouts) if k == keep), None
            )  # never the same layout twice
            if hit is None:
                layouts.append(keep)
                hit = len(layouts) - 1
        which.append(hit)
    return layouts, which


def _esc_label(s: str, limit: int = 32, words: bool = False) -> str:
    """A DOT label: literal text shows its spaces and newlines (\u2423, \u21b5); a label in
    words keeps plain spaces and is never cut (a cut left half an escape on every JSON
    string's edge)."""
    if words:
        limit = max(limit, 200)
    vis = s.replace("\\", "\\\\")
    if not words:
        vis = vis.replace("\n", "\u21b5").replace("\t", "\u21e5").replace(" ", "\u2423")
    vis = vis.replace('"', '\\"')
    if len(vis) > limit:
        vis = vis[: limit - 1] + "\u2026"
    return vis


KEYS = "\u2460\u2461\u2462\u2463\u2464\u2465\u2466\u2467\u2468"  # circled 1-9
KEY_MIN_LEN, KEY_MIN_USES = 12, 3


def label_keys(texts: list[str]) -> dict[str, str]:
    """Long labels repeated along a drawn view (a counted string: 20 states, each edge
    "any character except control characters, \" and \\") -> a short key each, most used
    first. Written out once in the view's key box, the run is as wide as its states."""
    uses: dict[str, int] = {}
    for t in texts:
        if len(t) >= KEY_MIN_LEN:
            uses[t] = uses.get(t, 0) + 1
    common = sorted((t for t, n in uses.items() if n >= KEY_MIN_USES), key=lambda t: -uses[t])
    return dict(zip(common, KEYS, strict=False))


KEY_WRAP, KEY_LINES = 26, 4  # a key's lines: a phone's graph panel holds 26 characters


def _key_lines(text: str, words: bool) -> list[str]:
    """A key's text in lines short enough for a phone's panel (wrapped at spaces in words,
    cut in chunks of a raw class, each escaped whole), at most KEY_LINES of them."""
    if words:
        parts = textwrap.wrap(text, KEY_WRAP, break_on_hyphens=False) or [""]
    else:
        parts = [text[i : i + KEY_WRAP] for i in range(0, len(text), KEY_WRAP)] or [""]
    if len(parts) > KEY_LINES:
        parts = parts[:KEY_LINES]
        parts[-1] = parts[-1][: KEY_WRAP - 1] + "\u2026"
    return [_esc_label(p, limit=4 * KEY_WRAP, words=words) for p in parts]


def _key_box(keys: dict[str, str], words: bool) -> list[str]:
    """The keys written out, as the drawing's own label above it (a node of its own would
    stand beside the drawing and widen it). Every cluster sets its own label."""
    if not keys:
        return []
    rows = "".join(
        "\\l   ".join([f"{k} {first}", *rest]) + "\\l"
        for t, k in keys.items()
        for first, *rest in [_key_lines(t, words)]
    )
    return [f'label="{rows}"; labelloc=t; labeljust=l; fontsize=11; fontname="Helvetica";']


def dot_source(
    view: GraphView, keep: set[int] | None = None, raw: bool = False, keyed: bool = True
) -> str:
    """Graphviz source for the view, or for the states in `keep` with a dashed stub per
    drawn state that has neighbours outside. Edges read in words (`raw`: the exact class);
    hovering an edge shows its exact class either way. `keyed`: a long label repeated
    along the view reads as a key (\u2460 ...) explained once in a box (`label_keys`)."""
    lines = [
        "digraph fsm {",
        'rankdir=LR; bgcolor="transparent"; nodesep=0.25; ranksep=0.35;',
        'node [shape=circle, fontsize=11, width=0.35, fixedsize=false, fontname="Helvetica", '
        'style=filled, fillcolor="white"];',
        'edge [fontsize=10, fontname="Helvetica", arrowsize=0.6];',
    ]
    states = view.states if keep is None else [s for s in view.states if s in keep]
    if keep is None or view.initial in keep:
        lines += [
            '__start [shape=point, width=0.08, label=""];',
            f'__start -> s{view.initial} [id="start"];',
        ]
    clusters: dict[str, list[int]] = {}
    for s in states:
        clusters.setdefault(view.places.get(s, ("",))[0], []).append(s)
    for i, (pointer, members) in enumerate(clusters.items()):
        if pointer:  # a schema's states, boxed by the pointer they write
            lines.append(
                f'subgraph cluster_{i} {{ id="c{i}"; label="{_esc_label(pointer, words=True)}"; '
                'fontsize=10; fontcolor="#475569"; style="rounded,filled"; '
                'fillcolor="#f8fafc"; color="#cbd5e1";'
            )
        for s in members:
            shape = "doublecircle" if s in view.accepting else "circle"
            lines.append(f's{s} [id="s{s}", label="{s}", shape={shape}];')
        if pointer:
            lines.append("}")
    outside: dict[int, int] = {}
    drawn = [
        (i, e)
        for i, e in enumerate(view.edges)
        if keep is None or (e["from"] in keep and e["to"] in keep)
    ]
    shown = [e.get("raw", e["label"]) if raw else e["label"] for _, e in drawn if not e["chain"]]
    keys = label_keys(shown) if keyed else {}
    lines += _key_box(keys, words=not raw)
    for i, e in enumerate(view.edges):
        a, b = e["from"], e["to"]
        if keep is not None and (a not in keep or b not in keep):
            for s in (a, b):
                if s in keep:
                    outside[s] = outside.get(s, 0) + 1
            continue
        style = (
            ', color="#64748b", fontcolor="#0f172a", penwidth=1.6'
            if e["chain"]
            else ', color="#94a3b8"'
        )
        text = e.get("raw", e["label"]) if raw else e["label"]
        words = not raw and not e["chain"] and e.get("raw", e["label"]) != e["label"]
        if not e["chain"] and text in keys:
            text, words = keys[text], True
        tip = _esc_label(e.get("raw", e["label"]), 200)
        lines.append(
            f's{a} -> s{b} [id="e{i}", label="{_esc_label(text, words=words)}", tooltip="{tip}", '
            f'labeltooltip="{tip}"{style}];'
        )
    for s, k in sorted(outside.items()):
        lines.append(
            f'more{s} [id="more{s}", shape=box, style="dashed,rounded", fontsize=9, '
            f'color="#94a3b8", fontcolor="#64748b", label="+{k} edge{"s" if k > 1 else ""}"];'
        )
        lines.append(f's{s} -> more{s} [style=dashed, color="#cbd5e1", arrowhead=none];')
    lines.append("}")
    return "\n".join(lines)


def render_svg(dot: str) -> str:
    """Lay out with `dot` (cached by source). The SVG keeps its viewBox; the page sizes it."""
    key = hashlib.sha1(dot.encode()).hexdigest()
    svg = _LAYOUTS.get(key)
    if svg is None:
        svg = graphviz.Source(dot).pipe(format="svg", engine="dot").decode("utf-8")
        svg = svg[svg.index("<svg") :]
        svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.S)
        # a node's or edge's <title> is only its DOT name ("s15", "s0->s15"), and every
        # label repeated the font (MARK_CSS sets it): 13% of a layout, sent once per run
        svg = re.sub(r"<title>[^<]*</title>\n", "", svg)
        svg = svg.replace(' font-family="Helvetica,sans-Serif"', "")
        _LAYOUTS[key] = svg
        while len(_LAYOUTS) > _LAYOUT_CAP:
            _LAYOUTS.popitem(last=False)
    else:
        _LAYOUTS.move_to_end(key)
    return svg


def mark_svg(svg: str, marks: dict[str, str]) -> str:
    """A layout with one step's marks (element id -> class) and the mark CSS inlined, built
    in Python the way the page's script marks its SVG: for tests and for static exports."""
    for el, cls in marks.items():
        svg = re.sub(
            rf'(<g id="{re.escape(el)}" class=")([^"]*)"',
            lambda m, c=cls: f'{m.group(1)}{m.group(2)} {c}"',
            svg,
        )
    return re.sub(
        r"(<svg[^>]*>)", lambda m: m.group(1) + "<style>" + MARK_CSS + "</style>", svg, count=1
    )
