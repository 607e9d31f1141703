"""`cfsm bench page-busy`: the character preset as a class sees it on a busy laptop, in
Chromium: masked and jump in turn, from the click on Run to the whole page updated
(`page_run.timed_run`), on an idle machine and with a process spinning on each core
(`busy.machine_load`), the page served here on llama.cpp's threads as it chooses them.
Reported: median seconds per mode and load, masked over jump (above 1: jump wins on the
page), and whether any card or summary showed a negative figure ("-N%")."""

from __future__ import annotations

import re
import statistics

from .busy import machine_load
from .page_run import _pick_preset, timed_run
from .scrub import served_page
from .suite import Flag, Suite

PRESET = "SGLang character (regex)"
NEGATIVE = re.compile(r"-\d+(\.\d+)?%")


def _mode_run(page, mode: str) -> tuple[float, str]:
    page.locator("#mode").get_by_label(mode, exact=True).check()
    times, summary = timed_run(page)
    return times["page"], page.locator("#stat-cards-host").inner_text() + "\n" + summary


def run(loads: list[str], repeats: int, port: int = 7879, log=print) -> dict:
    rows = []
    with served_page(port) as page:
        page.wait_for_function(
            "document.querySelector('#model-status')?.innerText.includes('Model ready')",
            timeout=600_000,
        )
        _pick_preset(page, PRESET)
        for mode in ("masked", "jump"):
            _mode_run(page, mode)  # untimed: the compile and the token index's states
        for load in loads:
            walls: dict[str, list[float]] = {"masked": [], "jump": []}
            negative = []
            with machine_load(load):
                for _ in range(repeats):
                    for mode in ("masked", "jump"):
                        s, text = _mode_run(page, mode)
                        walls[mode].append(s)
                        if NEGATIVE.search(text):
                            negative.append(f"{mode}: {NEGATIVE.search(text).group(0)}")
            med = {m: statistics.median(v) for m, v in walls.items()}
            rows.append({
                "load": load, "masked_s": round(med["masked"], 3), "jump_s": round(med["jump"], 3),
                "masked_over_jump": round(med["masked"] / max(med["jump"], 1e-9), 2),
                "runs": walls, "negative_figures": negative,
            })  # fmt: skip
            r = rows[-1]
            log(
                f"{load:7s} masked {r['masked_s']:5.2f} s  jump {r['jump_s']:5.2f} s  "
                f"masked/jump {r['masked_over_jump']:4.2f}x  negative figures {len(negative)}"
            )
    return {"suite": "page-busy", "preset": PRESET, "repeats": repeats, "rows": rows}


def format_table(res: dict) -> str:
    lines = [
        f"{res['preset']} in Chromium, click to the whole page updated, medians of "
        f"{res['repeats']} masked/jump pairs",
        "",
        "| load | masked | jump | masked / jump | negative figures shown |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['load']} | {r['masked_s']:.2f} s | {r['jump_s']:.2f} s | "
            f"{r['masked_over_jump']:.2f}x | {len(r['negative_figures'])} |"
        )
    return "\n".join(lines)


SUITE = Suite(
    "page-busy",
    "the character preset masked vs jump in Chromium, idle and with a busy process per core",
    lambda args, log: run(args.loads.split(","), args.repeats, log=log),
    format_table,
    (
        Flag("--loads", {"default": "idle,busy", "help": "comma-separated: idle,busy,bursty"}),
        Flag("--repeats", {"type": int, "default": 3, "help": "masked/jump pairs per load"}),
    ),
    model=False,
)
