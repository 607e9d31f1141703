"""The run's per-step timeline (plotly), and the mask codec the step view reads."""

from __future__ import annotations

import base64
import zlib

import numpy as np

from engine.decoding.trace import Trace
from engine.lazy import lazy_module

from .segments import free_spans

go = lazy_module("plotly.graph_objects")
plotly_subplots = lazy_module("plotly.subplots")


def decode_mask(blob: str, vocab_size: int) -> np.ndarray:
    raw = np.frombuffer(zlib.decompress(base64.b64decode(blob)), dtype=np.uint8)
    return np.unpackbits(raw, count=vocab_size).astype(bool)


def timeline(trace: Trace, step: int | None = None):
    """Per-step forward ms, mask us, allowed count and feasible mass."""
    steps = trace.steps
    x = [s.index for s in steps]
    mode = "lines" if len(steps) > 2 else "lines+markers"  # a line of one point draws nothing
    fig = plotly_subplots.make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        specs=[[{"secondary_y": True}], [{"secondary_y": True}]],
        vertical_spacing=0.14,
    )
    fig.add_trace(
        go.Bar(
            x=x,
            y=[s.forward_ms for s in steps],
            name="forward ms",
            marker_color="#94a3b8",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s.mask_us for s in steps],
            name="mask \u00b5s",
            mode=mode,
            line=dict(color="#f97316"),
        ),
        row=1,
        col=1,
        secondary_y=True,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s.allowed for s in steps],
            name="allowed",
            mode=mode,
            line=dict(color="#2563eb"),
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s.feasible_mass for s in steps],
            name="feasible mass",
            mode=mode,
            line=dict(color="#16a34a"),
        ),
        row=2,
        col=1,
        secondary_y=True,
    )
    if step is not None:
        fig.add_vline(x=step, line_color="#f97316", line_dash="dot")

    for a, b, label in free_spans(trace):  # free text of a triggered run: nothing masked
        fig.add_vrect(
            x0=a - 0.5,
            x1=b + 0.5,
            fillcolor="#cbd5e1",
            opacity=0.35,
            line_width=0,
            annotation_text=f"free: {label}",
            annotation_position="top left",
            annotation_font_size=10,
        )
    # powers of ten only: plotly's default minor labels read "5, 2, 10, 5, 2, 1, 5"
    fig.update_yaxes(
        type="log", dtick=1, row=2, col=1, secondary_y=False, title_text="allowed tokens"
    )
    # linear axes start at 0: one step's value is not stretched over its own rounding error
    fig.update_yaxes(rangemode="tozero", row=1, col=1, secondary_y=False, title_text="forward ms")
    fig.update_yaxes(rangemode="tozero", row=1, col=1, secondary_y=True, title_text="mask \u00b5s")
    fig.update_yaxes(range=[0, 1.05], row=2, col=1, secondary_y=True, title_text="feasible mass")
    fig.update_xaxes(tickformat="d", dtick=1 if len(steps) <= 12 else None)
    fig.update_xaxes(title_text="decoding step", row=2, col=1)
    # each panel tall enough for its vertical axis titles (at 320 px "allowed tokens" and
    # "forward ms" ran into each other), and margins that hold them
    fig.update_yaxes(title_font=dict(size=11))
    fig.update_layout(
        height=440,
        margin=dict(l=60, r=60, t=40, b=40),
        # below the plots, where a phone's narrow legend wraps into rows that push the
        # margin down (above them it wrapped over the plots and the title)
        legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top"),
        title="Per-step timeline",
    )
    return fig
