"""`cfsm bench vocab`: the host's share of a decoding step on the PyTorch path, by
vocabulary size. A tiny random model (built here, REFERENCES section 7) is given output
layers of different widths (rows added past the tokenizer's, the first rows' weights
unchanged), so the forward pass stays small and what grows with the vocabulary is the work
around it. Per width and batch size: greedy masked decoding of `[a-z ]{400}` (every step
a model step, many allowed tokens), timed whole and in its forward passes. Host time a
step = (wall - forward seconds) / decode passes, split into the sampling (the logits
stacked, the bitmask unpacked and applied, softmax, top-k, one host transfer: vocabulary
wide, and on a CPU the device is the host) and the rest (grammar, Python, bookkeeping);
medians of a few rounds. The same requests give the same texts at every width (the extra
rows are never allowed), checked."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from engine.constraint import Constraint
from engine.lazy import lazy_module

from .batch import run_batch
from .suite import Flag, Suite, tokens_flag
from .tiny_models import build_model

service = lazy_module("engine.serving.service")

REGEX = "[a-z ]{400}"
PROMPTS = ["the city of", "a student of", "harry potter and", "the capital", "magic is",
           "london and paris", "the order of", "true or false"]  # fmt: skip


def measure(folder: Path, device: str, sizes: list[int], max_new: int, rounds: int) -> list:
    """Rows for one model folder: per batch size, the median round's host and forward
    milliseconds a decode pass, and the texts."""
    eng = service.Engine(str(folder), device, runtime="transformers")
    dec = eng.ensure_model()
    compiled = eng.compile(Constraint("regex", REGEX), "fsm").compiled
    run_batch(dec, PROMPTS[:1], compiled, "masked", 8)  # untimed: first visits
    rows = []
    for size in sizes:
        runs = [run_batch(dec, PROMPTS[:size], compiled, "masked", max_new) for _ in range(rounds)]
        steps = [max(r["batched_passes"], 1) for r in runs]
        host = [(r["wall_s"] - r["forward_s"]) / n for r, n in zip(runs, steps, strict=True)]
        sample = [r["sample_s"] / n for r, n in zip(runs, steps, strict=True)]
        fwd = [r["forward_s"] / max(r["batched_passes"] + r["prompt_prefill_passes"], 1)
               for r in runs]  # fmt: skip
        rows.append({
            "logits": dec.ctx.vocab_size,
            "batch": size,
            "host_ms_per_step": round(1e3 * statistics.median(host), 3),
            # of which the vocabulary-wide sampling ops (on a CPU the device is the host)
            "sampling_ms_per_step": round(1e3 * statistics.median(sample), 3),
            "rest_ms_per_step": round(1e3 * statistics.median(
                [h - s for h, s in zip(host, sample, strict=True)]), 3),
            "forward_ms_per_pass": round(1e3 * statistics.median(fwd), 3),
            "steps": runs[0]["batched_passes"],
            "texts": runs[0]["texts"],
        })  # fmt: skip
    return rows


def run(args, log=print) -> dict:
    widths = [int(v) for v in args.vocab_sizes.split(",")]
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    device = args.device or "cpu"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for width in widths:
            folder = build_model(Path(tmp) / str(width), "byte_level", "llama", logits=width)
            for r in measure(folder, device, sizes, args.max_new_tokens, args.rounds):
                rows.append(r)
                log(f"{r['logits']:7d} logits, batch {r['batch']:2d}: host "
                    f"{r['host_ms_per_step']:.3f} ms a step, forward "
                    f"{r['forward_ms_per_pass']:.3f} ms a pass")  # fmt: skip
    same = all(a["texts"] == b["texts"] for a in rows for b in rows if a["batch"] == b["batch"])
    return {"suite": "vocab", "device": device, "runtime": "transformers", "regex": REGEX,
            "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
            "same_texts_at_every_width": same, "rows": rows}  # fmt: skip


def table(res: dict) -> str:
    by = {(r["logits"], r["batch"]): r for r in res["rows"]}
    narrowest = min(w for w, _ in by)
    lines = [
        f"PyTorch on {res['device']}, masked greedy `{res['regex']}`, {res['max_new_tokens']} "
        f"tokens; median of {res['rounds']} rounds; same texts at every width: "
        f"{res['same_texts_at_every_width']}",
        "| logits | batch | forward ms a pass | host ms a step | of which sampling | rest | "
        "rest vs narrowest |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (w, b), r in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        base = by[(narrowest, b)]["rest_ms_per_step"]
        lines.append(
            f"| {w} | {b} | {r['forward_ms_per_pass']} | {r['host_ms_per_step']} | "
            f"{r['sampling_ms_per_step']} | {r['rest_ms_per_step']} | "
            f"{r['rest_ms_per_step'] / max(base, 1e-9):.2f}x |"
        )
    return "\n".join(lines)


SUITE = Suite(
    name="vocab",
    help="the host's share of a PyTorch decoding step by vocabulary size (tiny models)",
    run=run,
    table=table,
    flags=(
        Flag("--vocab-sizes", {"default": "1024,151936", "help": "output-layer widths"}),
        Flag("--batch-sizes", {"default": "1,8"}),
        Flag("--rounds", {"type": int, "default": 3}),
        Flag("--device", {"default": None, "help": "default cpu (the PyTorch CPU path)"}),
        tokens_flag(64),
    ),
    model=False,
)
