"""`cfsm bench --suite tokenizers`: per tokenizer family (cfsm/bench/tiny_models.py, a
tiny random Llama over each), forward passes masked / jump / ideal on the SGLang
character regex and on a compact JSON-schema task, sampled as the issue's table was
(temperature 0.7, raw prompts). Random weights make the texts arbitrary but valid; what
is measured is what the constraint and the tokenizer leave to the model."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest
from engine.serving.service import Engine

from .decode import paper_items
from .peers import COMPACT_PERSON
from .suite import Suite, names_flag, tokens_flag
from .tiny_models import FAMILIES, FAMILY_TITLES, build_model


def _tasks(names: int) -> list[tuple[str, Constraint, list[str]]]:
    regex, items = paper_items("character", names)
    who = [label for label, _ in items]
    return [
        ("character (regex)", Constraint("regex", regex), [p for _, p in items]),
        ("person (compact schema)", Constraint("schema", json.dumps(COMPACT_PERSON)), who),
    ]


def _run_family(folder: Path, tasks, max_new_tokens: int) -> dict:
    eng = Engine(str(folder))
    out: dict = {"tokenizer": eng.ctx.continuation.traits.to_json(), "tasks": {}}
    try:
        for name, c, prompts in tasks:
            row = {
                "masked": 0,
                "jump": 0,
                "ideal": 0,
                "jumps": 0,
                "jumps_skipped": 0,
                "invalid": 0,
                "unfinished": 0,
                "skip_reasons": [],
            }
            for i, p in enumerate(prompts):
                for mode in ("masked", "jump"):
                    tr = eng.generate(
                        GenerateRequest.from_inputs(
                            p,
                            c,
                            mode=mode,
                            raw_prompt=True,
                            temperature=0.7,
                            seed=i,
                            max_new_tokens=max_new_tokens,
                            trace_detail=False,
                        )
                    ).to_json()
                    t = tr["totals"]
                    row[mode] += t["forward_passes"]
                    row["invalid"] += tr["valid"] is False and t["finished"]
                    row["unfinished"] += not t["finished"]
                    if mode == "jump":
                        row["ideal"] += (tr.get("ideal") or {}).get("ideal_forward_passes") or 0
                        row["jumps"] += t["jumps"]
                        row["jumps_skipped"] += t["jumps_skipped"]
                        row["skip_reasons"] += [s["reason"] for s in tr["jump_skips"][:1]]
            row["jump_vs_masked"] = round(row["jump"] / max(1, row["masked"]), 3)
            row["jump_vs_ideal"] = round(row["jump"] / max(1, row["ideal"]), 3)
            out["tasks"][name] = row
    finally:
        eng.close()
    return out


def run(
    names: int = 5, families: tuple[str, ...] = FAMILIES, max_new_tokens: int = 400, log=print
) -> dict:
    tasks = _tasks(names)
    res: dict = {"names": names, "max_new_tokens": max_new_tokens, "families": {}}
    with tempfile.TemporaryDirectory(prefix="cfsm-tokenizers-") as tmp:
        for fam in families:
            folder = build_model(Path(tmp) / fam, fam)
            res["families"][fam] = {
                "title": FAMILY_TITLES[fam],
                **_run_family(folder, tasks, max_new_tokens),
            }
            log(f"{fam}: {json.dumps(res['families'][fam]['tasks'])}")
    return res


def format_table(res: dict) -> str:
    rows = [
        "| tokenizer | task | masked | jump | ideal | jump/masked | jump/ideal | jumps | skipped |"
        " invalid |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fam in res["families"].values():
        for task, r in fam["tasks"].items():
            rows.append(
                f"| {fam['title']} | {task} | {r['masked']} | {r['jump']} | {r['ideal']} | "
                f"{r['jump_vs_masked']:.2f} | {r['jump_vs_ideal']:.2f} | {r['jumps']} | "
                f"{r['jumps_skipped']} | {r['invalid']} |"
            )
    return "\n".join(rows)


SUITE = Suite(
    "tokenizers",
    "masked / jump / ideal passes per tokenizer family (tiny models built offline)",
    lambda args, log: run(args.names, max_new_tokens=args.max_new_tokens, log=log),
    format_table,
    (names_flag(5), tokens_flag()),
    model=False,
)
