"""Load test of the served API (/run) on loopback, bounded in requests and time.

Measures, in one run (these machines are noisy, so only ratios are compared):
  * output tokens/s of one client alone, then of N clients together (continuous batching
    should multiply it; target: 8 clients >= 2.5x one client);
  * a short request's latency alone, and while a long request decodes (target <= 2x);
  * errors and cross-talk (each client's id is inside its own constraint, so an output
    that answers another client's request shows up), and that the app still serves after
    a client drops a run mid-way.

    .venv/bin/python scripts/load_test.py                       # starts its own server
    .venv/bin/python scripts/load_test.py --url http://127.0.0.1:7860/ --clients 8
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
from pathlib import Path

from gradio_client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serverproc import served  # noqa: E402


def regex_for(i: int) -> str:
    return (
        rf'client {i} says: \{{"mood": "(happy|sad|tired|calm)", "hours": [0-9]{{1,2}}, '
        r'"note": "[a-z ]{10,120}"\}'
    )


class CrossTalk(Exception):
    pass


def run_one(c, i: int, mode: str = "jump", max_new: int = 96) -> tuple[int, float]:
    """One request; its client id is inside its constraint, so another client's output
    (or a grammar state mixed up with another's) cannot pass for it."""
    t0 = time.perf_counter()
    tr = c.predict(
        f"Client {i}: describe your day as JSON.",
        "regex",
        regex_for(i),
        "compact",
        "fsm",
        mode,
        max_new,
        0.0,
        i,
        api_name="/run",
    )
    if (
        not tr["text"].startswith(f"client {i} says: ")
        or tr["request"]["prompt"] != f"Client {i}: describe your day as JSON."
    ):
        raise CrossTalk(tr["text"][:80])
    if tr["totals"]["finished"] and not re.fullmatch(regex_for(i), tr["text"]):
        raise ValueError(f"finished output outside the constraint: {tr['text'][:80]!r}")
    return tr["totals"]["output_tokens"], time.perf_counter() - t0


def throughput(url: str, clients: int, per_client: int, deadline_s: float, mode: str) -> dict:
    toks, lat, errors, crosstalk = [], [], [], 0
    lock = threading.Lock()
    stop_at = time.time() + deadline_s

    def client(i: int) -> None:
        nonlocal crosstalk
        c = Client(url, verbose=False)
        for _ in range(per_client):
            if time.time() > stop_at:
                return
            try:
                n, dt = run_one(c, i, mode)
                with lock:
                    toks.append(n)
                    lat.append(dt)
            except CrossTalk:
                with lock:
                    crosstalk += 1
            except Exception as exc:  # noqa: BLE001
                with lock:
                    errors.append(" ".join(str(exc).split())[:200])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "clients": clients,
        "requests": len(toks),
        "output_tokens": sum(toks),
        "wall_s": round(wall, 2),
        "tokens_per_s": round(sum(toks) / wall, 2),
        "p50_s": round(statistics.median(lat), 3) if lat else None,
        "errors": len(errors),
        "crosstalk": crosstalk,
        "error_samples": errors[:3],
    }


def short_under_long(url: str) -> dict:
    """Latency of a short request alone, and while a long one decodes."""
    c = Client(url, verbose=False)
    solo = statistics.median(run_short(c) for _ in range(3))
    job = Client(url, verbose=False).submit(
        "Write a long story about the sea.",
        "regex",
        "[a-z ,.]{1,400}",
        "compact",
        "fsm",
        "masked",
        400,
        0.0,
        0,
        api_name="/run",
    )
    time.sleep(1.0)  # the long request is decoding
    during = statistics.median(run_short(c) for _ in range(3))
    long_tr = job.result()
    return {
        "short_solo_s": round(solo, 3),
        "short_during_long_s": round(during, 3),
        "ratio": round(during / solo, 2),
        "long_output_tokens": long_tr["totals"]["output_tokens"],
    }


def run_short(c) -> float:
    t0 = time.perf_counter()
    tr = c.predict(
        "Is water wet?",
        "regex",
        r"The answer is (yes|no)\.",
        "compact",
        "fsm",
        "jump",
        12,
        0.0,
        0,
        api_name="/run",
    )
    assert tr["totals"]["finished"], tr["totals"]
    return time.perf_counter() - t0


def dropped_run_then_alive(url: str) -> bool:
    job = Client(url, verbose=False).submit(
        "Write a long story.",
        "regex",
        "[a-z ]{1,400}",
        "compact",
        "fsm",
        "masked",
        400,
        0.0,
        0,
        api_name="/run",
    )
    time.sleep(1.0)
    job.cancel()
    tr = Client(url, verbose=False).predict(
        "Ok?", "regex", "(ok)", "compact", "fsm", "jump", 4, 0.0, 0, api_name="/run"
    )
    return tr["text"] == "ok"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--url", default=None, help="a running server (default: start one on a free loopback port)"
    )
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument(
        "--requests", type=int, default=4, help="requests per client in the concurrent phase"
    )
    ap.add_argument("--seconds", type=float, default=240, help="time limit of each phase")
    ap.add_argument("--mode", default="jump", choices=["jump", "masked"])
    ap.add_argument("--out", default=None, help="also write the report (JSON) here")
    args = ap.parse_args()
    with served(args.url) as (url, _pid):
        run_short(Client(url, verbose=False))  # model loaded, caches warm
        solo = throughput(url, 1, args.requests * 2, args.seconds, args.mode)
        together = throughput(url, args.clients, args.requests, args.seconds, args.mode)
        latency = short_under_long(url)
        alive = dropped_run_then_alive(url)
    ratio = together["tokens_per_s"] / max(1e-9, solo["tokens_per_s"])
    report = {
        "mode": args.mode,
        "solo": solo,
        "together": together,
        "throughput_ratio": round(ratio, 2),
        "latency": latency,
        "alive_after_dropped_run": alive,
        "targets": {
            "throughput_ratio>=2.5": ratio >= 2.5,
            "short_latency_ratio<=2": latency["ratio"] <= 2.0,
            "no_errors": together["errors"] + solo["errors"] == 0,
            "no_crosstalk": together["crosstalk"] + solo["crosstalk"] == 0,
        },
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return (
        0 if report["targets"]["no_errors"] and report["targets"]["no_crosstalk"] and alive else 1
    )


if __name__ == "__main__":
    raise SystemExit(main())
