"""`cfsm check --requests` over a long mixed file in bounded memory (issue target: 4,000
lines, every backend, under 3 GiB for the process and its compile workers).

The file is built from the JSON-Schema test suite in ../shared: the first `--cases`
schema/instance pairs of draft2020-12/*.json, each as one line per backend
(`{"schema": ..., "text": <instance as JSON>, "backend": b, "lenient": true}`). The
command's resident memory, children included, is sampled every 0.5 s.

    .venv/bin/python scripts/check_requests_soak.py --out bench-results/check-requests.json
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.serving.memory import rss_tree_bytes  # noqa: E402

SUITE = ROOT.parent / "shared" / "bench-data" / "json-schema-test-suite" / "draft2020-12"
BACKENDS = ("fsm", "outlines", "xgrammar", "llguidance")


def build_lines(cases: int) -> list[str]:
    lines = []
    for path in sorted(SUITE.glob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            for test in group["tests"]:
                if len(lines) >= cases * len(BACKENDS):
                    return lines
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                for b in BACKENDS:
                    line = {"schema": group["schema"], "text": text, "backend": b, "lenient": True}
                    lines.append(json.dumps(line, ensure_ascii=False))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=1020)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = build_lines(args.cases)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    t0, peak, kinds = time.time(), [0], collections.Counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfsm", "check", "--requests", f.name],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], rss_tree_bytes(proc.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for out in proc.stdout:
        obj = json.loads(out)
        kinds[obj["error"]["kind"] if "error" in obj else "answer"] += 1
    proc.wait()
    sampler.join(2)
    report = {
        "lines": len(lines),
        "answers": sum(kinds.values()),
        "kinds": dict(kinds),
        "exit_code": proc.returncode,
        "seconds": round(time.time() - t0, 1),
        "peak_rss_gib": round(peak[0] / 2**30, 3),
    }
    report["targets"] = {
        "completed": report["answers"] == len(lines),
        "rss<3GiB": report["peak_rss_gib"] < 3.0,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0 if all(report["targets"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
