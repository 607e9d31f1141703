"""Everything the step view shows for one step of a trace, in one call."""

from __future__ import annotations

from .graph import fsm_svg
from .panels import allowed_tokens, caption, jump_panel, token_strip
from .plots import mask_heatmap, topk_bars

NO_GRAPH = (
    '<div id="fsm-graph" class="cfsm-muted">No finite automaton to draw: {why}</div>'
)


def graph_state(trace: dict, step: int | None) -> tuple[int | None, list[int], list[tuple[int, int]]]:
    """Current char state, path so far and jumped edges at `step`."""
    auto = trace.get("automaton")
    if not auto:
        return None, [], []
    path_all = auto.get("path", [auto["initial"]])
    steps = trace.get("steps", [])
    if step is None or step >= len(steps):
        offset = len(path_all) - 1
        current = path_all[-1]
    else:
        s = steps[step]
        offset = s.get("char_offset")
        if offset is None:
            offset = 0
        current = s.get("char_state")
        if current is None:
            current = path_all[min(offset, len(path_all) - 1)]
    path = path_all[: offset + 1]
    pairs: list[tuple[int, int]] = []
    for j in trace.get("jumps", []):
        if step is not None and j.get("step", -1) > step:
            continue
        a = j.get("char_start", 0)
        seg = path_all[a : a + len(j["string"]) + 1]
        pairs.extend(zip(seg, seg[1:], strict=False))
    return current, path, pairs


WHOLE_GRAPH_LIMIT = 1500  # beyond this, `dot` takes seconds: always show a neighbourhood


def graph_svg(trace: dict, step: int | None, collapse: bool = True, whole: bool = False) -> str:
    auto = trace.get("automaton")
    if not auto:
        kind = ((trace.get("request") or {}).get("constraint") or {}).get("kind")
        why = "grammars are context-free." if kind == "grammar" else "free decoding has no constraint." if trace.get("mode") == "free" else "the automaton was not built."
        return NO_GRAPH.format(why=why)
    current, path, pairs = graph_state(trace, step)
    kw = {"max_nodes": WHOLE_GRAPH_LIMIT} if whole else {}
    svg = fsm_svg(auto, current=current, path=path, jump_pairs=pairs, collapse=collapse, **kw)
    return f'<div id="fsm-graph" style="overflow:auto;max-height:520px">{svg}</div>'


def render_step(trace: dict, step: int | None, collapse: bool = True, whole: bool = False) -> dict:
    vocab = int(trace.get("model", {}).get("vocab_size", 0))
    steps = trace.get("steps", [])
    s = steps[step] if step is not None and step < len(steps) else None
    return {
        "graph": graph_svg(trace, step, collapse, whole),
        "mask": mask_heatmap(trace, step),
        "topk": topk_bars(trace, step),
        "allowed": allowed_tokens(s, vocab) if s else "",
        "strip": token_strip(trace, step),
        "jump": jump_panel(trace, step),
        "caption": caption(trace, step),
    }
