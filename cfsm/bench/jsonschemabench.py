"""`cfsm bench --suite jsonschemabench`: real-world schemas, per backend: compile
coverage and time, time per mask while walking valid MaskBench instances, the share of
instance text that jump-forward covers, and whether invalid instances are rejected."""

from __future__ import annotations

import concurrent.futures as cf
import json
import time
from pathlib import Path

from engine.backends import AUTO, get_backend
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.schema import dump_as_generated
from engine.serving.compile_cache import CompileCache

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
FALLBACK = ("xgrammar", "llguidance", "outlines")


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


def _compile(cache: CompileCache, ctx, c: Constraint, backend: str, timeout_s: float):
    """fsm and outlines need our automaton (built in the killable worker); native
    backends compile the schema directly, timed on their own."""

    if backend == AUTO:  # each backend it tries has the whole limit (choose.py)
        return cache.get(c, backend, timeout_s=3 * timeout_s + 5).compiled
    if get_backend(backend).needs_automaton:
        return cache.get(c, backend, timeout_s=timeout_s + 5).compiled

    pool = cf.ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(get_backend(backend).compile, c, ctx)
    pool.shutdown(wait=False)
    try:
        return fut.result(timeout=timeout_s)
    except cf.TimeoutError:
        raise CfsmError("compile_timeout", f"{backend} took longer than {timeout_s:g} s") from None


def run(
    engine, backends: list[str], per_subset: int = 8, timeout_s: float = 15.0, log=print
) -> dict:
    if not DATA.exists():
        raise CfsmError("invalid_input", f"benchmark data not found at {DATA}")
    ctx = engine.ctx
    tok = ctx.tokenizer
    rows = []
    for subset in SUBSETS:
        files = sorted((DATA / subset).glob("*.json"))[:per_subset]
        for f in files:
            schema_text = f.read_text(encoding="utf-8")
            mb_path = DATA / "maskbench" / subset / f.name
            record = json.loads(mb_path.read_text()) if mb_path.exists() else None
            row = {"subset": subset, "id": f.stem, "backends": {}}
            for b in backends:
                cache = CompileCache(ctx, timeout_s=timeout_s, budget_bytes=256 * 1024 * 1024)
                res: dict = {}
                t0 = time.perf_counter()
                try:
                    c = Constraint("schema", schema_text, "compact")
                    comp = _compile(cache, ctx, c, b, timeout_s)
                    res["compiled"] = True
                    res["compile_s"] = time.perf_counter() - t0
                except CfsmError as exc:
                    res.update({"compiled": False, "error": exc.kind, "message": exc.message[:200]})
                    comp = None
                except Exception as exc:  # noqa: BLE001 - a library crash is a compile failure too
                    res.update(
                        {"compiled": False, "error": "compile_failed", "message": str(exc)[:200]}
                    )
                    comp = None
                if comp is not None and record is not None:
                    rs = record["schema"]
                    # the record's schema may differ slightly: compile it too when it does
                    if json.dumps(rs, sort_keys=True) != json.dumps(
                        json.loads(schema_text), sort_keys=True
                    ):
                        try:
                            comp = _compile(
                                cache,
                                ctx,
                                Constraint("schema", json.dumps(rs), "compact"),
                                b,
                                timeout_s,
                            )
                        except Exception:  # noqa: BLE001
                            comp = None
                    if comp is not None:
                        masks, cov, chars, ok_valid, n_valid, bad_accepted, n_invalid = (
                            [],
                            0,
                            0,
                            0,
                            0,
                            [],
                            0,
                        )
                        for i, test in enumerate(record["tests"]):
                            text = dump_as_generated(test["data"], rs)
                            try:
                                w = walk_instance(comp, tok, ctx.vocab.token_bytes, text)
                            except Exception as exc:  # noqa: BLE001
                                w = {
                                    "accepted": False,
                                    "mask_s": [],
                                    "covered": 0,
                                    "bytes": len(text),
                                    "error": str(exc)[:100],
                                }
                            if test["valid"]:
                                n_valid += 1
                                ok_valid += int(w["accepted"])
                                masks.extend(w["mask_s"])
                                if w["accepted"]:
                                    cov += w["covered"]
                                    chars += w["bytes"]
                            else:
                                n_invalid += 1
                                if w["accepted"]:
                                    bad_accepted.append(i)
                        res.update(
                            {
                                "valid": n_valid,
                                "valid_accepted": ok_valid,
                                "invalid": n_invalid,
                                "invalid_accepted": bad_accepted,
                                "mask_us": [round(x * 1e6, 1) for x in masks],
                                "jump_covered_bytes": cov,
                                "instance_bytes": chars,
                            }
                        )
                cache.close()
                row["backends"][b] = res
            rows.append(row)
            log(
                f"{subset:15s} {f.stem:28s} "
                + " ".join(
                    f"{b}:{'ok' if r['compiled'] else r['error'][:12]}"
                    + (
                        f"({r['valid_accepted']}/{r['valid']}v,{len(r['invalid_accepted'])}/{r['invalid']}i)"
                        if "valid" in r
                        else ""
                    )
                    for b, r in row["backends"].items()
                )
            )
    return summarize(rows, backends)


