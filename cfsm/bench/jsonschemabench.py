"""`cfsm bench jsonschemabench`: every real-world schema and MaskBench record of the shared
sample, per backend and for `auto`, as a server compiles them (one compile cache per
backend, its workers kept between schemas). Per backend: schemas compiled (enforced only:
nothing is compiled leniently), MaskBench's pass (compiled, every valid instance accepted,
every invalid one rejected), compile time p50/p90/max, time per mask while walking each
valid instance token by token (first visits of a state included), the share of instance
bytes jump-forward strings cover, and the process's peak resident memory over the run."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from engine.backends import AUTO
from engine.backends.audit import POINTER_NAMED
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.schema import dump_as_generated
from engine.serving.compile_cache import CompileCache
from engine.serving.memory import PeakMemory

from .report import write_report
from .suite import Flag, Suite, backends_flag, backends_of, with_engine

DATA = Path(__file__).resolve().parents[3] / "shared" / "bench-data" / "jsonschemabench"
SUBSETS = [
    "Github_trivial",
    "Github_easy",
    "Github_medium",
    "Github_hard",
    "Github_ultra",
    "Glaiveai2K",
    "JsonSchemaStore",
    "Kubernetes",
    "Snowplow",
    "WashingtonPost",
]
CACHE_BYTES = 256 * 1024 * 1024  # each backend's compile cache, as a small server's


@dataclass(frozen=True)
class Item:
    """One schema as a user would send it, with its MaskBench record when there is one."""

    subset: str
    id: str
    schema_text: str
    record: dict | None


def sample(per_subset: int | None = None, subsets: list[str] | None = None) -> list[Item]:
    """The 10 JSONSchemaBench subsets (raw schemas, with the record of the same id) and then
    the MaskBench-only subsets (BFCL, JME, MCPspec, ...: the record's schema); the first
    `per_subset` ids of each, sorted (None: all)."""
    if not DATA.exists():
        raise CfsmError("invalid_input", f"benchmark data not found at {DATA}")
    only = sorted(
        p.name for p in (DATA / "maskbench").iterdir() if p.is_dir() and p.name not in SUBSETS
    )
    items = []
    for subset in [s for s in SUBSETS + only if subsets is None or s in subsets]:
        raw = subset in SUBSETS
        folder = DATA / subset if raw else DATA / "maskbench" / subset
        for f in sorted(folder.glob("*.json"))[:per_subset]:
            mb = DATA / "maskbench" / subset / f.name
            record = json.loads(mb.read_text(encoding="utf-8")) if mb.exists() else None
            text = f.read_text(encoding="utf-8") if raw else json.dumps(record["schema"])
            items.append(Item(subset, f.stem, text, record))
    return items


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def walk_instance(compiled, tokenizer, token_bytes, text: str) -> dict:
    """Feed the instance token by token; time each mask; count the bytes jump-forward
    would have covered (jump strings longer than one character)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    data = text.encode("utf-8")
    m = compiled.matcher()
    times = []
    pos = covered_until = covered = 0
    accepted = True
    for t in ids:
        js = m.jump_forward().encode("utf-8")
        if len(js) > 1 and pos >= covered_until and data.startswith(js, pos):
            covered += len(js)
            covered_until = pos + len(js)
        t0 = time.perf_counter()
        m.allowed_ids()
        times.append(time.perf_counter() - t0)
        if not m.accept_token(t):
            accepted = False
            break
        pos += len(token_bytes[t] or b"")
    return {
        "accepted": accepted and m.is_final(),
        "mask_s": times,
        "covered": covered,
        "bytes": len(data),
    }


def _compile(cache: CompileCache, schema_text: str, backend: str) -> tuple[object, str]:
    """The compiled constraint as a server gets it (its cache, its workers, its limits) and
    the backend that compiled it (`auto` names its choice)."""
    res = cache.get(Constraint("schema", schema_text, "compact"), backend)
    return res.compiled, res.backend or backend


def _walk_record(comp, record: dict, ctx) -> dict:
    """Every instance of a MaskBench record through the compiled constraint: valid ones
    must be accepted (their masks timed), invalid ones rejected."""
    rs = record["schema"]
    masks, covered, nbytes, ok, n_valid, leaks, n_invalid = [], 0, 0, 0, 0, [], 0
    for i, test in enumerate(record["tests"]):
        text = dump_as_generated(test["data"], rs)
        try:
            w = walk_instance(comp, ctx.tokenizer, ctx.vocab.token_bytes, text)
        except Exception:  # noqa: BLE001 - a matcher that fails on a text did not accept it
            w = {"accepted": False, "mask_s": [], "covered": 0, "bytes": len(text)}
        if test["valid"]:
            n_valid += 1
            ok += int(w["accepted"])
            masks.extend(w["mask_s"])
            if w["accepted"]:
                covered, nbytes = covered + w["covered"], nbytes + w["bytes"]
        else:
            n_invalid += 1
            leaks += [i] if w["accepted"] else []
    return {
        "valid": n_valid,
        "valid_accepted": ok,
        "invalid": n_invalid,
        "invalid_accepted": leaks,
        "maskbench_pass": ok == n_valid and not leaks,
        "mask_us": [round(x * 1e6, 1) for x in masks],
        "jump_covered_bytes": covered,
        "instance_bytes": nbytes,
    }


def measure(item: Item, backend: str, cache: CompileCache, ctx) -> dict:
    """One schema on one backend: compiled or refused (kind and message), then its record's
    instances through the record's own schema (it may differ slightly from the raw one)."""
    t0 = time.perf_counter()
    try:
        comp, chosen = _compile(cache, item.schema_text, backend)
    except CfsmError as exc:
        return {"compiled": False, "error": exc.kind, "message": exc.message[:600]}
    except Exception as exc:  # noqa: BLE001 - a library crash is a compile failure too
        return {"compiled": False, "error": "compile_failed", "message": str(exc)[:600]}
    res: dict = {"compiled": True, "compile_s": round(time.perf_counter() - t0, 4)}
    if backend == AUTO:
        res["chosen"] = chosen
    if item.record is None:
        return res
    rs = json.dumps(item.record["schema"])
    if json.loads(rs) != json.loads(item.schema_text):
        try:
            comp, _ = _compile(cache, rs, backend)
        except Exception:  # noqa: BLE001 - the record's schema refused: not MaskBench-passed
            return {**res, "record_compiled": False, "maskbench_pass": False}
    return {**res, "record_compiled": True, **_walk_record(comp, item.record, ctx)}


def run(
    engine,
    backends: list[str],
    per_subset: int | None = None,
    timeout_s: float = 15.0,
    subsets: list[str] | None = None,
    log=print,
) -> dict:
    """Each schema of the sample on each backend in turn, one compile cache per backend for
    the whole run (as one server keeps its own), the memory watched throughout."""
    ctx = engine.ctx
    items = sample(per_subset, subsets)
    caches = {
        b: CompileCache(ctx, timeout_s=timeout_s, budget_bytes=CACHE_BYTES, warm=True)
        for b in backends
    }
    for cache in caches.values():
        cache.wait_ready()
    rows = []
    try:
        with PeakMemory() as mem:
            for item in items:
                row = {"subset": item.subset, "id": item.id, "record": item.record is not None}
                row["backends"] = {}
                for b in backends:
                    row["backends"][b] = measure(item, b, caches[b], ctx)
                rows.append(row)
                log(_row_line(row))
    finally:
        for cache in caches.values():
            cache.close()
    return summarize(rows, backends, memory=mem.figures())


def _row_line(row: dict) -> str:
    def one(b: str, r: dict) -> str:
        state = ("ok" if r["compiled"] else r["error"][:12]) + (
            f"({r['valid_accepted']}/{r['valid']}v,{len(r['invalid_accepted'])}/{r['invalid']}i)"
            if "valid" in r
            else ""
        )
        return f"{b}:{state}"

    return f"{row['subset']:15s} {row['id'][:28]:28s} " + " ".join(
        one(b, r) for b, r in row["backends"].items()
    )


def _backend_summary(rs: list[dict], n_records: int) -> dict:
    comp = [r for r in rs if r["compiled"]]
    times = [r["compile_s"] for r in comp]
    masks = [x for r in comp for x in r.get("mask_us", [])]
    cov = sum(r.get("jump_covered_bytes", 0) for r in comp)
    chars = sum(r.get("instance_bytes", 0) for r in comp)
    refused = [r for r in rs if not r["compiled"]]
    out = {
        "schemas": len(rs),
        "compiled": len(comp),
        "coverage": round(len(comp) / max(1, len(rs)), 3),
        "records": n_records,
        "maskbench_passed": sum(1 for r in comp if r.get("maskbench_pass")),
        "compile_ms_p50": round(1e3 * (_pct(times, 0.5) or 0), 1),
        "compile_ms_p90": round(1e3 * (_pct(times, 0.9) or 0), 1),
        "compile_ms_max": round(1e3 * max(times, default=0), 1),
        "mask_us_mean": round(sum(masks) / len(masks), 1) if masks else None,
        "mask_us_p50": _pct(masks, 0.5),
        "mask_us_p99": _pct(masks, 0.99),
        "masks": len(masks),
        "valid_accepted": sum(r.get("valid_accepted", 0) for r in comp),
        "valid": sum(r.get("valid", 0) for r in comp),
        "invalid_accepted": sum(len(r.get("invalid_accepted", [])) for r in comp),
        "invalid": sum(r.get("invalid", 0) for r in comp),
        "jump_share_of_instance_bytes": round(cov / max(1, chars), 3),
        "errors": dict(sorted(Counter(r["error"] for r in refused).items())),
        "refusals_naming_a_pointer": sum(1 for r in refused if POINTER_NAMED.search(r["message"])),
    }
    if any("chosen" in r for r in comp):
        out["chosen"] = dict(Counter(r["chosen"] for r in comp).most_common())
    return out


def summarize(rows: list[dict], backends: list[str], memory: dict | None = None) -> dict:
    """Per-backend figures, `auto` against the best single backend, every invalid instance
    a backend accepted (there should be none) and the run's memory."""
    n_records = sum(1 for r in rows if r.get("record"))
    summary = {b: _backend_summary([r["backends"][b] for r in rows], n_records) for b in backends}
    singles = {b: s["compiled"] for b, s in summary.items() if b != AUTO}
    best = max(singles, key=singles.get) if singles else None
    leaks = [
        {"subset": r["subset"], "id": r["id"], "backend": b, "tests": res["invalid_accepted"]}
        for r in rows
        for b, res in r["backends"].items()
        if res.get("invalid_accepted")
    ]
    return {
        "suite": "jsonschemabench",
        "schemas": len(rows),
        "records": n_records,
        "summary": summary,
        "best_single": {"backend": best, "compiled": singles.get(best, 0)},
        "memory": memory or {},
        "invalid_instances_accepted": leaks,
        "rows": rows,
    }


def format_table(res: dict) -> str:
    lines = [
        "| backend | compiled | MaskBench pass | compile p50 / p90 / max | mask mean / p99 "
        "| valid accepted | invalid accepted | jump share |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b, s in res["summary"].items():
        mean, p99 = s["mask_us_mean"] or 0, s["mask_us_p99"] or 0
        lines.append(
            f"| {b} | {s['compiled']}/{s['schemas']} ({s['coverage']:.0%}) | "
            f"{s['maskbench_passed']}/{s['records']} | {s['compile_ms_p50']:,.0f} / "
            f"{s['compile_ms_p90']:,.0f} / {s['compile_ms_max']:,.0f} ms | {mean:,.0f} / "
            f"{p99:,.0f} us | {s['valid_accepted']}/{s['valid']} | "
            f"{s['invalid_accepted']}/{s['invalid']} | {s['jump_share_of_instance_bytes']:.0%} |"
        )
    mem = res.get("memory") or {}
    if mem:
        lines.append(
            f"\nResident memory: {mem['idle_mib']} MiB at the start, peak {mem['peak_mib']} MiB"
            f" ({mem['peak_with_workers_mib']} MiB with the compile workers)."
        )
    if AUTO in res["summary"]:
        a = res["summary"][AUTO]
        chosen = ", ".join(f"{k} {v}" for k, v in a.get("chosen", {}).items())
        lines.append(
            f"auto compiled {a['compiled']} (best single backend: {res['best_single']['backend']}"
            f" {res['best_single']['compiled']}); chose {chosen}; "
            f"{a['refusals_naming_a_pointer']}/{a['schemas'] - a['compiled']} refusals name a "
            "JSON pointer."
        )
    return "\n".join(lines)


def _run(args, log) -> dict:
    subsets = [s.strip() for s in args.subsets.split(",") if s.strip()] if args.subsets else None
    return with_engine(
        args,
        lambda eng: run(
            eng, backends_of(args), per_subset=args.per_subset, subsets=subsets, log=log
        ),
        load_weights=False,
    )


SUITE = Suite(
    "jsonschemabench",
    "real-world schemas per backend and auto: compile, MaskBench pass, masks, jumps, memory "
    "(no weights)",
    _run,
    format_table,
    (
        backends_flag("fsm,xgrammar,llguidance,auto"),
        Flag("--per-subset", {"type": int, "default": None, "help": "schemas per subset (all)"}),
        Flag("--subsets", {"default": "", "help": "comma-separated subsets (all)"}),
    ),
    report=write_report,
    summary=lambda res: {k: v for k, v in res.items() if k != "rows"},
)
