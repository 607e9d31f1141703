"""Plotly HTML reports of `cfsm bench` results (one self-contained file each)."""

from __future__ import annotations

from pathlib import Path

from engine.lazy import lazy_module

go = lazy_module("plotly.graph_objects")


def _page(title: str, figs: list, notes: str = "") -> str:
    parts = [
        f"<html><head><meta charset='utf-8'><title>{title}</title></head><body "
        "style='font-family:sans-serif'>",
        f"<h1>{title}</h1><p>{notes}</p>",
    ]
    for i, f in enumerate(figs):
        parts.append(f.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("</body></html>")
    return "\n".join(parts)


def paper_figures(result: dict) -> list:
    s = result["summary"]
    b = list(s)
    fp = go.Figure(
        [
            go.Bar(name="masked", x=b, y=[s[k]["masked_forward_passes"] for k in b]),
            go.Bar(name="jump", x=b, y=[s[k]["jump_forward_passes"] for k in b]),
            go.Bar(name="ideal", x=b, y=[s[k]["ideal_forward_passes"] for k in b]),
        ]
    )
    fp.update_layout(title="Forward passes (sum over prompts)", barmode="group")
    wall = go.Figure(
        [
            go.Bar(name="masked", x=b, y=[s[k]["masked_wall_s"] for k in b]),
            go.Bar(name="jump", x=b, y=[s[k]["jump_wall_s"] for k in b]),
        ]
    )
    wall.update_layout(
        title="Wall time, s (speedup: "
        + ", ".join(f"{k} {s[k]['wall_speedup']}x" for k in b)
        + ")",
        barmode="group",
    )
    return [fp, wall]


def jsb_figures(result: dict) -> list:
    s = result["summary"]
    b = list(s)
    cov = go.Figure(
        go.Bar(
            x=b,
            y=[100 * s[k]["coverage"] for k in b],
            text=[f"{s[k]['compiled']}/{s[k]['schemas']}" for k in b],
        )
    )
    cov.update_layout(title="Compile coverage, %")
    mask = go.Figure(
        [
            go.Bar(name="p50", x=b, y=[s[k]["mask_us_p50"] or 0 for k in b]),
            go.Bar(name="p99", x=b, y=[s[k]["mask_us_p99"] or 0 for k in b]),
        ]
    )
    mask.update_layout(title="Time per mask, us", barmode="group", yaxis_type="log")
    comp = go.Figure(
        [
            go.Bar(name="p50", x=b, y=[s[k]["compile_ms_p50"] for k in b]),
            go.Bar(name="p90", x=b, y=[s[k]["compile_ms_p90"] for k in b]),
        ]
    )
    comp.update_layout(title="Compile time, ms", barmode="group", yaxis_type="log")
    jump = go.Figure(go.Bar(x=b, y=[100 * s[k]["jump_share_of_instance_bytes"] for k in b]))
    jump.update_layout(title="Instance bytes covered by jump-forward, %")
    return [cov, comp, mask, jump]


def write_report(result: dict, path: str | Path) -> Path:
    path = Path(path)
    if result.get("suite") == "jsonschemabench":
        figs, title = jsb_figures(result), "cfsm-lab: JSONSchemaBench sample"
    elif "tasks" in result:
        figs = [f for r in result["tasks"].values() for f in paper_figures(r)]
        title = "cfsm-lab: SGLang character and city tasks"
    else:
        figs, title = paper_figures(result), "cfsm-lab: SGLang character regex"
    path.write_text(
        _page(
            title, figs, f"device: {result.get('device', '?')}; model: {result.get('model', '?')}"
        ),
        encoding="utf-8",
    )
    return path
