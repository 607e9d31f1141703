"""A benchmark suite as `cfsm bench` sees it. Each `cfsm/bench/<suite>.py` declares one
`Suite` (its name, its own flags, how it runs, how its results read as a table and an HTML
report); the CLI builds `cfsm bench NAME` from the registry (`cfsm.bench.SUITES`) and
writes every suite's results one way (`write_results`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.serving.service import Engine

Log = Callable[..., None]


@dataclass(frozen=True)
class Flag:
    """One flag of a suite's own, as `ArgumentParser.add_argument` takes it."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def backends_flag(default: str = "fsm,outlines,xgrammar,llguidance") -> Flag:
    return Flag("--backends", {"default": default, "help": "comma-separated backends"})


def names_flag(default: int, what: str = "character names") -> Flag:
    return Flag("--names", {"type": int, "default": default, "help": f"how many {what}"})


def tokens_flag(default: int = 256) -> Flag:
    return Flag("--max-new-tokens", {"type": int, "default": default})


@dataclass(frozen=True)
class Suite:
    """`run(args, log)` returns the results (JSON-serializable); `table(results)` is what
    the terminal shows; `report(results, path)` writes an HTML report beside the JSON and
    returns its path; `summary(results)` is what `--json` prints (default: the results).
    `model` says whether the suite takes the model flags (--model, --device, --runtime)."""

    name: str
    help: str
    run: Callable[[argparse.Namespace, Log], dict]
    table: Callable[[dict], str]
    flags: tuple[Flag, ...] = ()
    report: Callable[[dict, Path], Path] | None = None
    summary: Callable[[dict], Any] | None = None
    model: bool = True


def backends_of(args: argparse.Namespace) -> list[str]:
    return [b.strip() for b in args.backends.split(",") if b.strip()]


def open_engine(args: argparse.Namespace, **kw):
    """The engine the model flags ask for (--model, --device, --trust-remote-code,
    --runtime)."""

    return Engine(args.model, args.device, args.trust_remote_code, runtime=args.runtime, **kw)


def with_engine(args: argparse.Namespace, work: Callable[[Any], dict], **kw) -> dict:
    """`work(engine)` on the engine the flags ask for, closed afterwards whatever happens."""
    eng = open_engine(args, **kw)
    try:
        return work(eng)
    finally:
        eng.close()


def write_results(suite: Suite, res: dict, args: argparse.Namespace) -> Path:
    """The results as JSON at --out (default bench-results/NAME.json), the report beside
    it, and the table (or the --json summary) on stdout. Returns the JSON's path."""
    out = Path(args.out or f"bench-results/{suite.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, ensure_ascii=False))
    html = suite.report(res, out.with_suffix(".html")) if suite.report else None
    if args.json:
        print(json.dumps(suite.summary(res) if suite.summary else res, ensure_ascii=False))
    else:
        print("\n" + suite.table(res))
        print(f"results: {out}" + (f"; report: {html}" if html else ""))
    return out
