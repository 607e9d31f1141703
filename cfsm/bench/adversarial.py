"""`cfsm bench --suite adversarial`: the adversarial corpus (tests/data/adversarial.jsonl:
huge ranges, deep nesting, wide enums, long counted repeats, large lengths, pathological
regexes, huge grammars, oversized input) compiled for every backend by one process that
meanwhile serves an ordinary user's runs. Measured: each answer's kind and time against
the stated limit, the resident memory of the process and its compile workers (sampled
every 0.2 s), and whether the ordinary runs all finished."""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

from engine.backends import WORKER_BACKENDS
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.errors import CfsmError
from engine.serving.compile_cache import CompileCache
from engine.serving.memory import PeakMemory, rss_tree_bytes

from .decode import paper_items
from .peers import COMPACT_PERSON
from .suite import Suite, backends_flag, backends_of, with_engine

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "data" / "adversarial.jsonl"
ORDINARY = [
    ("Is water wet?", Constraint("regex", r"The answer is (yes|no)\.")),
    ("Name a colour.", Constraint("regex", "(red|green|blue|yellow)")),
]


def load_corpus(path: Path = CORPUS) -> list[dict]:
    """The cases; a case with `repeat` ({head, item, times, tail}) has its text written out
    (a schema over the size limit is 1 MB: kept as a recipe, not as data)."""
    cases = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    for c in cases:
        r = c.pop("repeat", None)
        if r is not None:
            c["text"] = r["head"] + r["item"] * r["times"] + r["tail"]
    return cases


class _OrdinaryUser:
    """Short constrained runs, one after another, until told to stop."""

    def __init__(self, engine) -> None:
        self.engine, self.runs, self.finished, self.errors = engine, 0, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            prompt, c = ORDINARY[i % len(ORDINARY)]
            i += 1
            try:
                tr = self.engine.generate(
                    GenerateRequest.from_inputs(prompt, c, max_new_tokens=16, trace_detail=False)
                )
                self.runs += 1
                self.finished += bool(tr.totals.finished and tr.valid)
            except Exception as exc:  # noqa: BLE001 - counted, the bench goes on
                self.errors.append(" ".join(str(exc).split())[:200])


def run(engine, backends: list[str], log=print) -> dict:
    limit = engine.cache.timeout_s
    memory, user = PeakMemory().start(), _OrdinaryUser(engine)
    user.thread.start()
    rows = []
    try:
        for case in load_corpus():
            for backend in backends:
                t0 = time.perf_counter()
                try:
                    c = Constraint.from_inputs(case["kind"], case["text"], case["whitespace"])
                    engine.compile(c, backend)
                    kind = "ok"
                except CfsmError as exc:
                    kind = exc.kind
                seconds = time.perf_counter() - t0
                rows.append(
                    {
                        "case": case["name"],
                        "backend": backend,
                        "answer": kind,
                        "seconds": round(seconds, 2),
                        "within_limit": seconds <= limit + 2,
                    }
                )
                log(
                    f"{case['name'][:40]:40} {backend:10} {kind:22} {seconds:6.2f} s "
                    f"rss {rss_tree_bytes() / 2**20:7.0f} MB"
                )
    finally:
        user.stop.set()
        user.thread.join(60)
        memory.stop()
    return {
        "limit_s": limit,
        "rows": rows,
        "max_rss_mib": memory.figures()["peak_with_workers_mib"],
        "answers_within_limit": sum(r["within_limit"] for r in rows),
        "answers": len(rows),
        "ordinary": {"runs": user.runs, "finished_valid": user.finished, "errors": user.errors[:5]},
    }


def format_table(res: dict) -> str:
    backends = sorted(
        {r["backend"] for r in res["rows"]}, key=[r["backend"] for r in res["rows"]].index
    )
    cases = list(dict.fromkeys(r["case"] for r in res["rows"]))
    at = {(r["case"], r["backend"]): r for r in res["rows"]}
    lines = ["| case | " + " | ".join(backends) + " |", "|---|" + "---|" * len(backends)]
    for case in cases:
        cells = [f"{at[case, b]['answer']} {at[case, b]['seconds']:.1f} s" for b in backends]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    o = res["ordinary"]
    lines.append(
        f"\nlimit {res['limit_s']:g} s: {res['answers_within_limit']}/{res['answers']} answers "
        f"within "
        f"limit + 2 s; max resident memory (process + workers) {res['max_rss_mib']} MiB; ordinary "
        f"runs meanwhile: {o['finished_valid']}/{o['runs']} finished valid, {len(o['errors'])} "
        f"errors"
    )
    if res.get("worker_overhead"):
        lines += [
            "",
            "| backend | constraint | in the server | in a worker | ratio |",
            "|---|---|---:|---:|---:|",
        ]
        lines += [
            f"| {r['backend']} | {r['constraint']} | {r['server_ms']} ms | "
            f"{r['worker_ms']} ms | {r['ratio']}x |"
            for r in res["worker_overhead"]
        ]
    return "\n".join(lines)


def worker_overhead(engine, repeats: int = 3) -> list[dict]:
    """What compiling in a worker costs a normal compile: the same fresh constraints
    through a cache with workers and one without, side by side (median of `repeats`), after
    two untimed compiles of the same kind in each (a process's first compile of a kind pays
    one-time setup in the library: 150 ms for xgrammar's first character regex)."""

    regex, _ = paper_items("character", 1)
    via, here = CompileCache(engine.ctx, warm=True), CompileCache(engine.ctx, use_worker=False)
    via._worker.ready.wait()
    for name in WORKER_BACKENDS:  # this process's one-time setup, for each
        here.get(Constraint("regex", "a"), name)
        here.get(Constraint("schema", '{"type": "object"}'), name)
    tasks = {
        "SGLang character regex": lambda i: Constraint("regex", f"{regex}(x{{{i + 1}}})?"),
        "person schema (compact)": lambda i: Constraint(
            "schema", json.dumps({**COMPACT_PERSON, "title": f"t{i}"})
        ),
    }
    rows = []
    try:
        for backend in WORKER_BACKENDS:
            for task, make in tasks.items():
                ms = {}
                for label, cache, base in (("server", here, 0), ("worker", via, 100)):
                    for i in range(2):  # steady state: each worker's first of a kind is slower
                        cache.get(make(base + 50 + i), backend)
                    times = []
                    for i in range(repeats):
                        t0 = time.perf_counter()
                        cache.get(make(base + i), backend)
                        times.append(time.perf_counter() - t0)
                    ms[label] = round(statistics.median(times) * 1e3, 1)
                rows.append(
                    {
                        "backend": backend,
                        "constraint": task,
                        "server_ms": ms["server"],
                        "worker_ms": ms["worker"],
                        "ratio": round(ms["worker"] / max(1e-9, ms["server"]), 2),
                    }
                )
    finally:
        via.close()
        here.close()
    return rows


def _run(args, log) -> dict:
    def work(eng) -> dict:
        res = run(eng, backends_of(args), log=log)
        return {**res, "worker_overhead": worker_overhead(eng)}

    return with_engine(args, work, continuous=True)


SUITE = Suite(
    "adversarial",
    "the adversarial corpus compiled for every backend while an ordinary user runs",
    _run,
    format_table,
    (backends_flag(),),
)
