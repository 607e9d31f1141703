"""FSM graph as SVG (Graphviz `dot`): chains collapsed into one labelled edge, accepting
states double-circled, the current state and the path so far highlighted, jump edges
coloured.

Scrubbing must be cheap: the layout is computed once per (automaton, view) and cached;
each step only adds a small <style> block that highlights ids in the cached SVG. Large
automata show the neighbourhood of the current state (one layout per neighbourhood)."""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections import OrderedDict, deque

CURRENT = "#f97316"
PATH = "#2563eb"
JUMP = "#16a34a"
MAX_FULL_NODES = 80
NEIGHBOURHOOD_NODES = 28
_LAYOUTS: OrderedDict[str, str] = OrderedDict()
_LAYOUT_CAP = 64


def _esc_label(s: str, limit: int = 18) -> str:
    vis = s.replace("\\", "\\\\").replace("\n", "\u21b5").replace("\t", "\u21e5").replace(" ", "\u2423")
    vis = vis.replace('"', '\\"')
    if len(vis) > limit:
        vis = vis[: limit - 1] + "\u2026"
    return vis


def collapsed_edges(automaton: dict, collapse: bool = True) -> tuple[list[int], list[dict]]:
    """Visible states and edges. With `collapse`, inner states of chains disappear and
    each chain becomes one edge labelled with its string. Parallel edges are merged.
    Every edge carries `hops`: the raw (state, state) steps it stands for."""
    n = automaton["num_states"]
    hidden: set[int] = set()
    edges: list[dict] = []
    first_hops: set[tuple[int, int]] = set()
    if collapse:
        for c in automaton.get("chains", []):
            st = c["states"]
            hidden.update(st[1:-1])
            first_hops.add((st[0], st[1]))
            edges.append({"from": c["from"], "to": c["to"], "label": c["string"], "chain": True,
                          "hops": list(zip(st, st[1:], strict=False))})
    merged: dict[tuple[int, int], list[str]] = {}
    for e in automaton["transitions"]:
        a, b = e["from"], e["to"]
        if a in hidden or (a, b) in first_hops:
            continue
        merged.setdefault((a, b), []).append(e["label"])
    for (a, b), labels in merged.items():
        label = labels[0] if len(labels) == 1 else "|".join(labels[:3]) + ("|\u2026" if len(labels) > 3 else "")
        edges.append({"from": a, "to": b, "label": label, "chain": False, "hops": [(a, b)]})
    states = [s for s in range(n) if s not in hidden]
    return states, edges


def neighbourhood(states: list[int], edges: list[dict], center: int, limit: int) -> set[int]:
    adj: dict[int, set[int]] = {}
    for e in edges:
        adj.setdefault(e["from"], set()).add(e["to"])
        adj.setdefault(e["to"], set()).add(e["from"])
    seen = {center}
    q = deque([center])
    while q and len(seen) < limit:
        s = q.popleft()
        for t in sorted(adj.get(s, ())):
            if t not in seen:
                seen.add(t)
                q.append(t)
                if len(seen) >= limit:
                    break
    return seen


def _dot_source(states: list[int], edges: list[dict], accepting: set[int], initial: int, hidden_count: int) -> str:
    lines = [
        "digraph fsm {",
        'rankdir=LR; bgcolor="transparent"; nodesep=0.25; ranksep=0.35;',
        'node [shape=circle, fontsize=10, width=0.35, fixedsize=false, fontname="Helvetica", style=filled, fillcolor="white"];',
        'edge [fontsize=9, fontname="Helvetica", arrowsize=0.6];',
        '__start [shape=point, width=0.08, label=""];',
        f"__start -> s{initial} [id=\"start\"];",
    ]
    for s in states:
        shape = "doublecircle" if s in accepting else "circle"
        lines.append(f's{s} [id="s{s}", label="{s}", shape={shape}];')
    for i, e in enumerate(edges):
        style = ', color="#64748b", fontcolor="#0f172a", penwidth=1.6' if e["chain"] else ', color="#94a3b8"'
        lines.append(f's{e["from"]} -> s{e["to"]} [id="e{e["from"]}_{e["to"]}_{i}", label="{_esc_label(e["label"])}"{style}];')
    if hidden_count:
        lines.append(f'__hidden [shape=note, id="hidden", label="{hidden_count} more states hidden", fontsize=9, fillcolor="#f1f5f9"];')
    lines.append("}")
    return "\n".join(lines)


