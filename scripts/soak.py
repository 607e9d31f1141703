"""Memory soak: a served app compiles and runs many distinct regexes (a few hundred DFA
states each) through the API; the resident memory of the server and its DFA workers is
read after every `--every` requests. Target: under 3 GiB after 60, growing less than 10%
over the last 20 (the caches are bounded by CFSM_CACHE_BUDGET_MB).

    .venv/bin/python scripts/soak.py --n 60 --out bench-results/soak.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serverproc import rss_tree_bytes, served  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from gradio_client import Client

    samples = []
    with served(None) as (url, pid):
        c = Client(url, verbose=False)
        t0 = time.time()
        errors = 0
        for i in range(args.n):
            rx = regex_for(i)
            try:
                rep = c.predict("regex", rx, "compact", "fsm", api_name="/compile")
                tr = c.predict(
                    f"Write entry {i}.",
                    "regex",
                    rx,
                    "compact",
                    "fsm",
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
                        "elapsed_s": round(time.time() - t0, 1),
                    }
                )
                print(json.dumps(samples[-1]), file=sys.stderr)
    last, prev = samples[-1]["rss_gib"], samples[-2]["rss_gib"] if len(samples) > 1 else None
    growth = None if prev is None else round(100 * (last - prev) / prev, 1)
    report = {
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
