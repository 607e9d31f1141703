"""A triggered plan compiled by the grammar library itself (xgrammar's structural tags):
one library matcher over the whole output finds the triggers, masks free text and jumps.
The segments are read back from the finished text by the plan (the library keeps none),
then checked as the engine's trigger layer checks its own."""

from __future__ import annotations

from ..backends import CompiledConstraint, Matcher
from .plan import BoundPhase, FreePhase, Plan, TagPhase
from .segments import SegmentRecord, check_bound, overall


class NativeTriggeredConstraint(CompiledConstraint):
    triggered = True

    def __init__(self, plan: Plan, grammar: CompiledConstraint, how: str) -> None:
        self.plan = plan
        self.grammar = grammar
        self.backend = grammar.backend
        self.constraint = grammar.constraint
        self.compile_seconds = grammar.compile_seconds
        self.warnings = list(grammar.warnings)
        self.how = how

    def matcher(self) -> Matcher:
        return self.grammar.matcher()

    def stats(self) -> dict:
        return {
            **self.grammar.stats(),
            "triggers": self.how,
            "segments": [p.label for p in self.plan.phases],
        }

    def check_output(self, matcher, token_bytes, out_ids, finished, reason):
        recs = text_segments(self.plan, token_bytes, out_ids, finished)
        valid, why = overall(recs, self.plan, finished, reason)
        if finished and not matcher.is_final():
            valid, why = False, f"{self.backend} does not accept the output as complete"
        return valid, why, [r.to_json() for r in recs]


def _token_starts(token_bytes, out_ids: list[int]) -> list[int]:
    """The character offset where each output token starts, and the end."""
    buf, out = b"", [0]
    for t in out_ids:
        buf += token_bytes[t] or b""
        out.append(len(buf.decode("utf-8", errors="replace")))  # as the text is decoded
    return out


class _Reader:
    """The plan walked over the finished text, character by character."""

    def __init__(self, plan: Plan, text: str) -> None:
        self.plan, self.text, self.pos = plan, text, 0
        self.spans: list[tuple[int, int, int]] = []  # (phase, start char, end char)

    def run(self, phase: int | None, limit: int = 10_000) -> None:
        while phase is not None and self.pos < len(self.text) and limit:
            phase, limit = self._step(phase), limit - 1

    def _step(self, i: int) -> int | None:
        p, t, a = self.plan.phases[i], self.text, self.pos
        if isinstance(p, FreePhase):
            hits = [(t.find(tr.text, a), tr) for tr in p.triggers if t.find(tr.text, a) >= 0]
            if not hits:
                return self._span(i, len(t), None)
            at, tr = min(hits, key=lambda h: h[0])
            return self._span(i, at + len(tr.text), tr.next)
        if isinstance(p, TagPhase):
            if not t.startswith(p.text, a):
                return None
            return self._span(i, a + len(p.text), p.next)
        end_tag = self.plan.phases[p.next].text if p.next is not None else None
        cut = t.find(end_tag, a) if end_tag else -1
        return self._span(i, len(t) if cut < 0 else cut, p.next)

    def _span(self, i: int, end: int, nxt: int | None) -> int | None:
        self.spans.append((i, self.pos, end))
        self.pos = end
        return nxt


def text_segments(plan: Plan, token_bytes, out_ids: list[int], finished: bool):
    text = b"".join(token_bytes[t] or b"" for t in out_ids).decode("utf-8", errors="replace")
    r = _Reader(plan, text)
    r.run(plan.start)
    if r.pos < len(text):  # text the plan does not read (an unfinished output): kept, shown
        r.spans.append((None, r.pos, len(text)))
    starts = _token_starts(token_bytes, out_ids)
    recs = []
    for k, (i, a, b) in enumerate(r.spans):
        p = plan.phases[i] if i is not None else FreePhase("unread")
        first = next((j for j, c in enumerate(starts[:-1]) if c >= a), len(out_ids))
        last = next((j for j, c in enumerate(starts[:-1]) if c >= b), len(out_ids))
        rec = SegmentRecord(k, p.kind, p.label, first, last, a, b, text[a:b])
        if isinstance(p, BoundPhase):
            complete = k + 1 < len(r.spans) or (p.next is None and finished)
            rec.valid, rec.validation = check_bound(plan, p.slot, rec.text, complete)
        recs.append(rec)
    return recs
