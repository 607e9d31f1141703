"""`cfsm bench doctor-sample`: the doctor (synthesized samples, no weights) on every schema
of the shared JSONSchemaBench sample, as a server's Doctor tab runs it (the engine's
compile cache, its workers and limits): whether each is answered (a report, or a one-line
error of a known kind), how long it took against the compile limit, and the process's
peak memory."""

from __future__ import annotations

import time
from collections import Counter

from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.serving.memory import PeakMemory

from .jsonschemabench import _pct, sample
from .suite import Flag, Suite, with_engine


def diagnose_one(engine, schema_text: str) -> dict:
    """One schema through `Engine.diagnose`: a report's figures, or the error's kind."""
    t0 = time.perf_counter()
    try:
        rep = engine.diagnose(Constraint("schema", schema_text, "compact"))
        out = {
            "answer": "report",
            "causes": len(rep["causes"]),
            "what_ifs": len(rep["what_if"]),
            "what_ifs_not_measured": sum(1 for w in rep["what_if"] if "error" in w),
            "ideal_reduction": rep["ideal_reduction"],
        }
    except CfsmError as exc:
        out = {"answer": "error", "kind": exc.kind, "message": exc.message[:300]}
    except Exception as exc:  # noqa: BLE001 - a crash is what this benchmark looks for
        out = {"answer": "crash", "kind": type(exc).__name__, "message": str(exc)[:300]}
    return {**out, "seconds": round(time.perf_counter() - t0, 3)}


def run(engine, per_subset: int | None = None, subsets: list[str] | None = None, log=print) -> dict:
    """Every schema of the sample (or the first `per_subset` of each of `subsets`), one
    after another, in one engine (as one server)."""
    limit = engine.cache.timeout_s
    rows = []
    with PeakMemory() as mem:
        for item in sample(per_subset, subsets):
            row = {"subset": item.subset, "id": item.id, **diagnose_one(engine, item.schema_text)}
            rows.append(row)
            log(f"{item.subset:15s} {item.id[:28]:28s} {row['answer']:6s} {row['seconds']:.2f} s")
    secs = [r["seconds"] for r in rows]
    return {
        "suite": "doctor-sample",
        "schemas": len(rows),
        "answers": dict(Counter(r["answer"] for r in rows)),
        "error_kinds": dict(Counter(r["kind"] for r in rows if r["answer"] != "report")),
        "compile_limit_s": limit,
        "seconds_p50": _pct(secs, 0.5),
        "seconds_p90": _pct(secs, 0.9),
        "seconds_max": max(secs, default=0.0),
        # the schema's automaton and then the what-ifs share the compile limit; the
        # samples' own analysis comes on top
        "over_twice_the_limit": sum(1 for s in secs if s > 2 * limit),
        "memory": mem.figures(),
        "rows": rows,
    }


def format_table(res: dict) -> str:
    a = res["answers"]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(res["error_kinds"].items()))
    mem = res["memory"]
    return "\n".join(
        [
            "| schemas | reports | one-line errors | crashes | seconds p50 / p90 / max |",
            "|---:|---:|---:|---:|---:|",
            f"| {res['schemas']} | {a.get('report', 0)} | {a.get('error', 0)} | "
            f"{a.get('crash', 0)} | {res['seconds_p50']:.2f} / {res['seconds_p90']:.2f} / "
            f"{res['seconds_max']:.2f} |",
            f"\nErrors: {kinds or 'none'}. Over twice the compile limit "
            f"({res['compile_limit_s']:g} s): {res['over_twice_the_limit']}. Resident memory "
            f"{mem.get('idle_mib')} MiB at the start, peak {mem.get('peak_mib')} MiB.",
        ]
    )


SUITE = Suite(
    "doctor-sample",
    "the doctor on every schema of the JSONSchemaBench sample: answered, time, memory (no weights)",
    lambda args, log: with_engine(
        args, lambda eng: run(eng, args.per_subset, log=log), load_weights=False
    ),
    format_table,
    (Flag("--per-subset", {"type": int, "default": None, "help": "schemas per subset (all)"}),),
    summary=lambda res: {k: v for k, v in res.items() if k != "rows"},
)
