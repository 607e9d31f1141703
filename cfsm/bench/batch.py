"""Batched decoding of a fixed set of prompts (the batch benchmark): the same sequences
and scheduler as every other path, with one summary of the batch.

Each request keeps its own KV cache and grammar state; a batched step stacks the caches
left-padded and splits the new position back; requests that jump in the same step prefill
together in one pass, each on its own prefix. Boundary back-off is off by default here
(healing_tokens=0, as in SGLang)."""

from __future__ import annotations

import time

from engine.backends import CompiledConstraint
from engine.decoding.decoder import Decoder
from engine.decoding.request import GenerateRequest


def run_batch(
    dec: Decoder,
    prompts: list[str],
    compiled: CompiledConstraint,
    mode: str = "jump",
    max_new_tokens: int = 256,
    jump_threshold: int = 1,
    healing_tokens: int = 0,
) -> dict:
    """Decode all prompts together (greedy). Returns texts, per-request latency and totals."""
    seqs = [
        dec.sequence(
            GenerateRequest(
                prompt=p,
                constraint=compiled.constraint,
                mode=mode,
                backend=compiled.backend,
                max_new_tokens=max_new_tokens,
                jump_threshold=jump_threshold,
                healing_tokens=healing_tokens,
                trace_detail=False,
            ),
            compiled,
        )
        for p in prompts
    ]
    t0 = time.perf_counter()
    counts = dec.run_many(seqs)
    wall = time.perf_counter() - t0
    for s in seqs:
        if s.error is not None:
            raise s.error
        s.truncate(max_new_tokens)
    out_tokens = sum(len(s.out_ids) for s in seqs)
    return {
        "mode": mode,
        "batch_size": len(prompts),
        "texts": [dec.texts.bytes(s.out_ids).decode("utf-8", errors="replace") for s in seqs],
        "finished": [s.finished for s in seqs],
        "latency_s": [round(s.t_done - t0, 3) for s in seqs],
        "wall_s": round(wall, 3),
        "output_tokens": out_tokens,
        "tokens_per_s": round(out_tokens / wall, 2),
        "batched_passes": counts.decode_passes,
        "jump_prefill_passes": counts.jump_passes,
        "prompt_prefill_passes": counts.prefill_passes,
        "own_passes": sum(s.n.forward_passes for s in seqs),
    }
