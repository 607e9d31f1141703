"""`cfsm bench compare`: does Compare's verdict agree with the pass counts on every preset?

Each preset is picked on a fresh page (`PageInputs.from_preset`) and run as Compare runs
it (`PageInputs.compare_requests`): side A masked, side B jump, on the preset's backend
and whitespace, each from the same cache state (`Engine.side_by_side`), and read by the
page's own `compare_md`. A row's reading: `agrees` when wall time and forward passes point
the same way (equal passes: times within the ratio the verdict lets pass unremarked),
`explained` when they do not and the verdict says why ("…, but …"), `unexplained` when
nothing does (a verdict a reader could not trust)."""

from __future__ import annotations

import dataclasses

from app.presets import presets
from engine.decoding.trace import Totals
from engine.errors import CfsmError
from viz.summaries import compare_md, passes_agree

from .suite import Flag, Suite, tokens_flag, with_engine

READINGS = ("agrees", "explained", "unexplained")


def reading(ta: Totals, tb: Totals, verdict: str) -> str:
    """'agrees', 'explained' or 'unexplained' (the module's doc) for A's and B's totals and
    the verdict line Compare printed."""
    if passes_agree(ta, tb):
        return "agrees"
    return "explained" if ", but " in verdict else "unexplained"


def compare_preset(eng, name: str, p: dict, max_new: int) -> dict:
    """One preset through Compare (A masked, B jump): its figures, verdict and reading."""
    # app.inputs imports gradio: read when this suite runs, so that `cfsm` stays light
    from app.inputs import PageInputs

    inp = dataclasses.replace(PageInputs.from_preset(p), max_new=max_new)
    (a, b), cfg = inp.compare_requests([(m, inp.backend, inp.ws) for m in ("masked", "jump")])
    ta, tb = eng.side_by_side(a, b)
    verdict = compare_md(ta, tb, *cfg, float(inp.temp), int(inp.seed or 0)).splitlines()[-1]
    verdict = verdict.strip("*")
    A, B = ta.totals, tb.totals
    return {
        "preset": name,
        "passes": [A.forward_passes, B.forward_passes],
        "wall_s": [A.wall_s, B.wall_s],
        "same_output": ta.text == tb.text,
        "verdict": verdict,
        "reading": reading(A, B, verdict),
    }


def run_compare(eng, max_new: int, only: list[str] | None = None, log=print) -> dict:
    rows = []
    for name, p in presets().items():
        if only and not any(o.lower() in name.lower() for o in only):
            continue
        row = compare_preset(eng, name, p, max_new)
        rows.append(row)
        log(f"{name[:44]:44s} passes {row['passes']} wall {row['wall_s']} {row['reading']}")
    if only and not rows:
        raise CfsmError("invalid_input", f"--presets: {', '.join(only)} names no preset")
    counts = {k: sum(r["reading"] == k for r in rows) for k in READINGS}
    return {"suite": "compare", "max_new_tokens": max_new, "rows": rows, "readings": counts}


def format_table(res: dict) -> str:
    lines = [
        "| preset | passes A / B | wall A / B | verdict | its caveats | reading |",
        "|---|---:|---:|---|---|---|",
    ]
    for r in res["rows"]:
        (pa, pb), (wa, wb) = r["passes"], r["wall_s"]
        said, _, why = r["verdict"].rstrip(".").partition(", but ")
        why = why.removesuffix(": read the ratio with care").split("; ")
        lines.append(
            f"| {r['preset']} | {pa} / {pb} | {wa:.2f} / {wb:.2f} s | {said} | "
            f"{len([w for w in why if w])} | {r['reading']} |"
        )
    c = res["readings"]
    lines.append("")
    lines.append(f"{c['agrees']} agree, {c['explained']} explained, {c['unexplained']} unexplained")
    return "\n".join(lines)


SUITE = Suite(
    "compare",
    "every preset through Compare (A masked, B jump): does the verdict agree with "
    "the pass counts, or say why not?",
    lambda args, log: with_engine(
        args,
        lambda eng: run_compare(
            eng, args.max_new_tokens, [s for s in (args.presets or "").split(",") if s], log
        ),
    ),
    format_table,
    (
        tokens_flag(200),
        Flag("--presets", {"default": "", "help": "comma-separated parts of preset names"}),
    ),
)
