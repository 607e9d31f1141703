"""`cfsm bench live-view`: what following a run costs its decode. The character preset,
masked and jump, decoded by the engine with the page's live-view listener (snapshots at
`app.run.LiveViews`' cadence, each view built in another thread, as the page's handler
does) and without one, in alternating pairs; medians, the median of the pair ratios, the
views a run drew, and whether every output was the same (following a run must not change
it)."""

from __future__ import annotations

import queue
import statistics
import threading
import time

from .suite import Flag, Suite, with_engine

PRESET = "SGLang character (regex)"


def _with_views(eng, req) -> tuple[float, int, dict]:
    """Seconds to decode `req` with the page's live views, how many were drawn, and the
    trace."""
    from app.run import LiveViews

    todo: queue.Queue = queue.Queue()
    views, drawn = LiveViews(), [0]

    def page() -> None:  # the page handler's side: each view drawn as it draws them
        while (trace := todo.get()) is not None:
            drawn[0] += views.draw(trace) is not None

    def listen(kind: str, data) -> None:
        snap = views.take(data) if kind == "step" else None
        if snap is not None:
            todo.put(snap)

    th = threading.Thread(target=page)
    th.start()
    t0 = time.perf_counter()
    try:
        trace = eng.generate(req, on_event=listen).to_json()
    finally:
        todo.put(None)
        th.join()
    return time.perf_counter() - t0, drawn[0], trace


def run(eng, repeats: int, log=print) -> dict:
    from app.presets import presets
    from engine.constraint import Constraint
    from engine.decoding.request import GenerateRequest

    p = presets()[PRESET]
    c = Constraint(p["kind"], p["text"], p["whitespace"])
    rows = []
    for mode in ("masked", "jump"):
        req = GenerateRequest(prompt=p["prompt"], constraint=c, mode=mode)
        text = eng.generate(req).text  # untimed: the compile and the index
        bare, live, drawn, same = [], [], [], True
        for _ in range(repeats):
            t0 = time.perf_counter()
            same &= eng.generate(req).text == text
            bare.append(time.perf_counter() - t0)
            s, n, trace = _with_views(eng, req)
            live.append(s)
            drawn.append(n)
            same &= trace["text"] == text
        ratio = statistics.median([b / a for a, b in zip(bare, live, strict=True)])
        rows.append({
            "mode": mode, "without_s": round(statistics.median(bare), 3),
            "with_live_views_s": round(statistics.median(live), 3),
            "median_pair_ratio": round(ratio, 3), "views_per_run": drawn,
            "same_output": same,
            "without": bare, "with_live_views": live,
        })  # fmt: skip
        r = rows[-1]
        log(
            f"{mode:6s} without {r['without_s']:.3f} s, with live views "
            f"{r['with_live_views_s']:.3f} s (pairs {ratio:.3f}x), views {drawn}, same output "
            f"{same}"
        )
    return {"suite": "live-view", "preset": PRESET, "repeats": repeats, "rows": rows}


def format_table(res: dict) -> str:
    lines = [
        f"{res['preset']}, decoded without and with the page's live views, medians of "
        f"{res['repeats']} alternating pairs",
        "",
        "| mode | without | with live views | median pair ratio | views a run | same output |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['mode']} | {r['without_s']:.2f} s | {r['with_live_views_s']:.2f} s | "
            f"{r['median_pair_ratio']:.3f} | {statistics.median(r['views_per_run']):g} | "
            f"{'yes' if r['same_output'] else 'no'} |"
        )
    return "\n".join(lines)


SUITE = Suite(
    "live-view",
    "what the page's live step view costs a run's decode (with and without, side by side)",
    lambda args, log: with_engine(args, lambda eng: run(eng, args.repeats, log)),
    format_table,
    (Flag("--repeats", {"type": int, "default": 7, "help": "pairs per mode"}),),
)
