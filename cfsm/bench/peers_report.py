"""The peers benchmark's results read: the per-task summary (cfsm jump against the fastest
peer), the Markdown table, and the HTML report (one table per task, systems side by side)."""

from __future__ import annotations

import html
from pathlib import Path


def peers_html(res: dict) -> str:
    parts = [
        "<html><head><meta charset='utf-8'><title>cfsm vs peers</title></head><body "
        "style='font-family:sans-serif'>",
        "<h1>cfsm vs the systems a user would pick instead</h1>",
        f"<p>model {html.escape(str(res['model'].get('name')))} on "
        f"{html.escape(str(res['model'].get('device')))}, greedy, max_new_tokens "
        f"{res['max_new_tokens']}, same prompts (chat template) for every system.</p>",
    ]
    for task in dict.fromkeys(r["task"] for r in res["rows"]):
        rows = [r for r in res["rows"] if r["task"] == task]
        fastest = min(r["wall_s"] for r in rows)
        body = "".join(
            f"<tr><td>{html.escape(r['system'])}</td><td align=right>{r['wall_s']:.2f} s</td>"
            f"<td align=right>{r['wall_s'] / max(fastest, 1e-9):.2f}x</td><td "
            f"align=right>{r['output_tokens']}</td><td "
            f"align=right>{r.get('output_chars', '')}</td><td "
            f"align=right>{r.get('ms_per_char', '')}</td><td align=right>{r['tokens_per_s']}</td>"
            f"<td align=right>{r['compile_s'] * 1e3:.1f} ms</td><td align=right "
            f"style='{'' if r['valid'] == r['runs'] else 'color:#b91c1c;font-weight:bold'}'>"
            f"{r['valid']}/{r['runs']}</td><td>"
            f"<code>{html.escape(r['sample'][:120])}</code></td></tr>"
            for r in rows
        )
        s = res["summary"].get(task, {})
        parts.append(
            f"<h2>{html.escape(task)}</h2><table border=1 cellpadding=3 "
            "style='border-collapse:collapse'><tr><th>system</th><th>wall</th><th>vs fastest</th>"
            "<th>output tokens</th><th>output chars</th><th>ms/char</th><th>tokens/s</th>"
            f"<th>compile</th><th>valid</th><th>first output</th></tr>{body}</table>"
            f"<p>cfsm jump vs the fastest peer ({html.escape(str(s.get('fastest_peer')))}): "
            f"<b>{s.get('jump_speedup_vs_fastest_peer')}x</b> in wall time, "
            f"{s.get('jump_speedup_per_char')}x per output character; outputs equal to the "
            f"fastest peer's: {s.get('same_outputs_as_fastest_peer')}</p>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_peers_report(res: dict, path: Path) -> Path:
    path = Path(path)
    path.write_text(peers_html(res), encoding="utf-8")
    return path


def summarize(rows: list[dict], reference: str) -> dict:
    """Per task: cfsm jump's wall-time speedup over the fastest peer (not cfsm, not the
    unconstrained reference), cfsm on llama.cpp against llama.cpp+grammar, and masked
    decoding's cost per token against unconstrained llama.cpp (`reference`: the
    unconstrained system's name)."""
    out = {}
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = {r["system"]: r for r in rows if r["task"] == task}
        peers = [
            r
            for s, r in mine.items()
            if not s.startswith("cfsm") and s != reference and r["like_for_like"]
        ]
        jumps = [r for s, r in mine.items() if s.startswith("cfsm jump")]
        if not peers or not jumps:
            continue
        best = min(peers, key=lambda r: r["wall_s"])
        jump = min(jumps, key=lambda r: r["wall_s"])
        same = sum(
            a == b for a, b in zip(best.get("texts", []), jump.get("texts", []), strict=False)
        )
        s = {
            "fastest_peer": best["system"],
            "fastest_cfsm_jump": jump["system"],
            "jump_speedup_vs_fastest_peer": ratio(best["wall_s"], jump["wall_s"]),
            "jump_speedup_per_char": ratio(best["ms_per_char"], jump["ms_per_char"]),
            "same_outputs_as_fastest_peer": f"{same}/{jump['runs']}",
            "all_valid": all(r["valid"] == r["runs"] for s_, r in mine.items() if s_ != reference),
            "cfsm_valid": all(
                r["valid"] == r["runs"] for s_, r in mine.items() if s_.startswith("cfsm")
            ),
        }
        grammar, ref = mine.get("llama-server sampler"), mine.get(reference)
        lj, lm = mine.get("cfsm jump (llama.cpp)"), mine.get("cfsm masked (llama.cpp)")
        if grammar and lj:
            s["llamacpp_jump_vs_llama_server_sampler"] = ratio(grammar["wall_s"], lj["wall_s"])
        if lj and "jump_vs_limit" in lj:
            s["jump_vs_limit"] = lj["jump_vs_limit"]
        if ref and lm:
            # per token after the prompt's first pass: the outputs differ in length (the
            # unconstrained ones run to the limit), and the prompt's cost is not decoding
            s["llamacpp_masked_ms_per_token_vs_unconstrained"] = ratio(
                lm["decode_ms_per_token"], ref["decode_ms_per_token"]
            )
        out[task] = s
    return out


def ratio(a: float, b: float) -> float:
    return round(a / max(b, 1e-9), 2)


def format_table(res: dict) -> str:
    lines = [
        "| task | system | wall | output tokens | output chars | ms/char | decode ms/token "
        "| compile | valid | limit (jump / limit) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        limit = f"{r['limit_s']:.2f} s ({r['jump_vs_limit']}x)" if "limit_s" in r else ""
        lines.append(
            f"| {r['task']} | {r['system']}{'' if r.get('like_for_like', True) else ' *'} | "
            f"{r['wall_s']:.2f} s | {r['output_tokens']} | "
            f"{r['output_chars']} | {r['ms_per_char']} | {r['decode_ms_per_token'] or '-'} | "
            f"{r['compile_s'] * 1e3:.1f} ms | {r['valid']}/{r['runs']} | {limit} |"
        )
    costs = res.get("llama_cpp_costs")
    if costs:
        lines.append(
            f"\n* optional whitespace (llama.cpp's default): other outputs, not ranked. "
            f"llama.cpp one-token step by step threads {costs['step_ms']} ms: every llama.cpp "
            f"row steps on {costs['best_threads']}; a 16-token pass {costs['chunk_ms']} ms. "
            "limit: prefill + a step per picked token + each jumped token's share of a "
            "16-token pass."
        )
    for task, s in res["summary"].items():
        lines.append(
            f"\n{task}: {s['fastest_cfsm_jump']} is {s['jump_speedup_vs_fastest_peer']}x the "
            f"fastest peer ({s['fastest_peer']}) in wall time, {s['jump_speedup_per_char']}x per "
            f"output character; same outputs {s['same_outputs_as_fastest_peer']}; every cfsm "
            f"output valid: {s['cfsm_valid']}, every constrained output: {s['all_valid']}"
        )
        if "llamacpp_jump_vs_llama_server_sampler" in s:
            lines.append(
                f"  on llama.cpp: cfsm jump {s['llamacpp_jump_vs_llama_server_sampler']}x "
                "the llama-server sampler in wall time; cfsm masked costs "
                f"{s.get('llamacpp_masked_ms_per_token_vs_unconstrained')}x unconstrained "
                "llama.cpp per output token"
            )
    if res.get("compile"):
        lines += [
            "",
            "| compile, character regex, empty caches | time | vs outlines-core |",
            "|---|---:|---:|",
        ]
        for k, v in res["compile"]["seconds"].items():
            lines.append(f"| {k} | {v * 1e3:.2f} ms | {res['compile']['vs_outlines_core'][k]}x |")
    return "\n".join(lines)
