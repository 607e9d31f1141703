"""`cfsm bench --suite triggers`: constraints that start on a trigger, with the embedded
model. Per task and backend, side by side in one run: forward passes and wall time masked
vs jump (jump-forward runs inside the constrained segments only), every output checked
segment by segment; and what free text costs the grammar: per free token, the engine's
grammar time and the extra sampling time over the same text decoded with no constraint,
as a share of a decode step (target under 2%: nothing is masked there)."""

from __future__ import annotations

import json
import statistics

from engine.backends import get_backend
from engine.backends.base import GrammarBackend
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.errors import CfsmError
from engine.lazy import lazy_module
from engine.serving.service import Engine

from .suite import Suite, backends_flag, backends_of, names_flag, tokens_flag

app_presets = lazy_module("app.presets")  # the page's package: not imported by `cfsm` itself

CITIES = ("Paris", "Tokyo", "Berlin", "Rome", "Cairo", "Lima", "Oslo", "Delhi")
QUESTIONS = ("3 apples and 4 more", "10 pears minus 6", "2 boxes of 5 apples", "7 pears and 8")


def _tools_text() -> str:
    return json.dumps(app_presets.TOOLS)


def _answer() -> Constraint:
    return Constraint("schema", json.dumps(app_presets.ANSWER_SCHEMA))


def tasks(n: int) -> dict[str, list[tuple[str, Constraint | None, dict]]]:
    """name -> [(prompt, constraint, trigger fields)]: required calls (<tool_call>), calls
    the model opens in free text (```json blocks), reasoning with a budget then JSON."""
    tools = _tools_text()
    cities = [CITIES[i % len(CITIES)] for i in range(n)]
    return {
        "tool call, required": [
            (
                f"What time is it in {c}? Use a tool.",
                None,
                {"tools": tools, "tool_choice": "required"},
            )
            for c in cities
        ],
        "tool call, auto (```json)": [
            (
                f"Write the tool call get_weather for {c} (celsius) as a JSON object in a ```json "
                "block.",
                None,
                {"tools": tools, "tool_start": "```json\n", "tool_end": "\n```"},
            )
            for c in cities
        ],
        "reasoning (budget 32), then JSON": [
            (
                f"How many: {QUESTIONS[i % len(QUESTIONS)]}? Think step by step inside <think> "
                "</think>, then give the answer as JSON.",
                _answer(),
                {"reasoning": True, "think_budget": 32},
            )
            for i in range(n)
        ],
    }


def _free_steps(tr: dict) -> list[dict]:
    kinds = {s["index"]: s["kind"] for s in tr["segments"]}
    return [s for s in tr["steps"] if kinds.get(s.get("segment")) == "free"]


def _free_baseline(eng, prompt: str, max_new_tokens: int) -> dict:
    tr = eng.generate(
        GenerateRequest.from_inputs(prompt, None, mode="free", max_new_tokens=max_new_tokens)
    )
    return tr.to_json()["totals"]


def run_task(eng, items, backend: str, max_new_tokens: int, impl: str = "engine") -> dict:
    row: dict = {"masked": {}, "jump": {}}
    free_grammar, free_sample, free_forward, base_sample = [], [], [], []
    for mode in ("masked", "jump"):
        passes = wall = invalid = unfinished = calls = 0
        for prompt, c, fields in items:
            req = GenerateRequest.from_inputs(
                prompt,
                c,
                mode=mode,
                backend=backend,
                max_new_tokens=max_new_tokens,
                trigger_impl=impl,
                **fields,
            )
            tr = eng.generate(req).to_json()
            t = tr["totals"]
            passes, wall = passes + t["forward_passes"], wall + t["wall_s"]
            invalid += tr["valid"] is False and t["finished"]
            unfinished += not t["finished"]
            calls += sum(1 for s in tr["segments"] if s["kind"] == "constrained")
            if mode == "masked":
                free = _free_steps(tr)
                free_grammar += [s.get("grammar_us") or 0.0 for s in free]
                free_sample += [s["sample_us"] for s in free]
                free_forward += [s["forward_ms"] for s in free if s["forward_ms"] > 0]
                if free:
                    base_sample.append(_free_baseline(eng, prompt, len(free))["sample_us_per_step"])
        row[mode] = {
            "forward_passes": passes,
            "wall_s": round(wall, 3),
            "invalid": invalid,
            "unfinished": unfinished,
            "constrained_segments": calls,
        }
    row["jump_vs_masked_passes"] = round(
        row["jump"]["forward_passes"] / max(1, row["masked"]["forward_passes"]), 3
    )
    row["masked_vs_jump_wall"] = round(
        row["masked"]["wall_s"] / max(1e-9, row["jump"]["wall_s"]), 3
    )
    row["free"] = _free_costs(free_grammar, free_sample, free_forward, base_sample)
    return row


