"""`cfsm bench kv-pressure`: 16 SGLang character requests (jump, greedy, up to 200 tokens)
at once through the continuous batcher on a small llama.cpp KV cache, each output compared
with the same request decoded alone on the default cache. Target: 16 answers, each equal,
on 2,048 and on 1,024 cells (requests wait for cells or are evicted and recompute)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import time

from engine.constraint import Constraint
from engine.decoding.decoder import Decoder
from engine.decoding.model import embedded_gguf_path
from engine.decoding.request import GenerateRequest
from engine.runtimes.llamacpp_runner import LlamaCppRunner, LlamaModel
from engine.serving.service import Engine

from .decode import _paper_bench
from .suite import Flag, Suite


def pressure_run(eng: Engine, cells: int, reqs: list[GenerateRequest], comp) -> dict:
    base = eng.ensure_model("llamacpp")
    lm = LlamaModel(str(embedded_gguf_path()), n_ctx=cells)
    runner = LlamaCppRunner(lm)
    runner.costs = base.runner.costs
    dec = Decoder(dataclasses.replace(base.lm, model=lm, runner=runner), ctx=base.ctx)

    def one(r):
        try:
            return dec.submit(r, comp)
        except Exception as exc:  # noqa: BLE001 - a failed request is counted, not raised
            return exc

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(len(reqs)) as pool:
        traces = list(pool.map(one, reqs))
    wall = time.perf_counter() - t0
    dec.close()
    ok = [t for t in traces if not isinstance(t, Exception)]
    return {
        "cells": lm.n_ctx,
        "wall_s": round(wall, 2),
        "evictions": runner.evictions,
        "texts": [None if isinstance(t, Exception) else t.text for t in traces],
        "errors": [str(t) for t in traces if isinstance(t, Exception)],
        "held_passes": [t.totals.kv_held_passes for t in ok],
        "recomputed_tokens": [t.totals.recomputed_tokens for t in ok],
    }


def run(cells: list[int], n: int = 16, log=print) -> dict:
    bench = _paper_bench()["character"]
    c = Constraint("regex", bench["regex"])
    prompts = [bench["prompt_template"].format(name=name) for name in bench["names"][:n]]
    reqs = [
        GenerateRequest(prompt=p, constraint=c, mode="jump", max_new_tokens=200) for p in prompts
    ]
    eng = Engine(runtime="llamacpp")
    try:
        comp = eng.compile(c, "fsm").compiled
        alone = [eng.generate(r).text for r in reqs]
        out: dict = {"requests": len(reqs), "runs": []}
        for k in cells:
            r = pressure_run(eng, k, reqs, comp)
            r["answered"] = sum(t is not None for t in r["texts"])
            r["equal_to_alone"] = sum(a == b for a, b in zip(alone, r["texts"], strict=True))
            del r["texts"]
            out["runs"].append(r)
            log(r)
    finally:
        eng.close()
    return out


def format_table(res: dict) -> str:
    n = res["requests"]
    rows = [
        "| cells | answered | equal to its single run | evictions | passes held | wall s |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["runs"]:
        rows.append(
            f"| {r['cells']:,} | {r['answered']} of {n} | {r['equal_to_alone']} | "
            f"{r['evictions']} | {sum(r['held_passes'])} | {r['wall_s']} |"
        )
    return "\n".join(rows)


SUITE = Suite(
    "kv-pressure",
    "16 character requests at once on a small llama.cpp KV cache: every one answered, each "
    "equal to its single run",
    lambda args, log: run(args.cells, args.requests, log=log),
    format_table,
    (
        Flag("--cells", {"type": int, "nargs": "+", "default": [2048, 1024]}),
        Flag("--requests", {"type": int, "default": 16, "help": "requests at once"}),
    ),
    model=False,
)
