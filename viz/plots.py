"""Plotly figures of the step view: mask heatmap, top-k bars, gauges, timeline."""

from __future__ import annotations

import base64
import zlib

import numpy as np

from .text import visible


def decode_mask(blob: str, vocab_size: int) -> np.ndarray:
    raw = np.frombuffer(zlib.decompress(base64.b64decode(blob)), dtype=np.uint8)
    return np.unpackbits(raw, count=vocab_size).astype(bool)


def mask_heatmap(trace: dict, step: int | None, width: int = 256):
    """The allowed-token mask over the whole vocabulary as a grid (token id = row*width+col);
    the chosen token is marked."""
    import plotly.graph_objects as go

    vocab = int(trace.get("model", {}).get("vocab_size", 0)) or 1
    steps = trace.get("steps", [])
    rows = -(-vocab // width)
    grid = np.zeros(rows * width, dtype=np.float32)
    title = "Allowed-token mask"
    chosen = None
    if step is not None and step < len(steps):
        s = steps[step]
        key = s.get("mask_key")
        if key and key in trace.get("masks", {}):
            grid[:vocab] = decode_mask(trace["masks"][key], vocab)
        elif trace.get("mode") == "free":
            grid[:vocab] = 1
        chosen = s["token_id"]
        title = f"Allowed-token mask: {s.get('allowed', 0):,} / {vocab:,} (chosen id {chosen})"
    grid[vocab:] = np.nan
    fig = go.Figure(go.Heatmap(z=grid.reshape(rows, width), colorscale=[[0, "#f1f5f9"], [1, "#2563eb"]],
                               showscale=False, zmin=0, zmax=1, hovertemplate="id %{customdata}<extra></extra>",
                               customdata=np.arange(rows * width).reshape(rows, width)))
    if chosen is not None:
        fig.add_trace(go.Scatter(x=[chosen % width], y=[chosen // width], mode="markers",
                                 marker=dict(symbol="x", size=12, color="#f97316", line=dict(width=2)), name="chosen",
                                 hovertemplate=f"chosen id {chosen}<extra></extra>"))
    fig.update_layout(title=title, height=320, margin=dict(l=30, r=10, t=40, b=20), yaxis=dict(autorange="reversed", title="id / 256"),
                      xaxis=dict(title="id % 256"), showlegend=False)
    return fig


def topk_bars(trace: dict, step: int | None):
    """Top-k raw vs masked probabilities at this step."""
    import plotly.graph_objects as go

    steps = trace.get("steps", [])
    fig = go.Figure()
    if step is None or step >= len(steps):
        fig.update_layout(title="Top-k probabilities", height=320)
        return fig
    s = steps[step]
    ids = []
    for i, _t, _p in s.get("top_raw", []) + s.get("top_masked", []):
        if i not in ids:
            ids.append(i)
    text = {i: t for i, t, _ in s.get("top_raw", []) + s.get("top_masked", [])}
    raw = {i: p for i, _t, p in s.get("top_raw", [])}
    masked = {i: p for i, _t, p in s.get("top_masked", [])}
    labels = [f"{visible(text[i])} ({i})" for i in ids]
    fig.add_trace(go.Bar(name="model p (raw)", x=labels, y=[raw.get(i, 0) for i in ids], marker_color="#94a3b8"))
    fig.add_trace(go.Bar(name="after mask", x=labels, y=[masked.get(i, 0) for i in ids], marker_color="#2563eb"))
    fig.update_layout(barmode="group", height=320, margin=dict(l=30, r=10, t=40, b=80),
                      title=f"Top-k raw vs masked \u00b7 feasible mass {s.get('feasible_mass', 0):.1%}",
                      legend=dict(orientation="h", y=1.12))
    return fig


def gauges(trace: dict, baseline_passes: int | None = None):
    """tokens/s, forward passes saved vs masked, share jumped, grammar overhead, compile time."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = trace.get("totals", {})
    out = max(1, t.get("output_tokens", 0))
    if baseline_passes is None:
        # masked decoding needs one pass per output token (plus the prompt)
        baseline_passes = out + 1
    saved = 1 - t.get("forward_passes", 0) / max(1, baseline_passes)
    jumped = t.get("jumped_tokens", 0) / out
    overhead = t.get("grammar_us_per_step", 0) / 1000 / max(1e-9, t.get("forward_ms_per_pass", 1))
    vals = [
        ("tokens/s", t.get("tokens_per_s") or 0, None, ""),
        ("passes saved vs masked", 100 * saved, [0, 100], "%"),
        ("output jumped", 100 * jumped, [0, 100], "%"),
        ("grammar overhead", 100 * overhead, [0, 20], "%"),
        ("compile", 1000 * t.get("compile_s", 0), None, " ms"),
    ]
    fig = make_subplots(rows=1, cols=len(vals), specs=[[{"type": "indicator"}] * len(vals)])
    for i, (name, v, rng, suffix) in enumerate(vals, 1):
        gauge = {"axis": {"range": rng or [0, max(1.0, v * 1.5)]}, "bar": {"color": "#2563eb"}}
        fig.add_trace(go.Indicator(mode="gauge+number", value=round(v, 1), title={"text": name, "font": {"size": 12}},
                                   number={"suffix": suffix, "font": {"size": 18}}, gauge=gauge), row=1, col=i)
    fig.update_layout(height=200, margin=dict(l=20, r=20, t=40, b=10))
    return fig


def timeline(trace: dict, step: int | None = None):
    """Per-step forward ms, mask us, allowed count and feasible mass."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    steps = trace.get("steps", [])
    x = [s["index"] for s in steps]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, specs=[[{"secondary_y": True}], [{"secondary_y": True}]],
                        vertical_spacing=0.08)
    fig.add_trace(go.Bar(x=x, y=[s.get("forward_ms", 0) for s in steps], name="forward ms", marker_color="#94a3b8"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[s.get("mask_us", 0) for s in steps], name="mask \u00b5s", mode="lines", line=dict(color="#f97316")),
                  row=1, col=1, secondary_y=True)
    fig.add_trace(go.Scatter(x=x, y=[s.get("allowed", 0) for s in steps], name="allowed", mode="lines", line=dict(color="#2563eb")),
                  row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=[s.get("feasible_mass", 0) for s in steps], name="feasible mass", mode="lines",
                             line=dict(color="#16a34a")), row=2, col=1, secondary_y=True)
    if step is not None:
        fig.add_vline(x=step, line_color="#f97316", line_dash="dot")
    fig.update_yaxes(type="log", row=2, col=1, secondary_y=False)
    fig.update_layout(height=320, margin=dict(l=30, r=30, t=30, b=20), legend=dict(orientation="h", y=1.15),
                      title="Per-step timeline")
    return fig
