"""`cfsm bench`: masked vs jump side by side in one run, per backend, on the SGLang
character regex. Ratios, not absolute times, are what to compare on a noisy machine."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest
from engine.errors import CfsmError

from .report import write_report
from .suite import Suite, backends_flag, backends_of, names_flag, tokens_flag, with_engine

PAPER_BENCH = (
    Path(__file__).resolve().parents[3] / "shared" / "paper-bench" / "sglang_json_benchmark.json"
)


def _paper_bench() -> dict:
    if not PAPER_BENCH.exists():
        raise CfsmError("invalid_input", f"benchmark data not found at {PAPER_BENCH}")
    return json.loads(PAPER_BENCH.read_text())


CITY_DOCS = Path(__file__).resolve().parents[2] / "assets" / "city_documents.json"


def paper_items(task: str, names: int) -> tuple[str, list[tuple[str, str]]]:
    """(regex, [(label, prompt)]) for the SGLang character or city task."""
    data = _paper_bench()[task]
    if task == "character":
        items = [(n, data["prompt_template"].format(name=n)) for n in data["names"][:names]]
    else:
        docs = json.loads(CITY_DOCS.read_text(encoding="utf-8"))["documents"]
        items = [
            (city, data["prompt_template"].format(document=doc))
            for city, doc in list(docs.items())[:names]
        ]
    return data["regex"], items


def run_paper_character(
    engine,
    names: int,
    backends: list[str],
    max_new_tokens: int = 256,
    log=print,
    task: str = "character",
) -> dict:
    regex, items = paper_items(task, names)
    constraint = Constraint("regex", regex)
    picked = [label for label, _ in items]
    rows = []
    for b in backends:
        engine.compile(constraint, b)  # compile outside the timed runs
    # warm-up: first forward passes are slower (allocator, caches)
    engine.generate(
        GenerateRequest(prompt="Hello", constraint=constraint, mode="jump", max_new_tokens=16)
    )
    for backend in backends:
        for name, prompt in items:
            pair = {}
            for mode in ("masked", "jump"):
                tr = engine.generate(
                    GenerateRequest(
                        prompt=prompt,
                        constraint=constraint,
                        mode=mode,
                        backend=backend,
                        max_new_tokens=max_new_tokens,
                        temperature=0.0,
                        trace_detail=False,
                    )
                ).to_json()
                t = tr["totals"]
                pair[mode] = {
                    "forward_passes": t["forward_passes"],
                    "wall_s": t["wall_s"],
                    "output_tokens": t["output_tokens"],
                    "ideal_forward_passes": (tr.get("ideal") or {}).get("ideal_forward_passes"),
                    "grammar_us_per_step": t["grammar_us_per_step"],
                    "sample_us_per_step": t["sample_us_per_step"],
                    "forward_ms_per_pass": t["forward_ms_per_pass"],
                    "valid": tr["valid"]
                    is True,  # engine.decoding.validate: re.fullmatch of a finished output
                    "finished": t["finished"],
                    "text": tr["text"],
                }
            row = {
                "backend": backend,
                "name": name,
                **{f"{m}_{k}": v for m, d in pair.items() for k, v in d.items()},
                # greedy both ways: jump-forward changes the output only through the tokens
                # it re-tokenizes (the model then reads other boundaries than it would write)
                "same_output": pair["masked"]["text"] == pair["jump"]["text"],
            }
            rows.append(row)
            log(
                f"{backend:10s} {name:20s} masked {pair['masked']['forward_passes']:4d} passes "
                f"{pair['masked']['wall_s']:6.2f}s | jump {pair['jump']['forward_passes']:3d} "
                f"passes (ideal {pair['jump']['ideal_forward_passes']}) "
                f"{pair['jump']['wall_s']:5.2f}s | valid "
                f"{pair['masked']['valid']}/{pair['jump']['valid']}"
            )
    summary = {}
    for backend in backends:
        rs = [r for r in rows if r["backend"] == backend]
        m_fp = sum(r["masked_forward_passes"] for r in rs)
        j_fp = sum(r["jump_forward_passes"] for r in rs)
        ideal = sum(r["jump_ideal_forward_passes"] or 0 for r in rs)
        ideal_m = sum(r["masked_ideal_forward_passes"] or 0 for r in rs)
        m_w = sum(r["masked_wall_s"] for r in rs)
        j_w = sum(r["jump_wall_s"] for r in rs)
        g_us = statistics.mean(r["jump_grammar_us_per_step"] for r in rs)
        g_us_m = statistics.mean(r["masked_grammar_us_per_step"] for r in rs)
        f_ms = statistics.mean(r["jump_forward_ms_per_pass"] for r in rs)
        f_ms_m = statistics.mean(r["masked_forward_ms_per_pass"] for r in rs)
        s_us = statistics.mean(r["jump_sample_us_per_step"] for r in rs)
        s_us_m = statistics.mean(r["masked_sample_us_per_step"] for r in rs)
        summary[backend] = {
            "runs": len(rs),
            "masked_forward_passes": m_fp,
            "jump_forward_passes": j_fp,
            "ideal_forward_passes": ideal,
            "pass_reduction": round(m_fp / max(1, j_fp), 2),
            "ideal_reduction_of_masked_outputs": round(m_fp / max(1, ideal_m), 2),
            "jump_over_ideal": round(j_fp / max(1, ideal), 3),
            "masked_wall_s": round(m_w, 2),
            "jump_wall_s": round(j_w, 2),
            "wall_speedup": round(m_w / max(1e-9, j_w), 2),
            "grammar_us_per_step_masked": round(g_us_m, 1),
            "grammar_us_per_step_jump": round(g_us, 1),
            "grammar_overhead_pct_masked": round(100 * g_us_m / 1000 / f_ms_m, 2),
            "grammar_overhead_pct_jump": round(100 * g_us / 1000 / f_ms, 2),
            "mask_apply_sample_us_per_step_masked": round(s_us_m, 1),
            "mask_apply_sample_us_per_step_jump": round(s_us, 1),
            "forward_ms_per_pass_masked": round(f_ms_m, 2),
            "forward_ms_per_pass_jump": round(f_ms, 2),
            "valid_masked": sum(r["masked_valid"] for r in rs),
            "valid_jump": sum(r["jump_valid"] for r in rs),
            "same_output": sum(r["same_output"] for r in rs),
            "finished_masked": sum(r["masked_finished"] for r in rs),
            "finished_jump": sum(r["jump_finished"] for r in rs),
        }
    return {"suite": f"paper-{task}", "names": picked, "rows": rows, "summary": summary}


def format_table(result: dict) -> str:
    hdr = (
        "backend",
        "masked fp",
        "jump fp",
        "ideal fp",
        "fp ratio",
        "jump/ideal",
        "masked s",
        "jump s",
        "speedup",
        "grammar us/step (m/j)",
        "overhead % (m/j)",
        "apply+sample us (m/j)",
        "valid m/j",
        "finished m/j",
        "jump output = masked",
    )
    lines = [" | ".join(hdr), " | ".join("---" for _ in hdr)]
    for b, s in result["summary"].items():
        lines.append(
            " | ".join(
                str(x)
                for x in (
                    b,
                    s["masked_forward_passes"],
                    s["jump_forward_passes"],
                    s["ideal_forward_passes"],
                    f"{s['pass_reduction']}x",
                    s["jump_over_ideal"],
                    s["masked_wall_s"],
                    s["jump_wall_s"],
                    f"{s['wall_speedup']}x",
                    f"{s['grammar_us_per_step_masked']}/{s['grammar_us_per_step_jump']}",
                    f"{s['grammar_overhead_pct_masked']}/{s['grammar_overhead_pct_jump']}",
                    f"{s['mask_apply_sample_us_per_step_masked']}/{s['mask_apply_sample_us_per_step_jump']}",
                    f"{s['valid_masked']}/{s['runs']} {s['valid_jump']}/{s['runs']}",
                    f"{s['finished_masked']}/{s['runs']} {s['finished_jump']}/{s['runs']}",
                    f"{s['same_output']}/{s['runs']}",
                )
            )
        )
    return "\n".join("| " + line + " |" for line in lines)


def _stamped(work):
    """Run `work(engine)` and add what ran it: device, model and seconds."""

    def run(args, log) -> dict:
        t0 = time.perf_counter()

        def go(eng) -> dict:
            res = work(eng, args, log)
            return {**res, "device": eng.lm.device, "model": eng.lm.name}

        res = with_engine(args, go)
        return {**res, "elapsed_s": round(time.perf_counter() - t0, 1)}

    return run


def _character(eng, args, log) -> dict:
    return run_paper_character(eng, args.names, backends_of(args), args.max_new_tokens, log=log)


def _paper(eng, args, log) -> dict:
    tasks = {}
    for task in ("character", "city"):
        log(f"--- {task}")
        tasks[task] = run_paper_character(
            eng, args.names, backends_of(args), args.max_new_tokens, log=log, task=task
        )
    return {"suite": "paper", "tasks": tasks}


def _tasks_table(res: dict) -> str:
    return "\n\n".join(f"{task}:\n" + format_table(r) for task, r in res["tasks"].items())


PAPER_CHARACTER = Suite(
    "paper-character",
    "masked vs jump per backend on the SGLang character regex, --names names",
    _stamped(_character),
    format_table,
    (names_flag(10), backends_flag(), tokens_flag()),
    report=write_report,
)
PAPER = Suite(
    "paper",
    "the SGLang character (--names, 50 = all) and city tasks, masked vs jump per backend",
    _stamped(_paper),
    _tasks_table,
    (names_flag(10), backends_flag(), tokens_flag()),
    report=write_report,
)
