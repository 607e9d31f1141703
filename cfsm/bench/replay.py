"""`cfsm bench replay`: a real llama.cpp server's outputs replayed through this lab's
automaton. Where `llama-server` is built (scripts/build_llama_server.sh, outside `make
test`) it is started on the engine's GGUF and asked, streamed and greedy, as its users ask
it (`json_schema` through its own converter, a GBNF grammar for a regex) with logprobs; each
output is walked (`Engine.replay`): its tokens, the forced ones (jump-forward would have
skipped them, counted as `ideal_counts` counts them on the same token ids), its streamed
time per token, any token outside the constraint. The same prompts decoded by cfsm in jump
mode give the passes jump-forward actually takes. Without the server the suite says so."""

from __future__ import annotations

import dataclasses
import json
import statistics

from engine.analysis.ideal import ideal_counts
from engine.decoding.request import GenerateRequest
from engine.regex.compressed import compressed_of
from engine.replay.client import request_body, send

from .llama_server import LlamaServer, server_binary
from .llamacpp_grammar import schema_gbnf
from .peers import default_tasks
from .suite import Suite, names_flag, tokens_flag, with_engine


def variants(task) -> list[tuple[str, object, dict]]:
    """(label, the constraint walked, what llama-server is sent) per way of asking it: a
    regex as its GBNF; a schema as the compact grammar the lab's constraint holds to (like
    for like), and as `json_schema` through llama.cpp's own converter, as its users send it
    (walked with the flexible whitespace policy)."""
    c = task.constraint
    if c.kind != "schema":
        return [("grammar", c, {})]
    compact = {"grammar": schema_gbnf(json.loads(c.text), "compact"), "json_schema": None}
    return [("compact grammar", c, compact),
            ("json_schema", dataclasses.replace(c, whitespace="flexible"), {})]  # fmt: skip


def replay_task(eng, srv: LlamaServer, task, how: tuple, max_new: int, log) -> dict:
    label, c, override = how
    rows = []
    for prompt in task.prompts:
        body = request_body(c, prompt, "gguf", "llama-server", max_new, stream=True)
        body = {k: v for k, v in {**body, **override}.items() if v is not None}
        tr = eng.replay(
            c, send(srv.url + "/v1", body), {"endpoint": srv.url, "source": "stream"}
        ).to_json()
        r = tr["replay"]
        ids = [t["id"] for t in tr["tokens"]]
        ideal = ideal_counts(compressed_of(eng.automaton(c)), tr["text"], ids,
                             eng.ctx.vocab.token_bytes)  # fmt: skip
        req = GenerateRequest.from_inputs(prompt, task.constraint, mode="jump",
                                          max_new_tokens=max_new, trace_detail=False)  # fmt: skip
        own = eng.generate(req)
        rows.append({
            "tokens": r["tokens"], "forced": r["forced_tokens"],
            "analysis_forced": None if ideal is None else ideal["forced_tokens"],
            "ms_per_token": round(r["streamed_ms"] / max(1, r["tokens"]), 2)
            if r["streamed_ms"] else None,
            "valid": tr["valid"], "violations": len(r["violations"]),
            "cfsm_jump_passes": own.totals.forward_passes,
        })  # fmt: skip
        log(f"{task.name}, {label}: {rows[-1]}")
    return _sum(rows)


def _sum(rows: list[dict]) -> dict:
    tokens, forced = sum(r["tokens"] for r in rows), sum(r["forced"] for r in rows)
    ms = [r["ms_per_token"] for r in rows if r["ms_per_token"] is not None]
    return {
        "outputs": len(rows),
        "llama_server_passes": tokens,
        "forced_tokens": forced,
        "forced_fraction": round(forced / max(1, tokens), 3),
        # where the outputs stay in the automaton: the replay's count is the analysis' count
        "analysis_agrees": all(
            r["analysis_forced"] == r["forced"] for r in rows if r["analysis_forced"] is not None
        )
        if any(r["analysis_forced"] is not None for r in rows)
        else None,  # fmt: skip
        "valid": sum(1 for r in rows if r["valid"]),
        "outside_constraint": sum(1 for r in rows if r["violations"]),
        "median_ms_per_token": round(statistics.median(ms), 2) if ms else None,
        "cfsm_jump_passes": sum(r["cfsm_jump_passes"] for r in rows),
        "rows": rows,
    }


def run(args, log=print) -> dict:
    binary = server_binary()
    if binary is None:
        return {"server": None, "note": "llama-server is not built here "
                "(scripts/build_llama_server.sh); nothing was replayed"}  # fmt: skip

    def work(eng) -> dict:
        llm = eng.ensure_model("llamacpp").lm.model
        srv = LlamaServer(binary, llm.path, llm.threads, llm.threads)
        try:
            tasks = default_tasks(args.names)
            out = {f"{t.name}, {v[0]}": replay_task(eng, srv, t, v, args.max_new_tokens, log)
                   for t in tasks for v in variants(t)}  # fmt: skip
            return {"server": str(binary), "tasks": out}
        finally:
            srv.close()

    return with_engine(args, work)


def table(res: dict) -> str:
    if not res.get("tasks"):
        return res.get("note", "")
    head = ("| task | outputs | llama-server passes | forced (jump-forward skips) | analysis "
            "agrees | valid | outside | ms/token | cfsm jump passes |")  # fmt: skip
    rows = [head, "|" + "---|" * 9]
    for name, t in res["tasks"].items():
        rows.append(
            f"| {name} | {t['outputs']} | {t['llama_server_passes']} | {t['forced_tokens']} "
            f"({t['forced_fraction']:.0%}) | {t['analysis_agrees']} | {t['valid']} | "
            f"{t['outside_constraint']} | {t['median_ms_per_token']} | {t['cfsm_jump_passes']} |"
        )
    return "\n".join(rows)


SUITE = Suite(
    name="replay",
    help="a real llama-server's outputs replayed through the automaton (where it is built)",
    run=run,
    table=table,
    flags=(names_flag(3), tokens_flag(256)),
)
