"""Another engine's tokens walked through this lab's automaton and masks: per token the
state, the allowed set, whether jump-forward would have skipped it (every character of it
forced), the engine's alternatives against the mask, and, at its step, any token outside
the constraint. The result is a trace (mode "replay") the step view draws."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from ..analysis.ideal import choice_tokens, free_char_flags, ideal_counts, token_char_starts
from ..backends import CompiledConstraint, TokenizerContext
from ..constraint import Constraint
from ..decoding.token_text import TokenText, token_json
from ..decoding.trace import StepRecord, Totals, Trace, TraceRecorder
from ..decoding.validate import validate_output
from ..regex.compressed import compressed_of
from ..regex.dfa import CharDFA
from .tokens import EngineToken, expected_line

ALLOWED_SAMPLE = 48  # as a decoded run's steps list them
EXPECTED_SAMPLE = 4  # allowed tokens a violation names


def forced_flags(dfa: CharDFA | None, text: str, ids: list[int], token_bytes) -> list[bool]:
    """Per token: no character in it was a choice (jump-forward writes it without the
    model), as `ideal_counts` counts them; characters past where `text` leaves the
    automaton count as choices."""
    if dfa is None:
        return [False] * len(ids)
    flags = free_char_flags(compressed_of(dfa), text, past_end=True)
    return [not c for c in choice_tokens(flags, text, ids, token_bytes)]


class ReplayWalk:
    """One walk; `trace()` once."""

    def __init__(self, constraint: Constraint, compiled: CompiledConstraint, dfa: CharDFA | None,
                 ctx: TokenizerContext) -> None:  # fmt: skip
        self.constraint, self.compiled, self.dfa, self.ctx = constraint, compiled, dfa, ctx
        self.rec = TraceRecorder()
        self.violations: list[dict] = []
        self.texts = TokenText(ctx)  # token texts as every trace writes them (<E5 9F>)

    def _alternatives(self, tok: EngineToken, allowed: np.ndarray | None, resolve) -> tuple:
        raw, masked, mass = [], [], 0.0
        for k, a in enumerate(tok.top):
            aid = resolve(a)
            p = round(float(np.exp(max(a.logprob, -700.0))), 6)
            raw.append([-1 - k if aid is None else aid, a.text, p])  # not in this vocabulary
            ok = aid is not None and allowed is not None and _has(allowed, aid)
            if ok:
                masked.append([aid, a.text, p])
                mass += p
        return raw, masked, mass

    def _sample(self, m, allowed: np.ndarray, tid: int, p, masked: list) -> list[list]:
        """The allowed tokens the step view lists: the engine's token (where allowed) and
        its allowed alternatives with its own probabilities, then the rest by id."""
        first = ([[tid, p]] if p is not None else []) + [[a[0], a[2]] for a in masked
                                                         if a[0] != tid]  # fmt: skip
        seen = {x for x, _ in first}
        rest = [[int(x), None] for x in allowed[:ALLOWED_SAMPLE] if int(x) not in seen]
        return [[x, self.texts.text(x), m.next_char_state(x), q]
                for x, q in (first + rest)[:ALLOWED_SAMPLE]]  # fmt: skip

    def run(self, tokens: list[EngineToken], ids: list[int], text: str, resolve) -> list[bool]:
        m, t = self.compiled.matcher(), self.ctx.vocab.token_bytes
        forced = forced_flags(self.dfa, text, ids, t)
        starts = token_char_starts(text, [len(t[tid] or b"") for tid in ids])
        for i, (tok, tid, char_at) in enumerate(zip(tokens, ids, starts, strict=True)):
            state = m.state_info() if not self.violations else {}
            allowed = m.allowed_ids() if not self.violations else None
            inside = allowed is not None and _has(allowed, tid)
            raw, masked, mass = self._alternatives(tok, allowed, resolve)
            p = tok.prob if tok.prob is not None else 0.0
            shown = self.texts.text(tid)
            # a token the mask refused (or any after it) was not fixed by the constraint
            forced[i] = forced[i] and inside
            step = self.rec.add_step(_step(i, state, allowed, tid, shown, forced[i], p, raw,
                                           masked, mass, tok.ms, char_at))  # fmt: skip
            if allowed is not None:
                step.mask_key = self.rec.add_mask(allowed, self.ctx.vocab_size)
                known = tok.prob if inside else None  # a re-tokenized output has none
                step.allowed_sample = self._sample(m, allowed, tid, known, masked)
            if allowed is not None and not (inside and m.accept_token(tid)):
                self.violations.append(self._violation(i, tid, step.token_text, char_at, allowed))
        self.final = not self.violations and m.is_final()
        return forced

    def _violation(self, i: int, tid: int, text: str, char_at: int, allowed: np.ndarray) -> dict:
        """Where the output left the constraint: the token, and what the mask allowed there
        (a few of its tokens by id), so the verdict says what was expected."""
        expected = [self.texts.text(int(x)) for x in allowed[:EXPECTED_SAMPLE]]
        return {"step": i, "token_id": tid, "text": text, "char_offset": char_at,
                "allowed": int(len(allowed)), "expected": expected}  # fmt: skip


def _has(sorted_ids: np.ndarray, tid: int) -> bool:
    k = int(np.searchsorted(sorted_ids, tid))
    return k < len(sorted_ids) and int(sorted_ids[k]) == tid


def _step(i, state, allowed, tid, text, forced, p, raw, masked, mass, ms, char_at):
    return StepRecord(
        index=i,
        char_state=state.get("char_state"),
        token_state=state.get("token_state"),
        allowed=0 if allowed is None else int(len(allowed)),
        token_id=tid,
        token_text=text,
        origin="forced" if forced else "model",
        prob=round(p, 6),
        raw_prob=round(p, 6),
        feasible_mass=round(min(1.0, mass), 6),
        top_raw=raw,
        top_masked=masked,
        forward_ms=ms or 0.0,
        mask_us=0.0,
        sample_us=0.0,
        output_len=i,
        char_offset=char_at,
    )


def replay_trace(walk: ReplayWalk, tokens: list[EngineToken], ids: list[int], text: str,
                 resolve, meta: dict) -> Trace:  # fmt: skip
    """The walk as a trace: steps and masks, the engine's tokens, and `replay` with what
    jump-forward would have saved on this output and where it left the constraint."""
    forced = walk.run(tokens, ids, text, resolve)
    n, n_forced = len(ids), sum(forced)
    streamed = [t.ms for t in tokens if t.ms is not None]
    wall = round(sum(streamed) / 1e3, 4)
    valid, why = validate_output(walk.constraint, text, walk.final, "replay", walk.final)
    if walk.violations:  # not "incomplete": the engine wrote what the constraint refuses
        v = walk.violations[0]
        valid, why = (
            False,
            f"outside the constraint at step {v['step']}: the engine wrote {v['text']!r}, "
            f"where the mask allowed {expected_line(v)}",
        )
    totals = Totals(
        forward_passes=n, output_tokens=n, prompt_tokens=meta.get("prompt_tokens", 0),
        prefilled_tokens=0, steps=n, model_steps=n - n_forced, forced_steps=n_forced,
        jumped_tokens=0, jumps=0, jumped_chars=0, wall_s=wall, decode_s=wall, prefill_ms=0.0,
        forward_s=wall, grammar_s=0.0, grammar_us_per_step=0.0, sample_us_per_step=0.0,
        forward_ms_per_pass=round(wall * 1e3 / n, 3) if streamed and n else 0.0,
        tokens_per_s=round(n / wall, 2) if wall > 0 else None, compile_s=0.0,
        finished=walk.final, reason="replay",
    )  # fmt: skip
    tr = walk.rec.build(
        request={"prompt": meta.get("prompt", ""), "mode": "replay",
                 "constraint": asdict(walk.constraint), "replay_of": meta.get("model", "")},
        model={"name": meta.get("model", ""), "runtime": meta.get("endpoint") or "pasted",
               "vocab_size": walk.ctx.vocab_size, "eos_token_id": walk.ctx.eos_token_id},
        backend=walk.compiled.backend if hasattr(walk.compiled, "backend") else None,
        mode="replay", prompt_tokens=totals.prompt_tokens, text=text,
        tokens=[token_json(walk.texts, tid, s.origin, i)
                for i, (tid, s) in enumerate(zip(ids, walk.rec.steps, strict=True))],
        totals=totals, scheduler={"kind": "replay", "max_batch": 1}, valid=valid,
        validation=why,
    )  # fmt: skip
    ideal = None
    if walk.dfa is not None and not walk.violations:
        ideal = ideal_counts(compressed_of(walk.dfa), text, ids, walk.ctx.vocab.token_bytes)
        if ideal is not None:
            ideal["ideal_forward_passes"] = ideal["model_tokens"]
    tr.replay = {
        **{k: meta.get(k) for k in ("endpoint", "model", "source", "ids_from")},
        "tokens": n,
        "forced_tokens": n_forced,
        "model_tokens": n - n_forced,
        # what jump-forward would have saved on this output: its forced tokens' passes
        "passes_saved": n_forced,
        "saved_fraction": round(n_forced / n, 3) if n else 0.0,
        "streamed_ms": round(sum(streamed), 3) if streamed else None,
        "violations": walk.violations,
    }
    tr.ideal = ideal
    return tr
