"""One request being decoded: its tokens, their origins, its own KV cache and grammar
state, the logits waiting to be used, its counters and its trace recorder.

A scheduler (engine.decoding.scheduler) owns the forward passes and the sampling; a
`Sequence` decides everything else. Its life: `start()` (initial jump-forward) sets `feed`;
the scheduler runs the feed and calls `receive()`; `stage()` takes the next logits and its
bitmask row, the scheduler samples the whole batch on the device and reads its numbers
back in one transfer, and `accept()` records the step, accepts the token and either
jumps (a new `feed` with the re-tokenized tail) or feeds the token. `done` ends it;
`finish()` builds the trace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends import Matcher, TokenizerContext
from ..errors import CfsmError
from ..lazy import lazy_module
from ..runtimes.base import Feed, Runner
from .request import GenerateRequest
from .run_clock import est_forward_ms, est_masked_ms, run_clock
from .sampling import ALLOWED_SAMPLE, SamplePack, pack_sizes
from .token_text import TokenText, common_prefix, token_json
from .trace import (
    JumpRecord,
    JumpSkip,
    LiveToken,
    StepEvent,
    StepRecord,
    Trace,
    TraceRecorder,
    WaitEvent,
)
from .validate import validate_output

torch = lazy_module("torch")

EventFn = Callable[[str, Any], None]  # ("start", dict), ("step", StepEvent), ("wait", WaitEvent),
# ("end", dict)


@dataclass
class Pending:
    """Logits waiting to be sampled; `expect` is a backed-off token they re-decide."""

    logits: Any
    forward_s: float
    batch_size: int
    expect: int | None = None


@dataclass
class Staged:
    """A step between `stage()` and `accept()`."""

    pending: Pending
    bits: Any  # the allowed tokens' bitmask row on the device; None: nothing masked
    allowed: int
    state: dict
    mask_s: float
    sample_s: float = 0.0


@dataclass
class PlannedFeed:
    """What the next forward pass must take for this sequence and how to read it back."""

    tokens: list[int]
    keep: int = 1
    expect: list[int] = field(default_factory=list)  # candidates re-decided from its logits
    jump: JumpRecord | None = None


class Sequence:
    def __init__(
        self,
        req: GenerateRequest,
        compiled,
        ctx: TokenizerContext,
        texts: TokenText,
        prompt_ids: list[int],
        runner: Runner,
        on_event: EventFn | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.req = req
        self.compiled = compiled
        self.ctx = ctx
        self.texts = texts
        self.prompt_ids = prompt_ids
        self.runner = runner
        self.cache = runner.new_cache()
        if req.cold_prompt:
            runner.cold(self.cache)
        self.device = device = runner.device
        self.on_event = on_event
        self.should_stop = should_stop
        self.matcher: Matcher | None = compiled.matcher() if req.mode != "free" else None
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(int(req.seed))
        self.out_ids: list[int] = []
        self.origins: list[str] = []
        self.token_step: list[int] = []
        self.queue: list[Pending] = []
        self.feed: PlannedFeed | None = None
        self.rec = TraceRecorder()
        self.n = self.rec.n
        self.done = False
        self.finished = False
        self.reason = "max_new_tokens"
        self.error: BaseException | None = None
        self.t_created = time.perf_counter()
        self.t_start = self.t_created
        self.t_decode = self.t_created
        self.t_done = 0.0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Plan the first forward pass: the prompt, plus the forced start of the output
        when the constraint begins with a jump."""
        self.t_start = time.perf_counter()
        if not self.prompt_ids:
            raise CfsmError(
                "invalid_input",
                "the prompt is empty after tokenization (give a prompt, or drop --raw-prompt)",
            )
        if self.req.mode == "jump":
            self._jump_or_feed(-1, self.prompt_ids)
        else:
            self.feed = PlannedFeed(list(self.prompt_ids))
        self._emit(
            "start",
            {
                "prompt_tokens": len(self.prompt_ids),
                "initial_jump": self.rec.jumps[0].to_json() if self.rec.jumps else None,
            },
        )

    def feed_for_runner(self) -> Feed:
        return Feed(self.cache, self.feed.tokens, self.feed.keep)

    def receive(self, rows, forward_s: float, batch_size: int) -> None:
        """Take the logits of the planned feed (its last `keep` rows)."""
        f, self.feed = self.feed, None
        self.n.forward_passes += 1
        self.n.forward_s += forward_s
        first = self.n.prefill_ms is None
        shared = self.runner.cached_prefix(self.cache) if first else 0
        self.n.pass_sizes[len(f.tokens) - shared] += 1
        if not first and len(f.tokens) == 1:
            self.n.step_ms.append(forward_s * 1e3)
        elif not first:
            self.n.multi_ms.append(forward_s * 1e3)
            self.n.multi_tokens.append(len(f.tokens))
        self.n.batched_passes += batch_size > 1
        if first:
            self.n.prefill_ms = round(forward_s * 1e3, 3)
            self.n.first_feed_new = len(f.tokens) - shared  # an initial jump's tokens too
            # the first feed may carry a jump's tokens after the prompt: count the prompt's
            self.n.prompt_cached_tokens = min(shared, len(self.prompt_ids))
            self.t_decode = time.perf_counter()
        if f.jump is not None:
            f.jump.forward_ms = round(forward_s * 1e3, 3)
        c = len(f.expect)
        self.queue = [
            Pending(rows[i], forward_s if i == 0 else 0.0, batch_size, f.expect[i])
            for i in range(c)
        ]
        self.queue.append(Pending(rows[c], 0.0 if c else forward_s, batch_size))

    def hold(self) -> None:
        """The runtime held this sequence's feed back for want of cache: it waits (the feed
        stays planned) unless the caller pressed Stop meanwhile; a listener hears of it."""
        self.n.kv_held_passes += 1
        if self.on_event is not None:
            ahead = self.runner.requests_ahead(self.cache)
            again = self.runner.recomputed_tokens(self.cache)
            self._emit("wait", WaitEvent(self.n.kv_held_passes, ahead, again))
        if self.should_stop is not None and self.should_stop():
            self._end(False, "cancelled")

    def stage(self) -> Staged | None:
        """Take the next logits and the grammar's mask for them; None when it is over."""
        if self.should_stop is not None and self.should_stop():
            return self._end(False, "cancelled")
        if len(self.out_ids) >= self.req.max_new_tokens:
            return self._end(False, "max_new_tokens")
        p = self.queue.pop(0)
        t = time.perf_counter()
        bits, allowed, state = None, self.ctx.vocab_size, {"char_state": None, "token_state": None}
        if self.matcher is not None:
            state = self.matcher.state_info()
            allowed = self.matcher.allowed_count()
            if allowed == 0:
                return self._end(False, "dead_end")
            bits = self.matcher.bitmask(self.device, self.ctx.vocab_size)
        return Staged(p, bits, int(allowed), state, time.perf_counter() - t)

    def pack_sizes(self, st: Staged) -> tuple[int, int]:
        """(raw, masked) top-k sizes this step's sample pack keeps."""
        return pack_sizes(self.req, st.bits is not None, self.ctx.vocab_size)

    def accept(self, st: Staged, pack: SamplePack) -> None:
        """Record the step, accept the chosen token and plan what comes next."""
        step = self._record(st, pack)
        tid = step.token_id
        if self.matcher is not None and self.req.trace_detail:
            self._detail(step, st.state)
        t_acc = time.perf_counter()
        if tid == self.ctx.eos_token_id and (self.matcher is None or self.matcher.is_final()):
            self._end(True, "eos")
            self._emit_step(step)
            return
        if self.matcher is not None and not self.matcher.accept_token(tid):
            raise self._refused(tid)
        g = time.perf_counter() - t_acc + st.mask_s
        step.grammar_us = round(g * 1e6, 1)
        self.n.grammar_s += g
        expect = st.pending.expect
        self._append(
            tid, "jump" if expect is not None and tid == expect else step.origin, step.index
        )
        if expect is not None:
            step.verified = tid == expect
            if step.verified:
                self._emit_step(step)
                return  # its keys/values are already in the cache
            self.queue = []
            self.crop_to(len(self.out_ids) - 1)
        self._jump_or_feed(step.index, [tid])
        self._emit_step(step)

    def _refused(self, tid: int) -> CfsmError:
        """The backend refused a token its own mask allowed: the one line that says which
        backend, which token, where, and the library's reason where it gives one."""
        why = self.matcher.refusal()
        name = getattr(self.matcher, "backend", "the backend")
        text = repr(self.texts.text(tid))
        return CfsmError(
            "dead_end",
            f"{name} refused token {tid} ({text}) it had allowed, after {len(self.out_ids)} "
            f"output tokens" + (f": {why}" if why else ""),
        )

    def _record(self, st: Staged, pack: SamplePack) -> StepRecord:
        tid = pack.token_id
        t = self.texts.text
        top = self.req.top_k
        self._likely = [(i, round(v, 6)) for i, v in pack.masked_top if v > 0]
        step = StepRecord(
            index=len(self.rec.steps),
            char_state=st.state.get("char_state"),
            token_state=st.state.get("token_state"),
            allowed=st.allowed,
            token_id=tid,
            token_text=t(tid),
            origin="forced" if st.allowed == 1 else "model",
            prob=round(pack.prob, 6),
            raw_prob=round(pack.raw_prob, 6),
            feasible_mass=round(min(1.0, pack.feasible_mass), 6),
            top_raw=[[i, t(i), round(v, 6)] for i, v in pack.raw_top[:top]],
            top_hex=self.texts.hexes(i for i, _v in pack.raw_top[:top]),
            top_masked=[[i, t(i), v] for i, v in self._likely[:top]],
            forward_ms=round(st.pending.forward_s * 1e3, 3),
            mask_us=round(st.mask_s * 1e6, 1),
            sample_us=round(st.sample_s * 1e6, 1),
            output_len=len(self.out_ids),
            batch_size=st.pending.batch_size,
            verifies=None
            if st.pending.expect is None
            else [st.pending.expect, t(st.pending.expect)],
            segment=st.state.get("segment"),
        )
        return self.rec.add_step(step)

    def _detail(self, step: StepRecord, state: dict) -> None:
        """Trace bookkeeping outside the timed sections: the most likely allowed tokens
        (by probability after masking, from the sampling pack) with the state each leads
        to, and the whole mask (deduplicated, compressed). Free text of a triggered
        constraint records no mask: nothing is masked there."""
        m = self.matcher
        step.char_offset = len(self.texts.bytes(self.out_ids).decode("utf-8", errors="ignore"))
        step.allowed_sample = [
            [x, self.texts.text(x), m.next_char_state(x), p]
            for x, p in self._likely[:ALLOWED_SAMPLE]
        ]
        if not state.get("free"):
            step.mask_key = self.rec.add_mask(m.allowed_ids(), self.ctx.vocab_size)

    # ------------------------------------------------------------------ tokens
    def _append(self, tid: int, origin: str, step_index: int) -> None:
        self.out_ids.append(tid)
        self.origins.append(origin)
        self.token_step.append(step_index)

    def crop_to(self, n_out: int) -> None:
        """Keep the cache for the prompt and the first `n_out` output tokens."""
        self.runner.crop(self.cache, len(self.prompt_ids) + n_out)

    def truncate(self, limit: int) -> None:
        """A jump can carry the output past max_new_tokens: the limit holds all the same."""
        if len(self.out_ids) > limit:
            del self.out_ids[limit:], self.origins[limit:], self.token_step[limit:]
            self.finished, self.reason = False, "max_new_tokens"

    def _only_eos(self) -> bool:
        m = self.matcher
        return m.allowed_count() == 1 and int(m.allowed_ids()[0]) == self.ctx.eos_token_id

    def _end(self, finished: bool, reason: str) -> None:
        self.done, self.finished, self.reason = True, finished, reason
        self.feed, self.queue = None, []
        if self.cache is not None:
            self.n.recomputed_tokens = self.runner.recomputed_tokens(self.cache)
            self.runner.free(self.cache)
        self.cache = None  # its views may pin a whole stacked cache: let it go now
        self.t_done = time.perf_counter()
        return None

    def cancel(self) -> None:
        if not self.done:
            self._end(False, "cancelled")

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self._end(False, "error")

    # ------------------------------------------------------------------ jump
    def _jump_or_feed(self, step_index: int, fed: list[int]) -> None:
        """After a confirmed token: jump if the forced text is long enough, else feed the
        token. Ends the sequence when only EOS remains."""
        plan = None
        if self.req.mode == "jump":
            t = time.perf_counter()
            js = self.matcher.jump_forward()
            if len(js) > self.req.jump_threshold:
                plan = self.jump(js, step_index)
                if isinstance(plan, str):
                    self.rec.add_skip(
                        JumpSkip(step_index, js, len(self.texts.bytes(self.out_ids)), plan)
                    )
                    plan = None
            self.n.grammar_s += time.perf_counter() - t  # re-tokenization is grammar-side work
        if plan is None:
            if self.matcher is not None and self.out_ids and self._only_eos():
                self._end(True, "complete")
                return
            self.feed = PlannedFeed(list(fed))
            return
        if plan is True:
            self._end(True, "complete")
            return
        self.feed = plan

    def jump(self, js: str, step_index: int) -> PlannedFeed | bool | str:
        """Apply a jump-forward of `js`: re-tokenize, crop the cache to the common prefix
        and plan the prefill. Returns the feed, True when the match is then complete, or
        the reason (nothing changed) when the jump cannot be made exact."""
        res = self._retokenize(js, self.req.healing_tokens)
        if isinstance(res, str):
            return res
        new_ids, cands, info = res
        keep = common_prefix(self.out_ids, new_ids)
        info.reused_output_tokens = keep
        self.rec.add_jump(info, step_index)
        confirmed = len(new_ids) - cands
        self.origins = self.origins[:keep] + ["jump"] * (confirmed - keep)
        self.token_step = self.token_step[:keep] + [step_index] * (confirmed - keep)
        if cands == 0 and self._only_eos():
            self.out_ids = new_ids
            return True
        fresh = self.cache.get_seq_length() == 0  # the initial jump: nothing cached yet
        in_cache = 0 if fresh else self.cache.get_seq_length() - len(self.prompt_ids)
        reuse = min(keep, in_cache)
        if not fresh:
            self.crop_to(reuse)
        feed = (list(self.prompt_ids) if fresh else []) + new_ids[reuse:]
        self.n.prefilled_tokens += len(new_ids) - reuse
        self.out_ids = new_ids[:confirmed]
        info.prefilled, info.prefilled_tokens, info.candidates = (
            len(new_ids) - reuse,
            self.texts.pairs(new_ids[reuse:]),
            cands,
        )
        return PlannedFeed(feed, keep=cands + 1, expect=new_ids[confirmed:], jump=info)

    def _retokenize(self, js: str, healing: int):
        """Append `js`, re-tokenize the current segment's output (all of it, for a
        constraint over the whole output) and re-walk the grammar. Up to `healing` trailing
        tokens that a vocabulary token could extend (and the grammar allows) become
        candidates, re-decided from the same prefill's logits. Returns (new ids,
        candidates, record) with the matcher before the candidates, or the reason (matcher
        unchanged)."""
        m, tb = self.matcher, self.texts.bytes
        base = m.retokenize_from()
        old_bytes = tb(self.out_ids[base:])
        try:
            old_text = old_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return "the output ends inside a UTF-8 character (the jump waits for it to complete)"
        t0 = time.perf_counter()
        seg_ids, why = self.ctx.continuation.exact(old_text + js)
        if seg_ids is None:
            return why
        new_ids = self.out_ids[:base] + seg_ids
        common = common_prefix(self.out_ids, new_ids)
        m.rollback(len(self.out_ids) - common)
        bad = self._walk(new_ids[common:])
        if bad is not None:
            for t_old in self.out_ids[common:]:
                m.accept_token(t_old)
            return (
                f"the backend refuses the re-tokenized token {self.texts.text(bad)!r} "
                "(the constraint allows the text but not this tokenization of it)"
            )
        js, new_ids, last = self._chain(js, new_ids)
        floor = len(tb(new_ids[:base])) + len(old_bytes)
        cands = 0
        while cands < healing and len(new_ids) - cands > 1:
            cut = len(new_ids) - cands - 1
            if len(tb(new_ids[:cut])) <= floor or (cut < last < len(new_ids)):
                break  # only tokens wholly inside the jumped text (its last piece) are re-decided
            m.rollback(1)
            ext = self.ctx.vocab.ids_extending(tb(new_ids[cut:]))
            if len(ext) and m.allows_any(ext):
                cands += 1
            else:
                m.accept_token(new_ids[cut])
                break
        p = self.texts.pairs
        info = JumpRecord(
            string=js,
            char_start=len(tb(self.out_ids[:base]).decode("utf-8", errors="ignore"))
            + len(old_text),
            tokens_before=p(self.out_ids),
            tokens_after=p(new_ids),
            backed_off=p(new_ids[len(new_ids) - cands :]),
            retokenize_us=round((time.perf_counter() - t0) * 1e6, 1),
        )
        return new_ids, cands, info

    def _walk(self, ids: list[int]) -> int | None:
        """Accept `ids` in order; on a refusal, undo them and return the refused id."""
        for i, t in enumerate(ids):
            if not self.matcher.accept_token(t):
                self.matcher.rollback(i)
                return t
        return None

    def _chain(self, js: str, new_ids: list[int]) -> tuple[str, list[int], int]:
        """A jump that closes a segment of a triggered constraint runs on into the next
        one's forced text (a call's end tag, the answer's opening) in the same prefill;
        each piece is tokenized on its own, as a segment starts at a token boundary."""
        m, last = self.matcher, len(new_ids)
        for _ in range(8):
            more = m.jump_forward() if m.retokenize_from() == len(new_ids) > 0 else ""
            ids = self.ctx.continuation.exact(more)[0] if more else None
            if not ids or self._walk(ids) is not None:
                break
            js, new_ids, last = js + more, new_ids + ids, len(new_ids)
        return js, new_ids, last

    # ------------------------------------------------------------------ events, trace
    def _emit(self, kind: str, data: dict) -> None:
        if self.on_event is not None:
            self.on_event(kind, data)

    def _emit_step(self, step: StepRecord) -> None:
        if self.on_event is None:
            return
        t = self.texts.text
        tokens = [
            LiveToken(x, t(x), o, s)
            for x, o, s in zip(self.out_ids, self.origins, self.token_step, strict=False)
        ]
        self._emit(
            "step",
            StepEvent(
                step=step,
                tokens=tokens,
                forward_passes=self.n.forward_passes,
                jumps=len(self.rec.jumps),
                elapsed_s=time.perf_counter() - self.t_start,
                snapshot=self.snapshot,
            ),
        )

    def finish(self, model_info: dict, scheduler: dict) -> Trace:
        """The trace of this request (call once, when `done`)."""
        self.truncate(self.req.max_new_tokens)
        trace = self._build(model_info, scheduler)
        valid, why, segments = self._validate(trace.text)
        trace.valid, trace.validation, trace.segments = valid, why, segments
        self._emit("end", {"totals": asdict(trace.totals)})
        return trace

    def snapshot(self) -> Trace:
        """The trace so far, for a live view (the page's step view while the run decodes):
        its steps, jumps, masks and tokens copied (decoding goes on), totals as they stand,
        the output not validated yet; the model card holds the vocabulary size only. Reads
        the recorder unlocked: call it where steps are recorded (an on_event listener)."""
        trace = self._build({"vocab_size": self.ctx.vocab_size}, {})
        trace.steps, trace.jumps = list(trace.steps), list(trace.jumps)
        trace.masks, trace.jump_skips = dict(trace.masks), list(trace.jump_skips)
        trace.validation = "not checked yet: the run is decoding"
        return trace

    def _build(self, model_info: dict, scheduler: dict) -> Trace:
        end = self.t_done or time.perf_counter()
        req, texts = self.req, self.texts
        totals = self.rec.totals(
            prompt_tokens=len(self.prompt_ids),
            output_tokens=len(self.out_ids),
            jumped_tokens=sum(1 for o in self.origins if o == "jump"),
            wall_s=end - self.t_start,
            decode_s=end - self.t_decode if self.n.prefill_ms is not None else 0.0,
            compile_s=self.compiled.compile_seconds if self.compiled is not None else 0.0,
            finished=self.finished,
            reason=self.reason,
            queue_s=self.t_start - self.t_created,
            est_forward_ms=est_forward_ms(self),
            est_masked_ms=est_masked_ms(self),
            runtime=self.runner.name,
            run_clock=run_clock(self),
        )
        return self.rec.build(
            request={
                **{k: v for k, v in asdict(req).items() if k != "constraint"},
                "constraint": None if req.constraint is None else asdict(req.constraint),
            },
            model=model_info,
            backend=req.backend if req.mode != "free" else None,
            mode=req.mode,
            prompt_tokens=len(self.prompt_ids),
            text=texts.bytes(self.out_ids).decode("utf-8", errors="replace"),
            valid=None,
            validation="",
            tokens=[
                token_json(texts, t, o, s)
                for t, o, s in zip(self.out_ids, self.origins, self.token_step, strict=True)
            ],
            totals=totals,
            scheduler=scheduler,
        )

    def _mark_segments(self, segments: list[dict]) -> None:
        """Steps whose matcher named no segment (a library's own trigger machinery) get the
        segment their token starts in."""
        for st in self.rec.steps:
            if st.segment is None and segments:
                at = [g["index"] for g in segments if g["start"] <= st.output_len]
                st.segment = at[-1] if at else segments[0]["index"]

    def _validate(self, text: str) -> tuple[bool | None, str, list[dict]]:
        """(valid, why, segments): a compiled constraint that checks its own outputs (a
        triggered one, segment by segment) does; otherwise the text is checked against
        the request's constraint."""
        if self.matcher is not None:
            own = self.compiled.check_output(
                self.matcher, self.ctx.vocab.token_bytes, self.out_ids, self.finished, self.reason
            )
            if own is not None:
                self._mark_segments(own[2])
                return own
        valid, why = validate_output(
            self.req.constraint if self.req.mode != "free" else None,
            text,
            self.finished,
            self.reason,
            self.matcher.is_final() if self.matcher is not None and self.finished else None,
        )
        return valid, why, []
