"""`cfsm bench --suite conformance`: the official JSON-Schema test suite (draft 2020-12)
run through every backend's own matcher. Per backend and keyword file: schemas compiled,
refused (by keyword) and warned; valid instances accepted or rejected; invalid instances
rejected or accepted, and accepted *without a warning* (the number that must be 0).

Instances are written the way generation writes them: compact or by the whitespace
policy, keys in the schema's order, non-ASCII as is. They are walked byte by byte with a
one-token-per-byte tokenizer, so a verdict never depends on a model's merges."""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import resource
import time
from pathlib import Path

from engine.analysis.check import check_text
from engine.backends import TokenizerContext, get_backend
from engine.constraint import Constraint
from engine.errors import CfsmError
from engine.schema import WHITESPACE_POLICIES, dump_as_generated
from engine.tokens.byte_tokenizer import byte_tokenizer

from .conformance_report import write_conformance_report
from .suite import Flag, Suite, backends_flag, backends_of

SUITE_DIR = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "bench-data"
    / "json-schema-test-suite"
    / "draft2020-12"
)
# format.json tests `format` as an annotation (anything passes); generation asserts
# formats, as optional/format/*.json does, so that file is the rule here.
SKIP = {"format.json"}
COUNTERS = (
    "schemas",
    "compiled",
    "refused",
    "warned",
    "valid",
    "valid_accepted",
    "valid_rejected",
    "invalid",
    "invalid_rejected",
    "invalid_accepted",
    "invalid_accepted_unwarned",
)


# backends run one schema at a time in a forked child, with a time and memory limit
ISOLATED_TIMEOUT_S = 20.0
CHILD_MEMORY_BYTES = 4 * 2**30


def _child(run: ConformanceRun, group: dict, send) -> None:
    with open("/proc/self/statm") as f:  # the address space so far (pages), plus the allowance
        limit = int(f.read().split()[0]) * resource.getpagesize() + CHILD_MEMORY_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        send.send(run.evaluate(group))
    except MemoryError:
        send.send(
            {
                "refused": "crash: out of memory",
                "crash": f"MemoryError past {CHILD_MEMORY_BYTES >> 30} GB",
            }
        )
    send.close()


def suite_files(root: Path = SUITE_DIR) -> list[Path]:
    files = sorted(p for p in root.glob("*.json") if p.name not in SKIP)
    return (
        files
        + sorted((root / "optional" / "format").glob("*.json"))
        + sorted((root / "optional").glob("*.json"))
    )


def serialize(data, schema, whitespace: str) -> str | None:
    try:
        return dump_as_generated(data, schema, whitespace, allow_nan=False)
    except (ValueError, TypeError):
        return None


def _refusal_keyword(msg: str) -> str:
    m = re.search(r"`([$\w]+)`", msg)
    return m.group(1) if m else msg.split(":")[0][:40]


class ConformanceRun:
    """One backend over the suite; counts per file and in total, and keeps the cases a
    user would want to see (invalid accepted, valid rejected)."""

    def __init__(
        self,
        backend: str,
        ctx: TokenizerContext,
        whitespace: str,
        lenient: bool,
        spec: bool = False,
        timeout_s: float = ISOLATED_TIMEOUT_S,
    ) -> None:
        self.backend, self.ctx, self.whitespace, self.lenient, self.spec = (
            backend,
            ctx,
            whitespace,
            lenient,
            spec,
        )
        self.impl = get_backend(backend)
        self.isolate, self.timeout_s = self.impl.compiles_in_worker, timeout_s
        self.totals = dict.fromkeys(COUNTERS, 0)
        self.files: dict[str, dict] = {}
        self.refusals: dict[str, int] = {}
        self.cases: list[dict] = []

    def run_file(self, path: Path, name: str) -> None:
        counts = self.files.setdefault(name, dict.fromkeys(COUNTERS, 0))
        for group in json.loads(path.read_text(encoding="utf-8")):
            self.run_group(group, name, counts)

    def _bump(self, counts: dict, key: str, n: int = 1) -> None:
        counts[key] += n
        self.totals[key] += n

    def run_group(self, group: dict, name: str, counts: dict) -> None:
        self._bump(counts, "schemas")
        out = self.evaluate_isolated(group) if self.isolate else self.evaluate(group)
        schema = group["schema"]
        if "refused" in out:
            self._bump(counts, "refused")
            self.refusals[out["refused"]] = self.refusals.get(out["refused"], 0) + 1
            if "crash" in out and len(self.cases) < 400:
                self.cases.append(
                    {
                        "file": name,
                        "group": group["description"],
                        "crash": out["crash"],
                        "schema": json.dumps(schema)[:400],
                    }
                )
            return
        self._bump(counts, "compiled")
        if out["warned"]:
            self._bump(counts, "warned")
        for valid, accepted, desc, text in out["tests"]:
            self.record(counts, valid, accepted, out["warned"])
            if accepted != valid and len(self.cases) < 400:
                self.cases.append(
                    {
                        "file": name,
                        "group": group["description"],
                        "test": desc,
                        "valid": valid,
                        "text": text[:300],
                        "schema": json.dumps(schema)[:400],
                        "warned": out["warned"],
                    }
                )

    def evaluate(self, group: dict) -> dict:
        """Compile one group's schema and walk its instances: {"refused": keyword} (and
        "crash" for a library failure), or {"warned", "tests": [(valid, accepted, test, text)]}."""
        schema = group["schema"]
        try:
            c = Constraint("schema", json.dumps(schema), self.whitespace, self.lenient, self.spec)
            compiled = self.impl.compile(c, self.ctx)
        except CfsmError as exc:
            return {"refused": _refusal_keyword(exc.message)}
        except Exception as exc:  # noqa: BLE001 - a crash is recorded as a refusal by "crash"
            return {"refused": f"crash: {type(exc).__name__}", "crash": repr(exc)[:300]}
        tests = []
        for test in group["tests"]:
            text = serialize(test["data"], schema, self.whitespace)
            if text is None:
                continue
            try:
                accepted = bool(check_text(compiled, None, self.ctx, text)["accepted"])
            except Exception:  # noqa: BLE001 - a backend crash on one instance is a rejection
                accepted = False
            tests.append((bool(test["valid"]), accepted, test["description"], text))
        return {"warned": bool(compiled.warnings), "tests": tests}

    def evaluate_isolated(self, group: dict) -> dict:
        """`evaluate` in a forked child with a time and memory limit: outlines-core can
        spend minutes and gigabytes on one Index, which a thread could not stop."""

        ctx = mp.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(self, group, send), daemon=True)
        proc.start()
        send.close()
        try:
            if recv.poll(self.timeout_s):
                return recv.recv()
            return {"refused": "compile_timeout"}
        except (
            EOFError
        ):  # the child died: out of memory (an abort past the limit) or a library panic
            proc.join(1)
            why = (
                f"the compiling process died (exit code {proc.exitcode}; the memory limit is "
                f"{CHILD_MEMORY_BYTES >> 30} GB more than the benchmark's)"
            )
            return {"refused": "crash: process died", "crash": why}
        finally:
            proc.kill()
            proc.join()
            recv.close()

    def record(self, counts: dict, valid: bool, accepted: bool, warned: bool) -> None:
        self._bump(counts, "valid" if valid else "invalid")
        if valid:
            self._bump(counts, "valid_accepted" if accepted else "valid_rejected")
        else:
            self._bump(counts, "invalid_accepted" if accepted else "invalid_rejected")
            if accepted and not warned:
                self._bump(counts, "invalid_accepted_unwarned")

    def report(self) -> dict:
        parts = {"required": dict.fromkeys(COUNTERS, 0), "optional": dict.fromkeys(COUNTERS, 0)}
        for name, counts in self.files.items():  # the suite's own split: optional/ is not required
            part = parts["optional" if name.startswith("optional") else "required"]
            for k, v in counts.items():
                part[k] += v
        return {
            "backend": self.backend,
            "totals": self.totals,
            **parts,
            "files": self.files,
            "refusals": dict(sorted(self.refusals.items(), key=lambda kv: -kv[1])),
            "cases": self.cases,
        }


