"""`cfsm bench check-requests`: `cfsm check --requests` over a long mixed file, as a user
runs it (a subprocess with the embedded tokenizer). Targets: every line answered, in
order, no `internal` answer, under 3 GiB for the process and its compile workers.

The file is built from the JSON-Schema test suite in ../shared: the first `--cases`
schema/instance pairs of draft2020-12/*.json (1,020: a 4,080-line file), each as one line
per backend (`{"schema": ..., "text": <instance as JSON>, "backend": b, "lenient": true}`).
The command's resident memory, children included, is sampled every 0.5 s."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from engine.backends import BACKENDS
from engine.errors import CfsmError
from engine.serving.memory import rss_tree_bytes

from .suite import Flag, Suite

ROOT = Path(__file__).resolve().parents[2]
SUITE_DIR = ROOT.parent / "shared" / "bench-data" / "json-schema-test-suite" / "draft2020-12"


def build_lines(cases: int) -> list[str]:
    lines = []
    if not SUITE_DIR.is_dir():
        raise CfsmError("invalid_input", f"the JSON-Schema test suite is not at {SUITE_DIR}")
    for path in sorted(SUITE_DIR.glob("*.json")):
        for group in json.loads(path.read_text(encoding="utf-8")):
            for test in group["tests"]:
                if len(lines) >= cases * len(BACKENDS):
                    return lines
                text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
                for b in BACKENDS:
                    line = {"schema": group["schema"], "text": text, "backend": b, "lenient": True}
                    lines.append(json.dumps(line, ensure_ascii=False))
    return lines


def run(cases: int = 1020, log=print) -> dict:
    lines = build_lines(cases)
    with tempfile.TemporaryDirectory(prefix="cfsm-check-") as tmp:
        path = Path(tmp) / "requests.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        report = _measure(path, len(lines))
    log(report)
    return report


def _measure(path: Path, n_lines: int) -> dict:
    t0, peak, kinds = time.time(), [0], collections.Counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfsm", "check", "--requests", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        encoding="utf-8",
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
        "lines": n_lines,
        "answers": sum(kinds.values()),
        "kinds": dict(kinds),
        "exit_code": proc.returncode,
        "seconds": round(time.time() - t0, 1),
        "peak_rss_gib": round(peak[0] / 2**30, 3),
    }
    report["targets"] = {
        "completed": report["answers"] == n_lines,
        "no_internal": kinds.get("internal", 0) == 0,
        "rss<3GiB": report["peak_rss_gib"] < 3.0,
    }
    return report


def format_table(res: dict) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(res["kinds"].items()))
    return (
        f"{res['answers']:,} answers to {res['lines']:,} lines ({kinds}); "
        f"{res['seconds']} s, peak {res['peak_rss_gib']} GiB; targets: {res['targets']}"
    )


SUITE = Suite(
    "check-requests",
    "cfsm check --requests over a 4,080-line file of JSON-Schema test suite cases, every "
    "backend: every line answered, none internal, bounded memory",
    lambda args, log: run(args.cases, log=log),
    format_table,
    (Flag("--cases", {"type": int, "default": 1020, "help": "schema/instance pairs"}),),
    model=False,
)
