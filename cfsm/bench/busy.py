"""`cfsm bench busy`: does jump-forward still beat masked decoding when the machine is busy?

The character preset, masked and jump in turn, on the page's runtime, under each load:
`idle`; `busy`, one process spinning on each usable core; `bursty`, three processes per
two cores each busy half the time in 4 ms slices (a browser and a video call beside the
demo, where one thread of a pass is taken away at random and the others wait at every
barrier). Under each load both thread policies of the llama.cpp runtime run side by side:
`adaptive` (each kind of pass on the count measured faster as it runs, `PassThreads`) and
`every core` (every pass on every core, this runtime's setting before). Reported per cell:
median wall times, masked over jump (above 1: jump wins), and the card's time saved with
its sign (the page never shows a negative saving; a loss comes with its reason)."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager

from app.presets import presets
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.errors import CfsmError
from engine.runtimes.host_threads import usable_cpus
from viz.cards import stat_cards
from viz.summaries import time_saved_line

from .suite import Flag, Suite, with_engine

PRESET = "SGLang character (regex)"
LOADS = ("idle", "busy", "bursty")
SPIN = "while True: pass"
BURST = (
    "import time\nwhile True:\n t = time.perf_counter()\n"
    " while time.perf_counter() - t < 0.004: pass\n time.sleep(0.004)"
)


@contextmanager
def machine_load(kind: str):
    """Processes that load the machine as `kind` says, stopped on exit whatever happens."""
    cores = usable_cpus()
    code, n = {"idle": ("", 0), "busy": (SPIN, cores), "bursty": (BURST, (3 * cores + 1) // 2)}[
        kind
    ]
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        time.sleep(0.5 if procs else 0)
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextmanager
def thread_policy(eng, policy: str):
    """The llama.cpp runtime's passes on `policy`: 'adaptive' (as it runs) or 'every core'."""
    pt = eng.decoder.runner.lm.pass_threads
    fixed, explore = dict(pt.fixed), pt.explore
    if policy == "every core":
        every = eng.decoder.runner.lm.threads
        pt.fixed, pt.explore = dict.fromkeys(("step", "short", "long"), every), False
    try:
        yield
    finally:
        pt.fixed, pt.explore = fixed, explore


def _cell(eng, c: Constraint, prompt: str, repeats: int, max_new: int) -> dict:
    walls: dict[str, list[float]] = {"masked": [], "jump": []}
    saved, lines, negative = [], [], False
    for _ in range(repeats):
        for mode in ("masked", "jump"):
            req = GenerateRequest(prompt=prompt, constraint=c, mode=mode, max_new_tokens=max_new)
            t = eng.generate(req).totals
            walls[mode].append(t.wall_s)
            if mode == "jump":
                saved.append(t.time_saved())
                lines.append(time_saved_line(t))
                negative |= bool(re.search(r"-\d+%", stat_cards(t) + lines[-1]))
    med = {m: statistics.median(v) for m, v in walls.items()}
    return {
        "masked_s": round(med["masked"], 3),
        "jump_s": round(med["jump"], 3),
        "masked_over_jump": round(med["masked"] / max(med["jump"], 1e-9), 2),
        "card_time_saved": round(statistics.median(saved), 3),
        "negative_card": negative,
        "line": lines[-1],
    }


def run_busy(eng, loads: list[str], repeats: int, max_new: int, log=print) -> dict:
    unknown = [x for x in loads if x not in LOADS]
    if unknown:
        raise CfsmError("invalid_input", f"--loads: {unknown} not among {', '.join(LOADS)}")
    p = presets()[PRESET]
    c = Constraint(p["kind"], p["text"], p["whitespace"])
    eng.generate(GenerateRequest(prompt=p["prompt"], constraint=c, mode="masked"))  # untimed
    eng.generate(GenerateRequest(prompt=p["prompt"], constraint=c, mode="jump"))
    if eng.decoder.runner.name != "llamacpp":
        msg = "cfsm bench busy measures the llama.cpp runtime's thread policies (--runtime)"
        raise CfsmError("invalid_input", msg)
    rows = []
    for load in loads:
        with machine_load(load):
            for policy in ("adaptive", "every core"):
                with thread_policy(eng, policy):
                    row = {"load": load, "policy": policy}
                    row |= _cell(eng, c, p["prompt"], repeats, max_new)
                    row["threads_now"] = eng.decoder.runner.pass_threads()
                rows.append(row)
                log(
                    f"{load:7s} {policy:10s} masked {row['masked_s']:6.2f} s  jump "
                    f"{row['jump_s']:6.2f} s  masked/jump {row['masked_over_jump']:5.2f}x  "
                    f"card {100 * row['card_time_saved']:5.0f}%  threads {row['threads_now']}"
                )
    return {"suite": "busy", "preset": PRESET, "cpus": usable_cpus(), "repeats": repeats,
            "max_new_tokens": max_new, "rows": rows}  # fmt: skip


def format_table(res: dict) -> str:
    lines = [
        f"{res['preset']}, {res['cpus']} CPUs, medians of {res['repeats']} masked/jump pairs",
        "",
        "| load | threads | masked | jump | masked / jump | card: time saved | threads now |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        now = ", ".join(f"{k} {v}" for k, v in r["threads_now"].items())
        lines.append(
            f"| {r['load']} | {r['policy']} | {r['masked_s']:.2f} s | {r['jump_s']:.2f} s | "
            f"{r['masked_over_jump']:.2f}x | {100 * r['card_time_saved']:.0f}% | {now} |"
        )
    return "\n".join(lines)


SUITE = Suite(
    "busy",
    "the character preset masked vs jump on an idle and a busy machine, llama.cpp's "
    "threads chosen as it runs vs every core",
    lambda args, log: with_engine(
        args,
        lambda eng: run_busy(eng, args.loads.split(","), args.repeats, args.max_new_tokens, log),
    ),
    format_table,
    (
        Flag("--loads", {"default": ",".join(LOADS), "help": "comma-separated: idle,busy,bursty"}),
        Flag("--repeats", {"type": int, "default": 3, "help": "masked/jump pairs per cell"}),
        Flag("--max-new-tokens", {"type": int, "default": 200}),
    ),
)