def _render(dot: str) -> str:
    key = hashlib.sha1(dot.encode()).hexdigest()
    svg = _LAYOUTS.get(key)
    if svg is None:
        import graphviz

        svg = graphviz.Source(dot).pipe(format="svg", engine="dot").decode("utf-8")
        svg = svg[svg.index("<svg"):]
        # scale to the panel: keep the viewBox, let CSS size it
        svg = re.sub(r'<svg width="[^"]*" height="[^"]*"', '<svg style="max-width:100%;height:auto"', svg, count=1)
        _LAYOUTS[key] = svg
        while len(_LAYOUTS) > _LAYOUT_CAP:
            _LAYOUTS.popitem(last=False)
    else:
        _LAYOUTS.move_to_end(key)
    return svg


def fsm_svg(
    automaton: dict,
    current: int | None = None,
    path: list[int] | None = None,
    jump_pairs: list[tuple[int, int]] | None = None,
    collapse: bool = True,
    max_nodes: int = MAX_FULL_NODES,
) -> str:
    """The automaton as SVG with this step's highlights."""
    states, edges = collapsed_edges(automaton, collapse)
    accepting = set(automaton["accepting"])
    hidden_count = 0
    if len(states) > max_nodes:
        keep = neighbourhood(states, edges, current if current is not None else automaton["initial"], NEIGHBOURHOOD_NODES)
        hidden_count = len(states) - len(keep)
        states = [s for s in states if s in keep]
        edges = [e for e in edges if e["from"] in keep and e["to"] in keep]
    svg = _render(_dot_source(states, edges, accepting, automaton["initial"], hidden_count))
    return highlight(svg, edges, current, path or [], jump_pairs or [])


def highlight(svg: str, edges: list[dict], current: int | None, path: list[int], jump_pairs: list[tuple[int, int]]) -> str:
    """Per-step highlighting as CSS over the cached layout (no re-layout)."""
    rules = []
    visited = set(path)
    for s in visited:
        rules.append(f"#s{s} ellipse {{ fill: #dbeafe; stroke: {PATH}; }}")
    pairs = set(zip(path, path[1:], strict=False))
    jset = {tuple(p) for p in jump_pairs}
    for i, e in enumerate(edges):
        eid = f"e{e['from']}_{e['to']}_{i}"
        hop = tuple(e["hops"][0])
        if hop in jset:
            rules.append(f"#{eid} path {{ stroke: {JUMP}; stroke-width: 3px; }} #{eid} polygon {{ fill: {JUMP}; stroke: {JUMP}; }} #{eid} text {{ fill: {JUMP}; font-weight: bold; }}")
        elif hop in pairs:
            rules.append(f"#{eid} path {{ stroke: {PATH}; stroke-width: 2.2px; }} #{eid} polygon {{ fill: {PATH}; stroke: {PATH}; }}")
    if current is not None:
        rules.append(f"#s{current} ellipse {{ fill: {CURRENT}; stroke: #9a3412; stroke-width: 2px; }} #s{current} text {{ fill: white; font-weight: bold; }}")
    style = "<style>" + "\n".join(rules) + "</style>"
    return re.sub(r"(<svg[^>]*>)", lambda m: m.group(1) + style, svg, count=1)


def svg_document(svg: str, title: str = "cfsm-lab FSM") -> str:
    """A standalone .svg file for download."""
    return '<?xml version="1.0" encoding="UTF-8"?>\n<!-- ' + html.escape(title) + " -->\n" + svg


def automaton_digest(automaton: dict) -> str:
    return hashlib.sha1(json.dumps(automaton.get("transitions", [])[:50]).encode()).hexdigest()[:10]