def _free_costs(grammar_us, sample_us, forward_ms, base_sample_us) -> dict:
    """Per free token: the grammar's time (scanner, mask lookup) and the sampling time above
    an unconstrained run's, against the median decode step."""
    if not grammar_us:
        return {"tokens": 0}
    step_us = statistics.median(forward_ms) * 1e3 if forward_ms else float("nan")
    g = statistics.mean(grammar_us)
    extra = statistics.mean(sample_us) - statistics.mean(base_sample_us or sample_us)
    return {
        "tokens": len(grammar_us),
        "grammar_us": round(g, 1),
        "sample_us": round(statistics.mean(sample_us), 1),
        "sample_us_unconstrained": round(statistics.mean(base_sample_us), 1)
        if base_sample_us
        else None,
        "decode_step_us": round(step_us, 1),
        "overhead_share": round((g + max(0.0, extra)) / step_us, 4),
    }


def run(names: int = 5, backends=("fsm",), max_new_tokens: int = 200, log=print) -> dict:
    eng = Engine()
    res: dict = {
        "prompts": names,
        "max_new_tokens": max_new_tokens,
        "runtime": eng.runtime,
        "rows": [],
    }
    try:
        for task, items in tasks(names).items():
            for b, impl in _runs(backends):
                row = {"task": task, "backend": b, "triggers": impl}
                try:
                    row.update(run_task(eng, items, b, max_new_tokens, impl))
                except CfsmError as exc:  # e.g. llguidance's own machinery has no budget
                    row["refused"] = exc.message
                res["rows"].append(row)
                log(json.dumps(row))
    finally:
        eng.close()
    return res


def _runs(backends) -> list[tuple[str, str]]:
    """Every backend through the engine's trigger layer; a backend with trigger machinery of
    its own (xgrammar's structural tags) through that too, side by side."""

    out = []
    for b in backends:
        out.append((b, "engine"))
        if type(get_backend(b)).triggered_grammar is not GrammarBackend.triggered_grammar:
            out.append((b, "native"))
    return out


def format_table(res: dict) -> str:
    rows = [
        "| task | backend (triggers) | passes masked | passes jump | jump/masked | wall masked | "
        "wall jump | invalid / unfinished | free tokens | grammar per free token | "
        "share of a decode step |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        if "refused" in r:
            rows.append(
                f"| {r['task']} | {r['backend']} ({r['triggers']}) | refused: "
                f"{r['refused'][:80]} |||||||||"
            )
            continue
        m, j, f = r["masked"], r["jump"], r["free"]
        share = f"{100 * f['overhead_share']:.2f}%" if f.get("tokens") else "-"
        grammar = f"{f['grammar_us']:.0f} \u00b5s" if f.get("tokens") else "-"
        rows.append(
            f"| {r['task']} | {r['backend']} ({r.get('triggers', 'engine')}) | "
            f"{m['forward_passes']} | {j['forward_passes']} | "
            f"{r['jump_vs_masked_passes']:.2f} | {m['wall_s']:.2f} s | {j['wall_s']:.2f} s | "
            f"{m['invalid'] + j['invalid']} / {m['unfinished'] + j['unfinished']} | "
            f"{f.get('tokens', 0)} | {grammar} | {share} |"
        )
    return "\n".join(rows)


def _run(args, log) -> dict:
    tokens = min(args.max_new_tokens, 200)
    return run(names=args.names, backends=backends_of(args), max_new_tokens=tokens, log=log)


SUITE = Suite(
    "triggers",
    "tool calls and reasoning: masked vs jump passes, the grammar's cost per free token",
    _run,
    format_table,
    (names_flag(5), backends_flag(), tokens_flag()),
    model=False,
)
