"""`cfsm bench figures`: do the page's figures agree with the clock? Per preset (regex and
schema presets, the Doctor's kinds), on the page's runtime, side by side in one run: the
jump run's card ("decode time saved vs masked", this run's own clock), Compare's verdict
(masked wall time over jump wall time) and the Doctor's ideal as time (its load-time cost
model). Each preset is run masked then jump, twice, after one untimed run of each; a figure agrees
when it says what the wall time says: faster, slower, or no clear difference (within 5% of
none, as for a regex that leaves nothing to jump)."""

from __future__ import annotations

import statistics

from app.presets import presets
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.decoding.trace import Totals

from .suite import Flag, Suite, with_engine

KINDS = ("regex", "schema")


def _preset_row(eng, name: str, p: dict, repeats: int) -> dict:
    c = Constraint(p["kind"], p["text"], p["whitespace"])

    def run(mode: str, max_new: int = 256) -> Totals:
        req = GenerateRequest(
            prompt=p["prompt"], constraint=c, mode=mode, max_new_tokens=max_new, trace_detail=False
        )
        return eng.generate(req).totals

    # untimed: the compile, and both modes in full, so that the token index's lazy states
    # (built the first time decoding reaches them; masked mode reaches every state of its
    # path, jump mode skips those inside chains) are not paid by one mode's timed run
    run("masked")
    run("jump")
    walls: dict[str, list[float]] = {"masked": [], "jump": []}
    saved = []
    for _ in range(repeats):
        for mode in ("masked", "jump"):
            t = run(mode)
            walls[mode].append(t.wall_s)
            if mode == "jump":
                saved.append(t.time_saved())
    compare = statistics.median(walls["masked"]) / max(statistics.median(walls["jump"]), 1e-9)
    card = statistics.median(saved)
    doctor = (eng.diagnose(c).get("time") or {}).get("ideal_time_reduction")
    row = {
        "preset": name,
        "card_time_saved": round(card, 3),
        "compare_masked_over_jump": round(compare, 3),
        "doctor_ideal_over_masked": doctor,
        "wall_s": {m: [round(w, 3) for w in ws] for m, ws in walls.items()},
        "wall_noise": round(max(TOLERANCE, *map(spread, walls.values())), 3),
        "runtime": t.runtime,
        "clock": t.clock,
    }
    return row | agreement(row)


TOLERANCE = 0.05  # within 5% of no change, a figure says "no clear difference"


def spread(walls: list[float]) -> float:
    """The runs' own spread: their interquartile range over their median. A wall-time
    ratio closer to 1 than this says no clear difference (a 0.13 s date regex varies by
    more than 10% between runs, so 0.88x or 1.33x there is noise, not a verdict)."""
    if len(walls) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(walls, n=4)
    return (q3 - q1) / max(statistics.median(walls), 1e-9)


def _says(x: float, tolerance: float = TOLERANCE) -> int:
    """+1 faster (or time saved), -1 slower, 0 within `tolerance` of no change."""
    return 0 if abs(x) <= tolerance else (1 if x > 0 else -1)


def agreement(row: dict) -> dict:
    """Does the card (time saved) and the Doctor (ideal over masked) say what the wall time
    says: jump faster, slower, or no clear difference (within 5% or the runs' own spread,
    `wall_noise`, whichever is larger)?"""
    wall = _says(row["compare_masked_over_jump"] - 1, row.get("wall_noise", TOLERANCE))
    doctor = row["doctor_ideal_over_masked"]
    return {
        "card_agrees": _says(row["card_time_saved"]) == wall,
        "doctor_agrees": None if doctor is None else _says(doctor - 1) == wall,
    }


def run_figures(eng, repeats: int = 2, log=print) -> dict:
    rows = []
    for name, p in presets().items():
        if p["kind"] not in KINDS or p.get("reasoning"):
            continue
        rows.append(_preset_row(eng, name, p, repeats))
        r = rows[-1]
        log(
            f"{name:45s} card {100 * r['card_time_saved']:6.1f}%  compare "
            f"{r['compare_masked_over_jump']:5.2f}x  doctor {r['doctor_ideal_over_masked']}x"
        )
    return {
        "suite": "figures",
        "repeats": repeats,
        "rows": rows,
        "card_agrees": sum(r["card_agrees"] for r in rows),
        "doctor_agrees": sum(bool(r["doctor_agrees"]) for r in rows),
        "presets": len(rows),
    }


def format_table(res: dict) -> str:
    lines = [
        "| preset | card: time saved (this run's clock) | Compare: masked / jump wall | "
        "runs' spread (IQR / median) | Doctor: ideal vs masked | card agrees | Doctor agrees |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['preset']} | {100 * r['card_time_saved']:.0f}% | "
            f"{r['compare_masked_over_jump']:.2f}x | {100 * r['wall_noise']:.0f}% | "
            f"{r['doctor_ideal_over_masked']}x | "
            f"{'yes' if r['card_agrees'] else 'NO'} | "
            f"{'yes' if r['doctor_agrees'] else 'NO' if r['doctor_agrees'] is False else '-'} |"
        )
    lines.append(
        f"\ncard agrees with the wall time on {res['card_agrees']}/{res['presets']} presets, "
        f"the Doctor on {res['doctor_agrees']}/{res['presets']}"
    )
    return "\n".join(lines)


SUITE = Suite(
    "figures",
    "per preset: the card's time saved, Compare's wall-time verdict and the Doctor's ideal, "
    "side by side (do they agree in sign?)",
    lambda args, log: with_engine(args, lambda eng: run_figures(eng, args.repeats, log)),
    format_table,
    (Flag("--repeats", {"type": int, "default": 2, "help": "masked/jump pairs per preset"}),),
)
