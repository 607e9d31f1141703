"""Load test: N concurrent API clients against a running app on loopback, for a bounded
time. Each client checks its own results (its id is in its constraint, so cross-talk shows).
Reports p50/p95 latency and errors. Also opens a run and drops it mid-way (disconnect).

    .venv/bin/python scripts/load_test.py --url http://127.0.0.1:7860/ --clients 8 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from urllib.parse import urlparse


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:7860/")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-requests", type=int, default=200)
    args = ap.parse_args()
    host = urlparse(args.url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("load tests target loopback only")
    from gradio_client import Client

    lat: list[float] = []
    errors: list[str] = []
    crosstalk = 0
    done = 0
    lock = threading.Lock()
    deadline = time.time() + args.seconds

    def client(i: int) -> None:
        nonlocal crosstalk, done
        c = Client(args.url, verbose=False)
        rx = f"client {i} says (yes|no)"
        while time.time() < deadline:
            with lock:
                if done >= args.max_requests:
                    return
                done += 1
            t0 = time.time()
            try:
                tr = c.predict(f"Client {i}: is water wet?", "regex", rx, "compact", "fsm", "jump", 16, 0.0, i, api_name="/run")
                ok = tr["text"].startswith(f"client {i} says ")
                with lock:
                    lat.append(time.time() - t0)
                    crosstalk += 0 if ok else 1
            except Exception as exc:  # noqa: BLE001
                with lock:
                    errors.append(" ".join(str(exc).split())[:200])

    # a client that starts a long run and disconnects
    def dropper() -> None:
        c = Client(args.url, verbose=False)
        job = c.submit("Write a long story.", "regex", "[a-z ]{1,400}", "compact", "fsm", "masked", 400, 0.0, 0, api_name="/run")
        time.sleep(1.0)
        job.cancel()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)] + [threading.Thread(target=dropper)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the app still serves after all that
    alive = Client(args.url, verbose=False).predict("Ok?", "regex", "(ok)", "compact", "fsm", "jump", 4, 0.0, 0, api_name="/run")
    lat.sort()
    report = {
        "clients": args.clients,
        "seconds": round(time.time() - t0, 1),
        "requests": len(lat) + len(errors),
        "ok": len(lat),
        "errors": len(errors),
        "crosstalk": crosstalk,
        "p50_s": round(statistics.median(lat), 3) if lat else None,
        "p95_s": round(lat[int(0.95 * (len(lat) - 1))], 3) if lat else None,
        "throughput_rps": round(len(lat) / max(1e-9, time.time() - t0), 2),
        "alive_after": alive["text"] == "ok",
        "error_samples": errors[:3],
    }
    print(json.dumps(report, indent=1))
    return 0 if not errors and not crosstalk and report["alive_after"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
