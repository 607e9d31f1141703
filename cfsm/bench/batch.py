"""`cfsm bench batch`: what batching buys. The same greedy requests (the SGLang character
task) decoded one at a time and all at once, through the engine (a fixed batch, the
scheduler every path shares) and through `/v1` (concurrent `openai` clients against one
`cfsm serve`, whose continuous batch they join), per batch size and mode. Reported side by
side in one run: the throughput ratio, the pass-cost limit (the same ratio over the forward
passes' own measured time: what batching could reach if all other work were free), and how
many outputs equal their single run.

Each request keeps its own KV cache and grammar state; requests that jump in the same
step prefill together, each on its own prefix. Boundary back-off is off here
(healing_tokens=0, as in SGLang)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from engine.backends import CompiledConstraint
from engine.constraint import Constraint
from engine.decoding.decoder import Decoder
from engine.decoding.request import GenerateRequest
from engine.lazy import lazy_module

from .api import free_port
from .decode import paper_items
from .suite import Flag, Suite, tokens_flag

app_main = lazy_module("app.main")


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
        "forward_s": round(counts.forward_s, 4),
        "split": pass_split(counts),
        # the steps' sampling on the device (stack, select_batch, the host transfer)
        "sample_s": round(sum(st.sample_us for s in seqs for st in s.rec.steps) / 1e6, 4),
    }


SPLIT = ("decode_s", "decode_tokens", "prefill_s", "prefill_tokens")


def pass_split(counts, before=None) -> dict:
    """Where the forward seconds went (`PassCounts`' split, less `before`'s): passes of
    one-token feeds, and passes holding a prompt or jumped tokens."""
    return {k: getattr(counts, k) - (before[k] if before else 0) for k in SPLIT}


def per_token_ms(alone: dict, together: dict) -> dict:
    """Milliseconds a token fed, one at a time and all at once, in passes of one-token
    feeds ("decode") and in passes with prompts or jumped tokens ("prefill"): why a mode
    gains what it gains from batching."""

    def ms(split: dict, part: str):
        n = split[f"{part}_tokens"]
        return round(1e3 * split[f"{part}_s"] / n, 2) if n else None

    return {part: [ms(alone, part), ms(together, part)] for part in ("decode", "prefill")}


def compare(alone: dict, together: dict, size: int) -> dict:
    """One row: the same requests one at a time (`alone`: summed walls, tokens, forward
    seconds, their split and texts) against all at once."""
    thr_alone = alone["tokens"] / max(alone["wall_s"], 1e-9)
    thr_together = together["tokens"] / max(together["wall_s"], 1e-9)
    limit = alone["forward_s"] / max(together["forward_s"], 1e-9)
    same = sum(a == b for a, b in zip(alone["texts"], together["texts"], strict=True))
    return {
        "size": size,
        "alone_s": round(alone["wall_s"], 3),
        "together_s": round(together["wall_s"], 3),
        "alone_forward_s": round(alone["forward_s"], 3),
        "together_forward_s": round(together["forward_s"], 3),
        "tokens": [alone["tokens"], together["tokens"]],
        "throughput_x": round(thr_together / thr_alone, 3),
        "pass_cost_limit_x": round(limit, 3),
        "limit_over_achieved": round(limit / max(thr_together / thr_alone, 1e-9), 3),
        "same_as_alone": f"{same}/{size}",
        "ms_per_token": per_token_ms(alone["split"], together["split"]),
    }


def engine_row(dec: Decoder, compiled, prompts: list[str], mode: str, max_new: int) -> dict:
    """The engine's fixed batch against each request run alone through the same path."""
    runs = [run_batch(dec, [p], compiled, mode, max_new) for p in prompts]
    alone = {
        "wall_s": sum(r["wall_s"] for r in runs),
        "tokens": sum(r["output_tokens"] for r in runs),
        "forward_s": sum(r["forward_s"] for r in runs),
        "split": {k: sum(r["split"][k] for r in runs) for k in SPLIT},
        "texts": [r["texts"][0] for r in runs],
    }
    r = run_batch(dec, prompts, compiled, mode, max_new)
    together = {k: r[k] for k in ("wall_s", "forward_s", "split", "texts")}
    return compare(alone, {**together, "tokens": r["output_tokens"]}, len(prompts))


