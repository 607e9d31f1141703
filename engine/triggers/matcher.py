"""A triggered constraint behind the one `Matcher` interface: the decoding loop drives it
like any other (masks, accept, rollback, jump-forward) and never knows which phase it is in.

Each bound segment has its own matcher from the backend the request chose (fsm, outlines,
xgrammar or llguidance), so every backend's masks and jumps apply inside segments; free
text and tags are the engine's (`text_tables`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..backends import CompiledConstraint, Matcher, TokenizerContext
from ..tokens.text_tables import TagTable, TriggerScanner, scanner, special_ids, tag_table
from .plan import BoundPhase, FreePhase, Plan, TagPhase
from .segments import overall, segment_records


class TriggeredConstraint(CompiledConstraint):
    """A plan with its constraints compiled (one per slot, by one backend)."""

    triggered = True

    def __init__(
        self, plan: Plan, compiled: list[CompiledConstraint], ctx: TokenizerContext
    ) -> None:
        self.plan = plan
        self.compiled = compiled
        self.ctx = ctx
        self.backend = compiled[0].backend if compiled else ""
        self.constraint = compiled[0].constraint if compiled else None
        self.compile_seconds = sum(c.compile_seconds for c in compiled)
        self.warnings = [w for c in compiled for w in c.warnings]
        special = special_ids(ctx, plan.tag_texts())
        self.special = special
        self.scanners: dict[int, TriggerScanner] = {}
        self.tags: dict[int, TagTable] = {}
        for i, p in enumerate(plan.phases):
            if isinstance(p, FreePhase):
                texts = tuple(t.text for t in p.triggers)
                self.scanners[i] = scanner(ctx, texts, special)
                self.scanners[i].prepare(p.may_end)
            elif isinstance(p, TagPhase):
                self.tags[i] = tag_table(ctx, p.text, special.get(p.text))

    def matcher(self) -> TriggeredMatcher:
        return TriggeredMatcher(self)

    def check_output(self, matcher, token_bytes, out_ids, finished, reason):
        recs = segment_records(matcher, token_bytes, out_ids)
        valid, why = overall(recs, self.plan, finished, reason)
        return valid, why, [r.to_json() for r in recs]

    def stats(self) -> dict:
        return {
            **(self.compiled[0].stats() if self.compiled else {}),
            "triggers": "engine",
            "segments": [p.label for p in self.plan.phases],
        }


@dataclass
class _Segment:
    phase: int
    start: int  # index of its first output token
    inner: Matcher | None = None
    states: list = field(default_factory=list)  # free: scanner state after each token; tag: pos
    lead: bool = False  # opened by its own first token (a call closed where it could go on)


class TriggeredMatcher(Matcher):
    """Phases walked over the output; one state per accepted token, so rollback (the
    re-tokenization after a jump) may cross a trigger backwards."""

    def __init__(self, c: TriggeredConstraint) -> None:
        self.c = c
        self.backend = c.backend
        self.plan = c.plan
        self.owner: list[int] = []  # segment of each accepted token
        self.segs: list[_Segment] = []
        self._open(c.plan.start)

    # ------------------------------------------------------------------ walking
    def _open(self, phase: int, lead: bool = False) -> None:
        p = self.plan.phases[phase]
        inner = self.c.compiled[p.slot].matcher() if isinstance(p, BoundPhase) else None
        self.segs.append(_Segment(phase, len(self.owner), inner, lead=lead))

    @property
    def seg(self) -> _Segment:
        return self.segs[-1]

    @property
    def phase(self):
        return self.plan.phases[self.seg.phase]

    def _free_state(self) -> bytes:
        return self.seg.states[-1] if self.seg.states else b""

    def _tag_pos(self) -> int:
        return self.seg.states[-1] if self.seg.states else 0

    def _tag_may_end(self, p: TagPhase) -> bool:
        """The stop is allowed where an optional tag has not begun."""
        return p.may_end and not self.seg.states

    def accept_token(self, token_id: int) -> bool:
        p = self.phase
        if isinstance(p, FreePhase):
            nxt = self._accept_free(p, token_id)
        elif isinstance(p, TagPhase):
            nxt = self._accept_tag(p, token_id)
        else:
            nxt = self._accept_bound(p, token_id)
        if nxt is False:
            return False
        self.owner.append(len(self.segs) - 1)
        if nxt is not None:
            self._open(nxt)
        return True

    def _accept_free(self, p: FreePhase, tid: int):
        sc = self.c.scanners[self.seg.phase]
        state = self._free_state()
        if not p.may_end and tid == self.c.ctx.eos_token_id:
            return False
        nxt_state, trig, crosses = sc.step(state, tid)
        if crosses:
            return False
        self.seg.states.append(nxt_state)
        if trig is not None:
            return p.triggers[trig].next
        if p.budget and len(self.seg.states) >= p.budget:
            return p.on_budget
        return None

    def _accept_tag(self, p: TagPhase, tid: int):
        t = self.c.tags[self.seg.phase]
        pos = t.advance(self._tag_pos(), tid)
        if pos is None:
            return False
        self.seg.states.append(pos)
        return p.next if pos >= len(t.text) else None

    def _accept_bound(self, p: BoundPhase, tid: int):
        inner, eos = self.seg.inner, self.c.ctx.eos_token_id
        if p.next is not None and tid == eos:
            return False  # the output cannot stop inside a segment its end tag closes
        if inner.accept_token(tid):
            self.seg.states.append(None)
            if p.next is not None and self._complete(inner):
                return p.next  # a closed call: its end tag follows at once
            return None
        if p.next is None or not self._may_close(inner):
            return False
        # the match could end here and go on: a token starting the end tag closes it
        self._open(p.next, lead=True)
        nxt = self._accept_tag(self.phase, tid)
        if nxt is False:
            self.segs.pop()
        return nxt

    def _complete(self, m: Matcher) -> bool:
        ids = m.allowed_ids()
        return len(ids) == 1 and int(ids[0]) == self.c.ctx.eos_token_id

    def _may_close(self, m: Matcher) -> bool:
        """The segment's match could end here (its matcher allows the stop)."""
        return m.allows_any([self.c.ctx.eos_token_id])

    def _closing(self) -> tuple[Matcher, TagTable] | None:
        """In a segment its end tag closes, where the match could end but also go on: the
        inner matcher and the end tag's table (the stop gives way to the tag's tokens)."""
        p = self.phase
        if isinstance(p, BoundPhase) and p.next is not None and self._may_close(self.seg.inner):
            return self.seg.inner, self.c.tags[p.next]
        return None

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > len(self.owner):
            raise ValueError("rollback past the start")
        for _ in range(num_tokens):
            s = self.segs[self.owner.pop()]
            s.states.pop()
            if s.inner is not None:
                s.inner.rollback(1)
            while len(self.segs) > 1 and self.segs[-1].start > len(self.owner):
                self.segs.pop()
            if s.lead and not s.states and self.segs[-1] is s:
                self.segs.pop()  # its first token opened it

    def refusal(self) -> str | None:
        inner = self.seg.inner
        return inner.refusal() if inner is not None else None

    # ------------------------------------------------------------------ queries
    def allowed_ids(self) -> np.ndarray:
        p = self.phase
        if isinstance(p, FreePhase):
            return self.c.scanners[self.seg.phase].tables(self._free_state(), p.may_end).allowed
        if isinstance(p, TagPhase):
            return self.c.tags[self.seg.phase].allowed_ids(self._tag_pos(), self._tag_may_end(p))
        closing = self._closing()
        if closing is not None:
            inner, tag = closing
            ids = np.setdiff1d(inner.allowed_ids(), [self.c.ctx.eos_token_id])
            return np.union1d(ids, tag.allowed_ids(0)).astype(np.int64)
        return self.seg.inner.allowed_ids()

    def allowed_count(self) -> int:
        p = self.phase
        if isinstance(p, FreePhase):
            t = self.c.scanners[self.seg.phase].tables(self._free_state(), p.may_end)
            return self.c.ctx.vocab_size - len(t.excluded)
        return super().allowed_count()

    def mask(self, device: str):
        """None in free text where nothing is masked: the step is sampled unmasked."""
        p = self.phase
        if isinstance(p, FreePhase):
            sc = self.c.scanners[self.seg.phase]
            return sc.mask(self._free_state(), p.may_end, device)
        if isinstance(p, TagPhase):
            return self.c.tags[self.seg.phase].mask(self._tag_pos(), device, self._tag_may_end(p))
        closing = self._closing()
        if closing is not None:
            inner, tag = closing
            m = inner.mask(device) | tag.mask(0, device)
            m[self.c.ctx.eos_token_id] = False
            return m
        return self.seg.inner.mask(device)

    def bitmask(self, device: str, vocab_size: int):
        """Inside a segment's constraint, that constraint's own (cached) row; free text,
        tags and a closing segment pack their masks (Matcher.bitmask)."""
        p = self.phase
        if not isinstance(p, (FreePhase, TagPhase)) and self._closing() is None:
            return self.seg.inner.bitmask(device, vocab_size)
        return super().bitmask(device, vocab_size)

    def is_final(self) -> bool:
        p = self.phase
        if isinstance(p, FreePhase):
            return p.may_end
        if isinstance(p, TagPhase):
            return self._tag_may_end(p)
        return p.next is None and self.seg.inner.is_final()

    def jump_forward(self) -> str:
        p = self.phase
        if isinstance(p, FreePhase):
            return ""
        if isinstance(p, TagPhase):
            return "" if self._tag_may_end(p) else self.c.tags[self.seg.phase].rest(self._tag_pos())
        return self.seg.inner.jump_forward()

    def retokenize_from(self) -> int:
        return self.seg.start

    def next_char_state(self, token_id: int) -> int | None:
        inner = self.seg.inner
        return inner.next_char_state(token_id) if inner is not None else None

    def state_info(self) -> dict:
        base = {"segment": len(self.segs) - 1, "free": self.phase.kind == "free"}
        if self.seg.inner is not None:
            return {**self.seg.inner.state_info(), **base}
        return {"char_state": None, "token_state": None, **base}

    def segments(self) -> list[dict]:
        """Each segment so far: its phase, kind, label and output token range."""
        out = []
        for i, s in enumerate(self.segs):
            p = self.plan.phases[s.phase]
            end = self.segs[i + 1].start if i + 1 < len(self.segs) else len(self.owner)
            d = {"index": i, "kind": p.kind, "label": p.label, "start": s.start, "end": end}
            if isinstance(p, BoundPhase):
                d["slot"] = p.slot
                d["complete"] = i + 1 < len(self.segs) or s.inner.is_final()
            out.append(d)
        return out
