"""Lower every schema of the shared JSONSchemaBench sample to its regex in one process
under a 3 GB address-space cap: one line per schema (file, outcome, regex length, seconds),
then the process's peak resident memory on stderr (docs/backends.md quotes it).
Run from the repository: `.venv/bin/python scripts/lower_sample.py`."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "bench-data" / "jsonschemabench"


def lower(path: Path) -> tuple[str, int, float]:
    """(outcome, regex length, seconds) of one sample file (a MaskBench record's schema)."""
    from engine.errors import CfsmError
    from engine.schema.compile import compile_schema_regex

    d = json.loads(path.read_text(encoding="utf-8"))
    schema = d["schema"] if "maskbench" in path.parts else d
    t0 = time.perf_counter()
    try:
        n, kind = len(compile_schema_regex(json.dumps(schema)).regex), "ok"
    except CfsmError as exc:
        n, kind = 0, exc.kind
    except MemoryError:
        n, kind = 0, "MemoryError"
    return kind, n, time.perf_counter() - t0


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
    sys.path.insert(0, str(ROOT))
    for p in sorted(SAMPLE.rglob("*.json")):
        if p.name != "manifest.json":
            print(p.relative_to(SAMPLE), *lower(p), sep="\t", flush=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"peak resident memory: {peak_mb} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
