"""What a pass costs on llama.cpp, measured at the start of `cfsm bench peers`, and the lower
bound it puts on a constrained run: no decoder on this runtime can produce a run's output
faster than its prompt's prefill, one one-token pass per token the model picks (after the
first), and each jumped or forced token at the per-token cost of a many-token pass.

The one-token step is timed on 1 thread and on every core, and the faster count is the one
both sides (the llama.cpp peers and cfsm's llama.cpp runner) step on."""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from .llamacpp_peer import LlamaCppGrammarPeer

CHUNK = 16  # tokens in the many-token pass timed for the per-token cost


@dataclass
class LlamaCosts:
    step_ms: dict[int, float]  # median one-token pass, by step thread count
    best_threads: int
    chunk_ms: float  # median pass of CHUNK tokens, every core
    per_token_ms: float  # chunk_ms / CHUNK: a jumped token's share of its pass

    def to_json(self) -> dict:
        return asdict(self)


def _timed_steps(peer: LlamaCppGrammarPeer, ids: list[int], n: int) -> float:
    peer.cached = []
    peer.generate(ids, None, 1)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        peer._eval([ids[-1]], len(peer.cached))
        times.append(time.perf_counter() - t)
        peer.cached.append(ids[-1])
    return 1e3 * statistics.median(times)


def _timed_chunks(peer: LlamaCppGrammarPeer, ids: list[int], n: int) -> float:
    peer.cached = []
    peer.generate(ids, None, 1)
    lib, start, times = peer.llm.lib, len(peer.cached), []
    chunk = (ids * CHUNK)[:CHUNK]
    for _ in range(n):
        lib.llama_memory_seq_rm(peer.mem, 0, start, -1)
        t = time.perf_counter()
        peer._eval(chunk, start)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def measure_costs(llm, ids: list[int], steps: int = 48, chunks: int = 9) -> LlamaCosts:
    """Medians over `steps` one-token passes per thread count and `chunks` passes of CHUNK
    tokens, after `ids` as the prompt, each on a fresh context of `llm`."""
    step_ms = {}
    for threads in sorted({1, llm.threads}):
        peer = LlamaCppGrammarPeer(llm, step_threads=threads)
        try:
            step_ms[threads] = round(_timed_steps(peer, ids, steps), 3)
            if threads == llm.threads:
                chunk_ms = _timed_chunks(peer, ids, chunks)
        finally:
            peer.close()
    best = min(step_ms, key=step_ms.get)
    return LlamaCosts(step_ms, best, round(chunk_ms, 3), round(chunk_ms / CHUNK, 3))


def limit_ms(trace: dict, costs: LlamaCosts) -> float:
    """The lower bound for one cfsm run (its trace): its measured prefill, one one-token
    step for each token the model picked after the first (the prefill's logits pick the
    first; a jump made after a step gives the logits for the pick after it; a jump before
    the first step rides in the prefill), and each jumped or forced token at its share of a
    many-token pass."""
    t = trace["totals"]
    later_jumps = sum(1 for j in trace.get("jumps", []) if j.get("step", -1) >= 0)
    steps = max(0, t["model_steps"] - 1 - later_jumps)
    return (
        t["prefill_ms"]
        + steps * costs.step_ms[costs.best_threads]
        + (t["jumped_tokens"] + t["forced_steps"]) * costs.per_token_ms
    )
