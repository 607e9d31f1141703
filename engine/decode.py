"""The decoding loop: free, masked, and jump-forward with re-tokenization, KV reuse and
boundary back-off. It drives any backend through `Matcher` and emits a plain trace."""

from __future__ import annotations

import base64
import hashlib
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .backends import CompiledConstraint, Matcher, TokenizerContext
from .constraint import Constraint
from .errors import CfsmError
from .limits import MAX_NEW_TOKENS as MAX_NEW_TOKENS_LIMIT
from .limits import MAX_PROMPT_CHARS
from .model import LoadedModel
from .trace import TRACE_VERSION

MODES = ("free", "masked", "jump")


@dataclass
class GenerateRequest:
    prompt: str
    constraint: Constraint | None = None
    mode: str = "jump"
    backend: str = "fsm"
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    raw_prompt: bool = False
    jump_threshold: int = 1
    healing_tokens: int = 2
    top_k: int = 10
    trace_detail: bool = True  # per-step allowed samples and masks for the visualizer

    def validate(self) -> None:
        if self.mode not in MODES:
            raise CfsmError("invalid_input", f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.mode != "free" and self.constraint is None:
            raise CfsmError("invalid_input", f"mode {self.mode!r} needs a constraint (regex, schema or grammar)")
        if len(self.prompt) > MAX_PROMPT_CHARS:
            raise CfsmError("input_too_large", f"prompt is {len(self.prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_LIMIT:
            raise CfsmError("invalid_input", f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS_LIMIT}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise CfsmError("invalid_input", "temperature must be >= 0 and top_p in (0, 1]")
        if self.healing_tokens < 0 or self.jump_threshold < 0:
            raise CfsmError("invalid_input", "healing_tokens and jump_threshold must be >= 0")


def encode_mask(ids, vocab_size: int) -> str:
    """Allowed ids -> base64(zlib(packbits)): a 49k-token mask takes ~100 bytes-2 KB.
    viz.plots.decode_mask reads it back."""
    import numpy as np

    bits = np.zeros(vocab_size, dtype=bool)
    bits[np.asarray(ids, dtype=np.int64)] = True
    return base64.b64encode(zlib.compress(np.packbits(bits).tobytes(), 6)).decode("ascii")


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _crop(cache, drop: int) -> None:
    """Drop the last `drop` positions (transformers 5.x takes a negative count)."""
    before = cache.get_seq_length()
    cache.crop(-drop)
    if cache.get_seq_length() != before - drop:
        raise RuntimeError("KV cache crop did not remove the expected number of tokens")


class Decoder:
    """One model + tokenizer context; runs requests one at a time (the model is shared)."""

    def __init__(self, lm: LoadedModel, ctx: TokenizerContext | None = None) -> None:
        self.lm = lm
        self.ctx = ctx or TokenizerContext(lm.tokenizer, lm.vocab_size, lm.eos_token_id)
        self.vocab = self.ctx.vocab
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def prompt_ids(self, prompt: str, raw: bool) -> list[int]:
        tok = self.lm.tokenizer
        if not raw and getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return list(tok.encode(text, add_special_tokens=False))
        return list(tok.encode(prompt, add_special_tokens=True))

    def token_text(self, tid: int) -> str:
        b = self.vocab.token_bytes[tid] if 0 <= tid < self.vocab.size else None
        if b is None:
            if tid == self.ctx.eos_token_id:
                return "<eos>"
            return self.lm.tokenizer.convert_ids_to_tokens(tid) or f"<{tid}>"
        return b.decode("utf-8", errors="replace")

    def _bytes(self, ids: list[int]) -> bytes:
        tb = self.vocab.token_bytes
        return b"".join(tb[t] or b"" for t in ids)

    def _forward(self, ids: list[int], cache, keep: int = 1):
        """Logits of the last `keep` positions after feeding `ids` on top of `cache`."""
        import torch

        x = torch.tensor([ids], dtype=torch.long, device=self.lm.device)
        out = self.lm.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=keep)
        return out.logits[0]

    def _select(self, logits, mask, req: GenerateRequest, gen) -> list[float]:
        """Mask, pick a token and gather the trace's top-k numbers on the device; one
        host transfer for everything."""
        import torch

        logits = logits.float()
        probs_raw = torch.softmax(logits, dim=-1)
        if mask is not None:
            masked = logits.masked_fill(~mask, float("-inf"))
            feasible = (probs_raw * mask).sum()
        else:
            masked = logits
            feasible = probs_raw.sum()
        probs_masked = torch.softmax(masked, dim=-1)
        if req.temperature <= 0:
            choice = torch.argmax(masked)
        else:
            p = torch.softmax(masked / req.temperature, dim=-1)
            if req.top_p < 1.0:
                sp, si = torch.sort(p, descending=True)
                keep = (torch.cumsum(sp, dim=-1) - sp) < req.top_p
                sp = sp * keep
                choice = si[torch.multinomial(sp / sp.sum(), 1, generator=gen)[0]]
            else:
                choice = torch.multinomial(p, 1, generator=gen)[0]
        k = min(req.top_k, logits.shape[-1])
        rv, ri = torch.topk(probs_raw, k)
        mv, mi = torch.topk(probs_masked, k)
        pack = torch.cat(
            [choice.float().view(1), feasible.view(1), probs_masked[choice].view(1), probs_raw[choice].view(1),
             rv, ri.float(), mv, mi.float()]
        )
        return pack.tolist()

    # ------------------------------------------------------------------ jump
    def _jump(self, matcher: Matcher, out_ids: list[int], js: str, healing: int):
        """Append `js`, re-tokenize the output alone and re-walk the grammar. Up to
        `healing` trailing tokens that a vocabulary token could extend (and the grammar
        allows) become *candidates*: the model re-decides them from the logits of the same
        prefill pass. Returns (new ids, number of candidates, info) with the matcher
        positioned before the candidates, or None (matcher unchanged) when the jump
        cannot be applied."""
        old_bytes = self._bytes(out_ids)
        try:
            old_text = old_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return None  # output ends inside a character: wait for it to complete
        t0 = time.perf_counter()
        new_ids = list(self.lm.tokenizer.encode(old_text + js, add_special_tokens=False))
        if self._bytes(new_ids) != (old_text + js).encode("utf-8"):
            return None  # tokenizer normalizes text: cannot re-tokenize faithfully
        common = _lcp(out_ids, new_ids)
        matcher.rollback(len(out_ids) - common)
        for i, t in enumerate(new_ids[common:]):
            if not matcher.accept_token(t):
                matcher.rollback(i)
                for t_old in out_ids[common:]:
                    matcher.accept_token(t_old)
                return None
        cands = 0
        while cands < healing and len(new_ids) - cands > 1:
            cut = len(new_ids) - cands - 1
            if len(self._bytes(new_ids[:cut])) <= len(old_bytes):
                break  # only tokens wholly inside the jumped text are re-decided
            tail = self._bytes(new_ids[cut:])
            matcher.rollback(1)
            ext = self.vocab.ids_extending(tail)
            if len(ext) and matcher.allows_any(ext):
                cands += 1
            else:
                matcher.accept_token(new_ids[cut])
                break
        info = {
            "string": js,
            "char_start": len(old_text),
            "tokens_before": [[t, self.token_text(t)] for t in out_ids],
            "tokens_after": [[t, self.token_text(t)] for t in new_ids],
            "backed_off": [[t, self.token_text(t)] for t in new_ids[len(new_ids) - cands:]],
            "retokenize_us": round((time.perf_counter() - t0) * 1e6, 1),
        }
        return new_ids, cands, info

    def _detail(self, step: dict, matcher: Matcher, masks: dict, out_ids: list[int], sample: int = 48) -> None:
        """Trace bookkeeping outside the timed sections: the first allowed tokens with
        the state each leads to, and the whole mask (deduplicated, compressed)."""
        ids = matcher.allowed_ids()
        step["char_offset"] = len(self._bytes(out_ids).decode("utf-8", errors="ignore"))
        step["allowed_sample"] = [
            [int(t), self.token_text(int(t)), matcher.next_char_state(int(t))] for t in ids[:sample]
        ]
        blob = encode_mask(ids, self.ctx.vocab_size)
        key = hashlib.sha1(blob.encode()).hexdigest()[:12]
        masks.setdefault(key, blob)
        step["mask_key"] = key

    # ------------------------------------------------------------------ run
    def run(
        self,
        req: GenerateRequest,
        compiled: CompiledConstraint | None = None,
        on_event: Callable[[str, dict], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> dict:
        req.validate()
        if req.mode != "free" and compiled is None:
            raise CfsmError("invalid_input", "a constrained mode needs a compiled constraint")
        with self._lock:
            return self._run(req, compiled, on_event, should_stop)

    def _run(self, req, compiled, on_event, should_stop) -> dict:
        import torch
        from transformers import DynamicCache

        emit = on_event or (lambda kind, data: None)
        t_start = time.perf_counter()
        dev = self.lm.device
        eos = self.ctx.eos_token_id
        prompt_ids = self.prompt_ids(req.prompt, req.raw_prompt)
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(req.seed))
        matcher = compiled.matcher() if req.mode != "free" else None
        cache = DynamicCache(config=self.lm.model.config)
        out_ids: list[int] = []  # confirmed output tokens
        origins: list[str] = []
        token_step: list[int] = []
        steps: list[dict] = []
        jumps: list[dict] = []
        masks: dict[str, str] = {}
        forward_passes = 0
        prefilled_tokens = 0
        forward_s = 0.0
        grammar_s = 0.0
        finished, reason = False, "max_new_tokens"
        # logits waiting to be used: (logits, forward seconds, expected token or None).
        # After a jump, the candidates' positions come from the same prefill pass.
        queue: list[tuple] = []

        def fwd(ids: list[int], keep: int = 1):
            nonlocal forward_passes, forward_s
            t = time.perf_counter()
            lg = self._forward(ids, cache, keep)
            forward_passes += 1
            dt = time.perf_counter() - t
            forward_s += dt
            return lg, dt

        def cache_keep(n_out: int) -> None:
            drop = cache.get_seq_length() - (len(prompt_ids) + n_out)
            if drop > 0:
                _crop(cache, drop)

        def only_eos() -> bool:
            ids = matcher.allowed_ids()
            return len(ids) == 1 and int(ids[0]) == eos

        def jump_or_feed(step_index: int, fed: list[int]) -> bool:
            """After a confirmed token: jump if the forced text is long enough, then
            queue the logits of one forward pass. Returns False when decoding is done."""
            nonlocal out_ids, origins, token_step, grammar_s, prefilled_tokens, queue
            res = None
            if req.mode == "jump":
                t = time.perf_counter()
                js = matcher.jump_forward()
                grammar_s += time.perf_counter() - t
                if len(js) > req.jump_threshold:
                    t = time.perf_counter()
                    res = self._jump(matcher, out_ids, js, req.healing_tokens)
                    grammar_s += time.perf_counter() - t  # re-tokenization is grammar-side work
            if res is None:
                if matcher is not None and out_ids and only_eos():
                    return False
                lg, dt = fwd(fed)
                queue = [(lg[-1], dt, None)]
                return True
            new_ids, cands, info = res
            keep = _lcp(out_ids, new_ids)
            info.update({"step": step_index, "reused_output_tokens": keep})
            jumps.append(info)
            if step_index >= 0:
                steps[step_index]["jump"] = len(jumps) - 1
            confirmed = len(new_ids) - cands
            origins = origins[:keep] + ["jump"] * (confirmed - keep)
            token_step = token_step[:keep] + [step_index] * (confirmed - keep)
            if cands == 0 and only_eos():
                out_ids = new_ids
                info.update({"prefilled": 0, "forward_ms": 0.0})
                return False
            fresh = cache.get_seq_length() == 0  # the initial jump: nothing cached yet
            in_cache = 0 if fresh else cache.get_seq_length() - len(prompt_ids)
            reuse = min(keep, in_cache)
            if not fresh:
                cache_keep(reuse)
            feed = (prompt_ids if fresh else []) + new_ids[reuse:]
            lg, dt = fwd(feed, keep=cands + 1)
            prefilled_tokens += len(new_ids) - reuse
            out_ids = new_ids[:confirmed]
            info.update({"prefilled": len(new_ids) - reuse, "prefilled_tokens": [[t, self.token_text(t)] for t in new_ids[reuse:]],
                         "forward_ms": round(dt * 1e3, 3), "candidates": cands})
            queue = [(lg[i], dt if i == 0 else 0.0, new_ids[confirmed + i]) for i in range(cands)] + [(lg[cands], 0.0 if cands else dt, None)]
            return True

        def emit_step(step: dict) -> None:
            if on_event is None:
                return
            emit("step", {
                "step": step,
                "tokens": [[t, self.token_text(t), o, si] for t, o, si in zip(out_ids, origins, token_step, strict=False)],
                "forward_passes": forward_passes,
                "jumps": len(jumps),
                "elapsed_s": time.perf_counter() - t_start,
            })

        # ---- prefill, with an initial jump when the constraint starts with forced text
        alive = True
        if req.mode == "jump":
            alive = jump_or_feed(-1, prompt_ids)
            if not queue and alive:
                lg, dt = fwd(prompt_ids)
                queue = [(lg[-1], dt, None)]
        else:
            lg, dt = fwd(prompt_ids)
            queue = [(lg[-1], dt, None)]
        if not alive:
            finished, reason = True, "complete"
        prefill_ms = round(forward_s * 1e3, 3)
        emit("start", {"prompt_tokens": len(prompt_ids), "initial_jump": jumps[0] if jumps else None})

        t_decode = time.perf_counter()
        while alive and queue:
            if should_stop is not None and should_stop():
                reason = "cancelled"
                break
            if len(out_ids) >= req.max_new_tokens:
                reason = "max_new_tokens"
                break
            logits, fwd_s_step, expect = queue.pop(0)
            t_mask = time.perf_counter()
            mask = None
            count = self.ctx.vocab_size
            state = {"char_state": None, "token_state": None}
            if matcher is not None:
                state = matcher.state_info()
                count = matcher.allowed_count()
                if count == 0:
                    reason = "dead_end"
                    break
                mask = matcher.mask(dev)
            mask_s = time.perf_counter() - t_mask
            t_sample = time.perf_counter()
            pack = self._select(logits, mask, req, gen)
            sample_s = time.perf_counter() - t_sample
            k = (len(pack) - 4) // 4
            tid = int(pack[0])
            raw_v, raw_i = pack[4 : 4 + k], pack[4 + k : 4 + 2 * k]
            m_v, m_i = pack[4 + 2 * k : 4 + 3 * k], pack[4 + 3 * k : 4 + 4 * k]
            step = {
                "index": len(steps),
                **state,
                "allowed": int(count),
                "token_id": tid,
                "token_text": self.token_text(tid),
                "origin": "forced" if count == 1 else "model",
                "prob": round(pack[2], 6),
                "raw_prob": round(pack[3], 6),
                "feasible_mass": round(min(1.0, pack[1]), 6),
                "top_raw": [[int(i), self.token_text(int(i)), round(v, 6)] for v, i in zip(raw_v, raw_i, strict=True)],
                "top_masked": [[int(i), self.token_text(int(i)), round(v, 6)] for v, i in zip(m_v, m_i, strict=True) if v > 0],
                "forward_ms": round(fwd_s_step * 1e3, 3),
                "mask_us": round(mask_s * 1e6, 1),
                "sample_us": round(sample_s * 1e6, 1),
                "jump": None,
                "output_len": len(out_ids),
            }
            if expect is not None:
                step["verifies"] = [expect, self.token_text(expect)]
            steps.append(step)
            if matcher is not None and req.trace_detail:
                self._detail(step, matcher, masks, out_ids)
            t_acc = time.perf_counter()
            if tid == eos and (matcher is None or matcher.is_final()):
                finished, reason = True, "eos"
                emit_step(step)
                break
            if matcher is not None and not matcher.accept_token(tid):
                raise CfsmError("dead_end", f"backend rejected token {tid} it had allowed")
            step["grammar_us"] = round((time.perf_counter() - t_acc + mask_s) * 1e6, 1)
            grammar_s += time.perf_counter() - t_acc + mask_s
            if expect is not None:
                origins.append("jump" if tid == expect else step["origin"])
                token_step.append(step["index"])
                out_ids.append(tid)
                if tid == expect:
                    step["verified"] = True
                    emit_step(step)
                    continue  # its keys/values are already in the cache
                step["verified"] = False
                queue = []
                cache_keep(len(out_ids) - 1)
            else:
                out_ids.append(tid)
                origins.append(step["origin"])
                token_step.append(step["index"])
            alive = jump_or_feed(step["index"], [tid])
            if not alive:
                finished, reason = True, "complete"
            emit_step(step)
        if len(out_ids) > req.max_new_tokens:
            # a jump can carry the output past the limit: the limit holds all the same
            del out_ids[req.max_new_tokens:], origins[req.max_new_tokens:], token_step[req.max_new_tokens:]
            finished, reason = False, "max_new_tokens"
        wall = time.perf_counter() - t_start
        decode_wall = time.perf_counter() - t_decode
        out_bytes = self._bytes(out_ids)
        text = out_bytes.decode("utf-8", errors="replace")
        tokens = [
            {"id": t, "text": self.token_text(t), "origin": o, "step": s}
            for t, o, s in zip(out_ids, origins, token_step, strict=True)
        ]
        model_steps = sum(1 for s in steps if s["origin"] == "model")
        n_steps = max(1, len(steps))
        totals = {
            "forward_passes": forward_passes,
            "output_tokens": len(out_ids),
            "prompt_tokens": len(prompt_ids),
            "prefilled_tokens": prefilled_tokens,
            "steps": len(steps),
            "model_steps": model_steps,
            "forced_steps": sum(1 for s in steps if s["origin"] == "forced"),
            "jumped_tokens": sum(1 for o in origins if o == "jump"),
            "jumps": len(jumps),
            "jumped_chars": sum(len(j["string"]) for j in jumps),
            "wall_s": round(wall, 4),
            "decode_s": round(decode_wall, 4),
            "prefill_ms": prefill_ms,
            "forward_s": round(forward_s, 4),
            "grammar_s": round(grammar_s, 5),
            "grammar_us_per_step": round(grammar_s * 1e6 / n_steps, 1),
            "sample_us_per_step": round(sum(s["sample_us"] for s in steps) / n_steps, 1),
            "forward_ms_per_pass": round(forward_s * 1e3 / max(1, forward_passes), 3),
            "tokens_per_s": round(len(out_ids) / wall, 2) if wall > 0 else None,
            "compile_s": round(compiled.compile_seconds, 4) if compiled is not None else 0.0,
            "finished": finished,
            "reason": reason,
        }
        trace = {
            "version": TRACE_VERSION,
            "request": {**{k: v for k, v in asdict(req).items() if k != "constraint"},
                        "constraint": None if req.constraint is None else asdict(req.constraint)},
            "model": {"name": self.lm.name, "device": dev, "dtype": self.lm.dtype, "vocab_size": self.ctx.vocab_size,
                      "eos_token_id": eos},
            "backend": req.backend if req.mode != "free" else None,
            "mode": req.mode,
            "prompt_tokens": len(prompt_ids),
            "text": text,
            "tokens": tokens,
            "steps": steps,
            "jumps": jumps,
            "masks": masks,
            "totals": totals,
        }
        emit("end", {"totals": totals})
        return trace
