"""HTML report of `cfsm bench --suite conformance`: totals per backend, a per-file table
(invalid accepted without a warning in red: the number that must be 0), refusals by
keyword and the cases a user would want to look at."""

from __future__ import annotations

import html
from pathlib import Path

_COLS = (
    "schemas",
    "compiled",
    "refused",
    "warned",
    "valid_accepted",
    "valid_rejected",
    "invalid_rejected",
    "invalid_accepted",
    "invalid_accepted_unwarned",
)


def _row(name: str, c: dict) -> str:
    cells = []
    for k in _COLS:
        bad = k == "invalid_accepted_unwarned" and c[k]
        cells.append(
            f"<td style='text-align:right;{'color:#b91c1c;font-weight:bold' if bad else ''}'>"
            f"{c[k]}</td>"
        )
    return f"<tr><td>{html.escape(name)}</td>{''.join(cells)}</tr>"


def _split_rows(backend: str, r: dict) -> list[str]:
    rows = [_row(backend, r["totals"])]
    rows += [_row(f"{backend}: {part}", r[part]) for part in ("required", "optional") if part in r]
    return rows


def _table(rows: list[str]) -> str:
    head = "".join(f"<th>{k.replace('_', ' ')}</th>" for k in _COLS)
    return (
        "<table border=1 cellpadding=3 style='border-collapse:collapse'><tr>"
        f"<th></th>{head}</tr>{''.join(rows)}</table>"
    )


def conformance_html(res: dict) -> str:
    parts = [
        "<html><head><meta charset='utf-8'><title>cfsm conformance</title></head><body "
        "style='font-family:sans-serif'>",
        "<h1>JSON-Schema test suite (draft 2020-12) through every backend</h1>",
        f"<p>whitespace: {html.escape(res['whitespace'])}, lenient: {res['lenient']}, "
        f"spec reading: {res.get('spec', False)}. Instances written compact, keys "
        "in schema order; walked byte by byte through each backend's matcher. The suite's required "
        "tests and its optional/ folder (formats, ECMA-262 regex details) are also counted "
        "apart.</p>",
        _table([row for b, r in res["backends"].items() for row in _split_rows(b, r)]),
    ]
    for b, r in res["backends"].items():
        parts.append(
            f"<h2>{html.escape(b)}</h2><p>refused, by keyword: "
            + ", ".join(f"{html.escape(k)} {n}" for k, n in r["refusals"].items())
            + "</p>"
        )
        parts.append(_table([_row(f, c) for f, c in r["files"].items()]))
        cases = [c for c in r["cases"] if "crash" not in c]
        if cases:
            parts.append(
                "<details><summary>disagreements with the suite</summary><ul>"
                + "".join(
                    f"<li>{'valid rejected' if c['valid'] else 'INVALID ACCEPTED'} "
                    f"{html.escape(c['file'])}: {html.escape(c['group'])} / "
                    f"{html.escape(c['test'])}: <code>{html.escape(c['text'])}</code></li>"
                    for c in cases
                )
                + "</ul></details>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_conformance_report(res: dict, path: Path) -> Path:
    path = Path(path)
    path.write_text(conformance_html(res), encoding="utf-8")
    return path
