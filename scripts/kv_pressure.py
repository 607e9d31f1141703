"""16 SGLang character requests (jump, greedy, up to 200 tokens) through the continuous
batcher on a small llama.cpp KV cache, each output compared with the same request decoded
alone on the default cache (issue target: 16 answers, each equal, on 2,048 and 1,024 cells).

    .venv/bin/python scripts/kv_pressure.py --cells 2048 1024 --out bench-results/kv-pressure.json
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.constraint import Constraint  # noqa: E402
from engine.decoding.decoder import Decoder  # noqa: E402
from engine.decoding.model import embedded_gguf_path  # noqa: E402
from engine.decoding.request import GenerateRequest  # noqa: E402
from engine.runtimes.llamacpp_runner import LlamaCppRunner, LlamaModel  # noqa: E402
from engine.serving.service import Engine  # noqa: E402

BENCH = ROOT.parent / "shared" / "paper-bench" / "sglang_json_benchmark.json"


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, nargs="+", default=[2048, 1024])
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--out", default="bench-results/kv-pressure.json")
    args = ap.parse_args()
    bench = json.loads(BENCH.read_text())
    c = Constraint("regex", bench["character"]["regex"])
    names = (bench["character"]["names"])[: args.n]
    prompts = [bench["character"]["prompt_template"].format(name=n) for n in names]
    reqs = [
        GenerateRequest(prompt=p, constraint=c, mode="jump", max_new_tokens=200) for p in prompts
    ]
    eng = Engine()
    comp = eng.compile(c, "fsm").compiled
    alone = [eng.generate(r)["text"] for r in reqs]
    out = {"requests": len(reqs), "runs": []}
    for cells in args.cells:
        r = pressure_run(eng, cells, reqs, comp)
        r["answered"] = sum(t is not None for t in r["texts"])
        r["equal_to_alone"] = sum(a == b for a, b in zip(alone, r["texts"], strict=True))
        del r["texts"]
        out["runs"].append(r)
        print(json.dumps(r))
    eng.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
