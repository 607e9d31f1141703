"""Memory soak: a served app compiles and runs many distinct regexes (a few hundred DFA
states each) through the API; the resident memory of the server and its DFA workers is
read after every `--every` requests. Target: under 3 GiB after 60, growing less than 10%
over the last 20 (the caches are bounded by CFSM_CACHE_BUDGET_MB).

    .venv/bin/python scripts/soak.py --n 60 --out bench-results/soak.json
    .venv/bin/python scripts/soak.py --n 60 --backend llguidance   # its compiles in workers too

Adversarial mode: one client sends every case of tests/data/adversarial.jsonl to
/compile for every backend while another runs ordinary /run requests; the server's and its
workers' memory is sampled every 0.5 s. Targets: the server never dies, memory under 3 GiB
at every sample, every answer within its limit + 2 s, every ordinary run finished.

    CFSM_COMPILE_TIMEOUT_S=10 .venv/bin/python scripts/soak.py --adversarial \
        --out bench-results/soak-adversarial.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

from gradio_client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serverproc import served  # noqa: E402

from engine.serving.memory import rss_tree_bytes  # noqa: E402

GIB = 1024**3


def regex_for(i: int) -> str:
    """Distinct constraints of a few hundred states, from several families."""
    fam = i % 4
    if fam == 0:
        return rf"note {i}: [a-z ]{{1,{200 + i}}}"
    if fam == 1:
        return rf'\{{"id": {i}, "name": "[A-Za-z ]{{1,{150 + i}}}", "n": [0-9]{{1,3}}\}}'
    if fam == 2:
        return rf"item-{i} (red|green|blue) [a-z0-9]{{4,{180 + i}}}"
    return rf"(19|20)[0-9]{{2}}-[01][0-9]-[0-3][0-9] entry {i}: [A-Za-z,. ]{{1,{220 + i}}}"


def _sample(pid: int, stop, peak: list) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_tree_bytes(pid))
        time.sleep(0.5)


def _ordinary(url: str, stop, tally: dict) -> None:
    c = Client(url, verbose=False)
    while not stop.is_set():
        try:
            tr = c.predict(
                "Is water wet?",
                "regex",
                r"The answer is (yes|no)\.",
                "compact",
                "fsm",
                "jump",
                16,
                0.0,
                0,
                api_name="/run",
            )
            tally["finished"] += bool(tr["totals"]["finished"])
        except Exception as exc:  # noqa: BLE001
            tally["errors"].append(" ".join(str(exc).split())[:160])
        tally["runs"] += 1


def adversarial(out: str | None) -> int:
    from cfsm.bench.adversarial import load_corpus  # writes out the cases kept as recipes

    corpus = load_corpus()
    limit = float(os.environ.get("CFSM_COMPILE_TIMEOUT_S", 20.0))
    rows, peak, tally, stop = [], [0], {"runs": 0, "finished": 0, "errors": []}, threading.Event()
    with served(None) as (url, pid):
        threads = [
            threading.Thread(target=_sample, args=(pid, stop, peak), daemon=True),
            threading.Thread(target=_ordinary, args=(url, stop, tally), daemon=True),
        ]
        for t in threads:
            t.start()
        c = Client(url, verbose=False)
        for backend in ("fsm", "outlines", "xgrammar", "llguidance"):  # untimed: the model is
            c.predict(
                "regex", "(ready)", "compact", backend, api_name="/compile"
            )  # loaded, workers set up
        for case in corpus:
            for backend in ("fsm", "outlines", "xgrammar", "llguidance"):
                t0 = time.time()
                try:
                    c.predict(
                        case["kind"], case["text"], case["whitespace"], backend, api_name="/compile"
                    )
                    answer = "ok"
                except Exception as exc:  # noqa: BLE001 - the API's one-line error
                    m = re.search(r"\b([a-z_]+): ", str(exc))
                    answer = m.group(1) if m else " ".join(str(exc).split())[:80]
                s = time.time() - t0
                rows.append(
                    {
                        "case": case["name"],
                        "backend": backend,
                        "answer": answer,
                        "seconds": round(s, 2),
                        "within_limit": s <= limit + 2,
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr)
        try:
            with open(f"/proc/{pid}/stat") as f:
                alive = f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie died
        except OSError:
            alive = False
        stop.set()
        for t in threads:
            t.join(60)
    report = {
        "limit_s": limit,
        "rows": rows,
        "server_alive": alive,
        "peak_rss_gib": round(peak[0] / GIB, 3),
        "answers_within_limit": sum(r["within_limit"] for r in rows),
        "answers": len(rows),
        "ordinary": {**tally, "errors": tally["errors"][:5]},
    }
    report["targets"] = {
        "alive": alive,
        "rss<3GiB": report["peak_rss_gib"] < 3.0,
        "within_limit": report["answers_within_limit"] == len(rows),
        "ordinary_all_finished": tally["runs"] > 0 and tally["finished"] == tally["runs"],
    }
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    return 0 if all(report["targets"].values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--backend", default="fsm", help="the backend every request compiles for")
    ap.add_argument("--out", default=None)
    ap.add_argument("--adversarial", action="store_true", help="the adversarial corpus (see above)")
    args = ap.parse_args()
    if args.adversarial:
        return adversarial(args.out)
    samples = []
    with served(None) as (url, pid):
        c = Client(url, verbose=False)
        t0 = time.time()
        errors, rep = 0, None
        for i in range(args.n):
            rx = regex_for(i)
            try:
                rep = c.predict("regex", rx, "compact", args.backend, api_name="/compile")
                tr = c.predict(
                    f"Write entry {i}.",
                    "regex",
                    rx,
                    "compact",
                    args.backend,
                    "jump",
                    24,
                    0.0,
                    i,
                    api_name="/run",
                )
                assert rep["num_states"] > 100 and tr["text"], (rep["num_states"], tr["text"])
            except Exception as exc:  # noqa: BLE001
                errors += 1
                print(f"request {i}: {' '.join(str(exc).split())[:200]}", file=sys.stderr)
            if (i + 1) % args.every == 0:
                samples.append(
                    {
                        "requests": i + 1,
                        "rss_gib": round(rss_tree_bytes(pid) / GIB, 3),
                        # the compile cache's own count (bounded by CFSM_CACHE_BUDGET_MB)
                        "cache_gib": round(rep["cache"]["bytes"] / GIB, 3) if rep else None,
                        "cache_entries": rep["cache"]["entries"] if rep else None,
                        "elapsed_s": round(time.time() - t0, 1),
                    }
                )
                print(json.dumps(samples[-1]), file=sys.stderr)
    last, prev = samples[-1]["rss_gib"], samples[-2]["rss_gib"] if len(samples) > 1 else None
    growth = None if prev is None else round(100 * (last - prev) / prev, 1)
    report = {
        "backend": args.backend,
        "requests": args.n,
        "errors": errors,
        "samples": samples,
        "final_rss_gib": last,
        "growth_last_interval_pct": growth,
        "targets": {"rss<3GiB": last < 3.0, "growth<10%": growth is not None and growth < 10},
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0 if errors == 0 and all(report["targets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