def median_row(runs: list[dict]) -> dict:
    """The repeat whose throughput ratio is the median (the lower middle of an even count),
    with every repeat's ratio beside it (how far one run's figure can be trusted) and the
    fewest outputs equal to their single run in any repeat."""
    ranked = sorted(runs, key=lambda r: r["throughput_x"])
    worst = min(runs, key=lambda r: int(r["same_as_alone"].split("/")[0]))
    return {
        **ranked[(len(ranked) - 1) // 2],
        "throughput_x_runs": [r["throughput_x"] for r in runs],
        "same_as_alone": worst["same_as_alone"],
    }


class V1Users:
    """One `openai` client per concurrent user against a running server; its continuous
    batch's pass counters give the forward seconds of each round."""

    def __init__(
        self, url: str, n: int, regex: str, max_new: int, counts, model: str = "embedded"
    ) -> None:
        import openai

        self.clients = [openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0)
                        for _ in range(n)]  # fmt: skip
        self.regex, self.max_new, self.counts, self.model = regex, max_new, counts, model

    def ask(self, i: int, prompt: str, mode: str) -> tuple[str, int]:
        extra = {} if mode == "free" else {"guided_regex": self.regex, "mode": mode}
        r = self.clients[i].chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}], temperature=0,
            max_tokens=self.max_new, extra_body=extra, timeout=600,
        )  # fmt: skip
        return r.choices[0].message.content, r.usage.completion_tokens

    def round(self, prompts: list[str], mode: str, at_once: bool) -> dict:
        counts = self.counts()
        before, split, t0 = counts.forward_s, pass_split(counts), time.perf_counter()
        jobs = list(enumerate(prompts))
        if at_once:
            with ThreadPoolExecutor(len(prompts)) as pool:
                outs = list(pool.map(lambda ip: self.ask(ip[0], ip[1], mode), jobs))
        else:
            outs = [self.ask(i, p, mode) for i, p in jobs]
        return {
            "wall_s": time.perf_counter() - t0,
            "forward_s": counts.forward_s - before,
            "split": pass_split(counts, split),
            "texts": [t for t, _ in outs],
            "tokens": sum(n for _, n in outs),
        }


def run(args, log=print) -> dict:
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    regex, items = paper_items("character", max(sizes))
    prompts = [p for _, p in items]
    port = free_port()
    demo, hub = app_main.serve(
        port=port, model=args.model, device=args.device, runtime=args.runtime,
        prevent_thread_lock=True,
    )  # fmt: skip
    try:
        eng = hub.get()
        dec = eng.ensure_model()
        compiled = eng.compile(Constraint("regex", regex), "fsm").compiled
        batcher = dec.serve()
        users = V1Users(f"http://127.0.0.1:{port}", max(sizes), regex, args.max_new_tokens,
                        lambda: batcher.counts, hub.default)  # fmt: skip
        dec.remeasure_costs = False  # whole calls are timed: no re-measuring inside them
        for mode in modes:  # untimed: compiles, first visits, the server's first request
            run_batch(dec, prompts[:1], compiled, mode, 16)
            users.ask(0, prompts[0], mode)
        rows = []
        for size in sizes:
            for mode in modes:
                part, got = prompts[:size], {"engine": [], "/v1": []}
                for _ in range(args.repeats):
                    got["engine"].append(engine_row(dec, compiled, part, mode, args.max_new_tokens))
                    alone = users.round(part, mode, False)
                    got["/v1"].append(compare(alone, users.round(part, mode, True), size))
                for surface, runs in got.items():
                    rows.append({"surface": surface, "mode": mode, **median_row(runs)})
                    log(_line(rows[-1]))
        info = dec.model_info()
    finally:
        demo.close()
    return {"suite": "batch", "runtime": info["runtime"], "device": info["device"],
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
            "rows": rows}  # fmt: skip


def _line(r: dict) -> str:
    runs = r.get("throughput_x_runs", [])
    spread = f" of {', '.join(f'{x:.2f}' for x in runs)}" if len(runs) > 1 else ""
    return (
        f"{r['surface']:6s} {r['mode']:6s} {r['size']:3d}: {r['alone_s']:7.2f} s alone, "
        f"{r['together_s']:7.2f} s together, {r['throughput_x']:.2f}x{spread} (pass-cost "
        f"limit {r['pass_cost_limit_x']:.2f}x), same as alone {r['same_as_alone']}; "
        f"ms a token fed {_ms(r)}"
    )


def _ms(r: dict) -> str:
    """'decode 14.2 -> 6.1, prefill 4.3 -> 3.9': ms a token fed, alone -> together."""
    got = r.get("ms_per_token") or {}
    return ", ".join(f"{part} {a} -> {b}" for part, (a, b) in got.items()) or "-"


def _spread(r: dict) -> str:
    runs = r.get("throughput_x_runs", [])
    return f" ({min(runs)}-{max(runs)})" if len(runs) > 1 else ""


def table(res: dict) -> str:
    lines = [
        f"runtime {res['runtime']} on {res['device']}; greedy, at most "
        f"{res['max_new_tokens']} tokens each",
        "| via | mode | requests | one at a time, s | all at once, s | throughput | "
        "pass-cost limit | limit / achieved | outputs as alone | ms a token fed, alone -> "
        "together |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['surface']} | {r['mode']} | {r['size']} | {r['alone_s']} | "
            f"{r['together_s']} | {r['throughput_x']}x{_spread(r)} | {r['pass_cost_limit_x']}x | "
            f"{r['limit_over_achieved']} | {r['same_as_alone']} | {_ms(r)} |"
        )
    return "\n".join(lines)


SUITE = Suite(
    name="batch",
    help="the same requests one at a time and all at once, via the engine and /v1, per mode",
    run=run,
    table=table,
    flags=(
        Flag("--batch-sizes", {"default": "1,4,8,16", "help": "concurrent requests"}),
        Flag("--modes", {"default": "masked,jump,free"}),
        Flag(
            "--repeats",
            {"type": int, "default": 1, "help": "rounds per cell; each row is the median round's"},
        ),  # fmt: skip
        tokens_flag(96),
    ),
)
