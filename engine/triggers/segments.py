"""A triggered output checked segment by segment: every bound segment against its own
constraint (each tool call's arguments against its tool's `parameters`), every tag as its
text, and the shape (the output ended where the plan lets it end)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ..decoding.validate import validate_output
from .tools import check_call

if TYPE_CHECKING:  # the matcher calls these with itself
    from .matcher import TriggeredMatcher


@dataclass
class SegmentRecord:
    """One stretch of the output as the trace keeps it (token and character ranges)."""

    index: int
    kind: str  # free | tag | constrained
    label: str
    start: int  # first output token
    end: int  # one past the last
    char_start: int
    char_end: int
    text: str
    valid: bool | None = None
    validation: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def segment_records(m: TriggeredMatcher, token_bytes, out_ids: list[int]):
    """The segments of a finished (or stopped) output, each checked where it can be (a
    segment the matcher has not closed is unfinished, whatever stopped the run)."""
    plan = m.plan
    recs: list[SegmentRecord] = []
    chars = 0
    segs = m.segments()
    for i, d in enumerate(segs):
        end = min(d["end"], len(out_ids))
        last_free = d["kind"] == "free" and i == len(segs) - 1
        if end <= d["start"] and d["kind"] != "constrained" and not last_free:
            continue  # a tag the output did not take (the stop came where it could begin)
        # an empty last free segment is kept: the step that chose the end was taken there
        text = b"".join(token_bytes[t] or b"" for t in out_ids[d["start"] : end])
        s = text.decode("utf-8", errors="replace")
        r = SegmentRecord(
            d["index"], d["kind"], d["label"], d["start"], end, chars, chars + len(s), s
        )
        chars += len(s)
        if d["kind"] == "constrained":
            r.valid, r.validation = check_bound(plan, d["slot"], s, bool(d.get("complete")))
        recs.append(r)
    return recs


def check_bound(plan, slot: int, text: str, complete: bool) -> tuple[bool | None, str]:
    """A constrained segment on its own: a call's body against its tool, an answer against
    its constraint (a grammar's answer counts as accepted when its matcher completed)."""
    if not complete:
        return False, "not finished: the segment stops before its constraint is complete"
    if plan.tools:
        return check_call(plan.tools, text, plan.tool_format)
    return validate_output(plan.constraints[slot], text, True, "eos", True)


def overall(recs: list[SegmentRecord], plan, finished: bool, reason: str) -> tuple[bool, str]:
    """(valid, one line) for the whole output."""
    if not finished:
        return False, f"not finished ({reason}): the output is incomplete"
    bound = [r for r in recs if r.kind == "constrained"]
    bad = [r for r in bound if not r.valid]
    if bad:
        return False, f"segment {bad[0].index} ({bad[0].label}): {bad[0].validation}"
    if plan.tools:
        n = len(bound)
        if n == 0:
            return True, "no tool call: free text only (tool choice auto)"
        return True, f"{n} tool call{'s' if n != 1 else ''}, each valid for its tool's parameters"
    if not bound:
        return False, "the answer after the reasoning is missing"
    return True, f"reasoning, then an answer {bound[-1].validation}"
