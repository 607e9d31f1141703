"""HTML report of `cfsm bench --suite peers`: one table per task, systems side by side."""

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
