"""A triggered run's segments as the page shows them: which stretch each token and step
belongs to, the trigger token, and the plain words for steps where no constraint holds."""

from __future__ import annotations

from engine.decoding.trace import StepRecord, Trace

from .text import esc, visible

SEGMENT_WORDS = {
    "free": "free text: no constraint in this segment",
    "tag": "a tag: only tokens that spell it are allowed",
    "constrained": "held to the constraint",
}


def token_segments(tokens: list[dict], segs: list[dict]) -> list[int | None]:
    """The segment index of each output token (None everywhere for a whole-output run)."""
    out: list[int | None] = [None] * len(tokens)
    for s in segs:
        for i in range(s["start"], min(s["end"], len(out))):
            out[i] = s["index"]
    return out


def trigger_tokens(segs: list[dict]) -> dict[int, str]:
    """Output token index -> what it triggered: the last token of free text that the model
    ended by writing a trigger (the constrained segment follows at once)."""
    out = {}
    for a, b in zip(segs, segs[1:], strict=False):
        if a["kind"] == "free" and b["kind"] != "tag" and a["end"] > a["start"]:
            out[a["end"] - 1] = b["label"]
    return out


def step_segment(segs: list[dict], step: StepRecord) -> dict | None:
    k = step.segment
    return next((s for s in segs if s["index"] == k), None) if isinstance(k, int) else None


def segment_sentence(segs: list[dict], s: StepRecord, step: int) -> str | None:
    """The caption of a step outside a constrained segment (None inside one)."""
    seg = step_segment(segs, s)
    if seg is None or seg["kind"] == "constrained":
        return None
    tok = f"<code>{esc(visible(str(s.token_text)))}</code>"
    if seg["kind"] == "free":
        nxt = _next_constrained(segs, seg)
        then = f" The constraint starts at the trigger ({esc(nxt)})." if nxt else ""
        return (
            f"Step {step}: free text ({esc(seg['label'])}), no constraint in this segment, so "
            f"nothing is masked; the model picked {tok} "
            f"(p={s.prob:.2f}).{then}"
        )
    return (
        f"Step {step}: the tag {_quote(seg['text'] or seg['label'])} ({esc(seg['label'])}): only "
        f"tokens that spell it are allowed; {tok} was chosen."
    )


def _next_constrained(segs: list[dict], seg: dict) -> str | None:
    later = [s for s in segs if s["index"] > seg["index"] and s["kind"] == "constrained"]
    return later[0]["label"] if later else None


def _quote(text: str) -> str:
    return f"<code>{esc(visible(text))}</code>"


def segment_note(trace: Trace, step: StepRecord) -> str:
    """What the graph and the mask panel say at a step outside any constrained segment
    ('' inside one, and for a run without segments)."""
    seg = step_segment(trace.segments, step)
    if seg is None or seg["kind"] == "constrained":
        return ""
    native = str((trace.compile or {}).get("triggers", "")).startswith("native")
    if seg["kind"] == "free" and native:
        return (
            f"Free text ({seg['label']}): the backend's own structural tag allows any text here "
            "and watches for the trigger itself."
        )
    if seg["kind"] == "free":
        return (
            f"No constraint here: free text ({seg['label']}). The automaton is entered at the "
            "trigger."
        )
    return (
        f"The tag {seg['text'] or seg['label']!r} ({seg['label']}): only tokens that spell it "
        "are allowed; the constraint's automaton is not in use here."
    )


def segment_label_html(seg: dict) -> str:
    """The label the token strip puts before a segment's first token."""
    ok = "" if seg.get("valid") is None else (" \u2713" if seg["valid"] else " \u2717")
    title = SEGMENT_WORDS.get(seg["kind"], "") + (
        f" | {seg['validation']}" if seg.get("validation") else ""
    )
    return (
        f'<span class="cfsm-seg-label seg-{esc(seg["kind"])}" data-seg="{seg["index"]}" '
        f'title="{esc(title)}">{esc(seg["label"])}{ok}</span>'
    )


def free_spans(trace: Trace) -> list[tuple[int, int, str]]:
    """(first step, last step, label) of each free segment, for the timeline's shading."""
    by_seg: dict[int, list[int]] = {}
    for s in trace.steps:
        if isinstance(s.segment, int):
            by_seg.setdefault(s.segment, []).append(s.index)
    segs = {s["index"]: s for s in trace.segments}
    return [
        (min(ix), max(ix), segs[k]["label"])
        for k, ix in sorted(by_seg.items())
        if k in segs and segs[k]["kind"] == "free"
    ]