def run(
    backends: list[str],
    whitespace: str = "compact",
    lenient: bool = False,
    root: Path = SUITE_DIR,
    log=print,
    spec: bool = False,
) -> dict:
    if not root.exists():
        raise CfsmError("invalid_input", f"the JSON-Schema test suite is not at {root}")

    ctx = TokenizerContext(byte_tokenizer())
    out = {
        "suite": "conformance",
        "whitespace": whitespace,
        "lenient": lenient,
        "spec": spec,
        "backends": {},
    }
    for b in backends:
        t0 = time.perf_counter()
        r = ConformanceRun(b, ctx, whitespace, lenient, spec)
        if (
            r.isolate
        ):  # the backend's per-tokenizer tables, built once here rather than in every child
            r.evaluate({"schema": {"type": "null"}, "tests": []})
        for path in suite_files(root):
            t1 = time.perf_counter()
            r.run_file(path, str(path.relative_to(root)))
            if time.perf_counter() - t1 > 10:
                log(f"  {b}: {path.name} took {time.perf_counter() - t1:.0f} s")
        out["backends"][b] = {**r.report(), "seconds": round(time.perf_counter() - t0, 1)}
        log(f"{b}: {r.totals} ({out['backends'][b]['seconds']} s)")
    return out


def format_table(res: dict) -> str:
    head = (
        f"{'backend':<20} {'schemas':>7} {'compiled':>8} {'refused':>7} {'warned':>6} "
        f"{'valid ok':>9} {'valid rej':>14} {'inv rej':>8} {'inv acc':>7} {'inv acc unwarned':>16}"
    )
    rows = [head]
    for b, r in res["backends"].items():
        for label, t in [
            (b, r["totals"]),
            ("  required", r.get("required")),
            ("  optional", r.get("optional")),
        ]:
            if t is None:
                continue
            share = f"{t['valid_rejected']} ({100 * t['valid_rejected'] / max(t['valid'], 1):.1f}%)"
            rows.append(
                f"{label:<20} {t['schemas']:>7} {t['compiled']:>8} {t['refused']:>7} "
                f"{t['warned']:>6} {t['valid_accepted']:>9} {share:>14} {t['invalid_rejected']:>8} "
                f"{t['invalid_accepted']:>7} {t['invalid_accepted_unwarned']:>16}"
            )
    return "\n".join(rows)


def _run(args, log) -> dict:
    return run(backends_of(args), args.whitespace, args.lenient, spec=args.spec, log=log)


SUITE = Suite(
    "conformance",
    "the JSON-Schema test suite through every backend (no model)",
    _run,
    format_table,
    (
        backends_flag(),
        Flag(
            "--whitespace",
            {
                "default": "compact",
                "choices": WHITESPACE_POLICIES,
                "help": "how instances are written and schemas compiled",
            },
        ),
        Flag("--lenient", {"action": "store_true", "help": "compile unenforceable keywords"}),
        Flag("--spec", {"action": "store_true", "help": "read schemas as JSON Schema does"}),
    ),
    report=write_conformance_report,
    summary=lambda res: {b: r["totals"] for b, r in res["backends"].items()},
    model=False,
)
