"""How long one scrub step takes to re-render (every panel of the step view), for
automata of several sizes. Target: <= 200 ms per step up to 300 states."""

from __future__ import annotations

import json
import random
import statistics
import time

from .step_view import render_step

CASES = [
    ("date (small)", r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("person schema", None),
    ("SGLang character", "CHARACTER"),
    ("10k states", r"[a-z0-9]{1,9990}"),
]


def synthetic_trace(pattern: str, vocab_size: int = 49152, steps: int = 40, seed: int = 0) -> dict:
    """A trace shaped like the engine's, on a random string of the regex (no model)."""
    from engine.compressed import CompressedFSM
    from engine.regex_dfa import build_char_dfa
    from engine.service import automaton_json
    from engine.trace import StepRecord, Totals, Trace, encode_mask

    dfa = build_char_dfa(pattern)
    from engine.doctor import synthesize

    rng = random.Random(seed)
    text = (synthesize(dfa, 1, seed, soft_len=400, hard_len=800, stop_prob=0.01) or [""])[0]
    auto = automaton_json(dfa)
    path = [dfa.initial]
    for ch in text:
        path.append(dfa.step(path[-1], ch))
    auto["path"] = path
    cf = CompressedFSM(dfa)
    n = max(1, min(steps, len(text)))
    cuts = sorted(rng.sample(range(len(text)), n - 1)) if len(text) > n else list(range(len(text)))
    bounds = [0] + cuts + [len(text)]
    mask = encode_mask(list(range(0, vocab_size, 7)), vocab_size)
    tokens, st = [], []
    for i in range(len(bounds) - 1):
        a, b = bounds[i], bounds[i + 1]
        if a == b:
            continue
        piece, tid = text[a:b], 100 + i
        st.append(StepRecord(index=len(st), char_state=path[a], token_state=path[a], char_offset=a, allowed=7022,
                             token_id=tid, token_text=piece, origin="forced" if cf.is_jumpable(path[a]) else "model",
                             prob=0.5, raw_prob=0.4, feasible_mass=0.8, top_raw=[[tid, piece, 0.4]],
                             top_masked=[[tid, piece, 0.5]], forward_ms=50.0, mask_us=20.0, sample_us=100.0,
                             output_len=len(tokens), mask_key="m", allowed_sample=[[tid, piece, path[b]]]))
        tokens.append({"id": tid, "text": piece, "origin": st[-1].origin, "step": st[-1].index})
    n_tok = len(tokens)
    totals = Totals(forward_passes=n_tok + 1, output_tokens=n_tok, prompt_tokens=0, prefilled_tokens=0, steps=len(st),
                    model_steps=sum(s.origin == "model" for s in st), forced_steps=sum(s.origin == "forced" for s in st),
                    jumped_tokens=0, jumps=0, jumped_chars=0, wall_s=0.05 * (n_tok + 1), decode_s=0.05 * n_tok,
                    prefill_ms=50.0, forward_s=0.05 * (n_tok + 1), grammar_s=0.0, grammar_us_per_step=20.0,
                    sample_us_per_step=100.0, forward_ms_per_pass=50.0, tokens_per_s=20.0, compile_s=0.0,
                    finished=True, reason="complete")
    return Trace(request={"prompt": "", "mode": "masked"}, model={"vocab_size": vocab_size}, backend="fsm",
                 mode="masked", prompt_tokens=0, text=text, tokens=tokens, steps=st, jumps=[], masks={"m": mask},
                 totals=totals, scheduler={"kind": "synthetic", "max_batch": 1}, automaton=auto).to_json()


def measure(trace: dict) -> dict:
    n = len(trace["steps"])
    t0 = time.perf_counter()
    render_step(trace, 0)
    first = time.perf_counter() - t0
    times = []
    for i in range(1, n):
        t = time.perf_counter()
        render_step(trace, i)
        times.append(time.perf_counter() - t)
    times.sort()
    return {
        "states": trace["automaton"]["num_states"],
        "steps": n,
        "first_ms": round(first * 1e3, 1),
        "median_ms": round(statistics.median(times) * 1e3, 1) if times else None,
        "p95_ms": round(times[int(0.95 * (len(times) - 1))] * 1e3, 1) if times else None,
        "max_ms": round(times[-1] * 1e3, 1) if times else None,
    }


def main(out_path: str | None = None) -> dict:
    from pathlib import Path

    from app.presets import PERSON_SCHEMA, presets
    from engine.constraint import schema_to_regex

    results = {}
    for name, rx in CASES:
        if rx is None:
            rx = schema_to_regex(json.dumps(PERSON_SCHEMA), "spaced")
        elif rx == "CHARACTER":
            rx = presets()["SGLang character (regex)"]["text"]
        results[name] = measure(synthetic_trace(rx))
        print(f"{name:18s} {results[name]}")
    if out_path:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main("bench-results/scrub.json")