def summarize(rows: list[dict], backends: list[str]) -> dict:
    summary = {}
    for b in backends:
        rs = [r["backends"][b] for r in rows]
        comp = [r for r in rs if r["compiled"]]
        masks = [x for r in comp for x in r.get("mask_us", [])]
        cov = sum(r.get("jump_covered_bytes", 0) for r in comp)
        chars = sum(r.get("instance_bytes", 0) for r in comp)
        summary[b] = {
            "schemas": len(rs),
            "compiled": len(comp),
            "coverage": round(len(comp) / max(1, len(rs)), 3),
            "compile_ms_p50": round(1e3 * (_pct([r["compile_s"] for r in comp], 0.5) or 0), 1),
            "compile_ms_p90": round(1e3 * (_pct([r["compile_s"] for r in comp], 0.9) or 0), 1),
            "mask_us_p50": _pct(masks, 0.5),
            "mask_us_p99": _pct(masks, 0.99),
            "masks": len(masks),
            "valid_accepted": sum(r.get("valid_accepted", 0) for r in comp),
            "valid": sum(r.get("valid", 0) for r in comp),
            "invalid_accepted": sum(len(r.get("invalid_accepted", [])) for r in comp),
            "invalid": sum(r.get("invalid", 0) for r in comp),
            "jump_share_of_instance_bytes": round(cov / max(1, chars), 3),
            "errors": dict(sorted(_count(r.get("error") for r in rs if not r["compiled"]).items())),
        }
    chain = [b for b in FALLBACK if b in backends]
    covered = sum(1 for r in rows if any(r["backends"][b]["compiled"] for b in chain))
    leaks = [
        {
            "subset": r["subset"],
            "id": r["id"],
            "backend": b,
            "tests": r["backends"][b]["invalid_accepted"],
        }
        for r in rows
        for b in backends
        if r["backends"][b].get("invalid_accepted")
    ]
    return {
        "suite": "jsonschemabench",
        "schemas": len(rows),
        "summary": summary,
        "fallback_chain": {
            "order": chain,
            "covered": covered,
            "coverage": round(covered / max(1, len(rows)), 3),
        },
        "invalid_instances_accepted": leaks,
        "rows": rows,
    }


def _count(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def format_table(res: dict) -> str:
    lines = [
        "| backend | compiled | coverage | compile p50 / p90 ms | mask p50 / p99 us | valid "
        "accepted | invalid accepted | jump share |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b, s in res["summary"].items():
        lines.append(
            f"| {b} | {s['compiled']}/{s['schemas']} | {s['coverage']:.0%} | "
            f"{s['compile_ms_p50']} / {s['compile_ms_p90']} | {s['mask_us_p50']} / "
            f"{s['mask_us_p99']} | {s['valid_accepted']}/{s['valid']} | "
            f"{s['invalid_accepted']}/{s['invalid']} | {s['jump_share_of_instance_bytes']:.0%} |"
        )
    fc = res["fallback_chain"]
    lines.append(
        f"\nFallback chain {' -> '.join(fc['order'])}: {fc['covered']}/{res['schemas']} schemas "
        f"({fc['coverage']:.0%})."
    )
    return "\n".join(lines)


def _run(args, log) -> dict:
    return with_engine(
        args,
        lambda eng: run(eng, backends_of(args), per_subset=args.per_subset, log=log),
        load_weights=False,
    )


SUITE = Suite(
    "jsonschemabench",
    "real-world schemas per backend: compile, conformance and jump-forward (no weights)",
    _run,
    format_table,
    (
        backends_flag("fsm,outlines,xgrammar,llguidance,auto"),
        Flag("--per-subset", {"type": int, "default": 8, "help": "40 = all"}),
    ),
    report=write_report,
    summary=lambda res: {k: v for k, v in res.items() if k != "rows"},
)
