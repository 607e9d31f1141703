"""The step view's panel registry: a panel is a pure function of a trace and a position,
registered once; the bundle carries each one's HTML per position, the page shows it beside
the graph and the script swaps it as the user scrubs. Nothing else needs to know it exists.

The caption and the jump panel are not in the registry: the tour and the graph's marks read
them by name (viz/static/step_view.js)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.decoding.trace import Trace

from .step_cost import COST_CSS, step_cost_panel

# (trace, step index, or None for the run's end position) -> HTML; "" hides the panel there.
Render = Callable[[Trace, "int | None"], str]


@dataclass(frozen=True)
class StepPanel:
    """One panel. `render` must be pure (it runs once per position while the bundle is
    built, on finished, live, uploaded and replayed traces alike) and must not raise on any
    trace `validate_trace` accepts: a missing figure is a missing line, not an error.
    `live`: drawn in a decoding run's live view too (else only once the run is finished)."""

    name: str  # its column in the bundle and its host's data-panel: [a-z_]+
    render: Render
    live: bool = True
    css: str = ""  # the page's <head> carries it (viz.step_bundle.head_html)


PANELS: dict[str, StepPanel] = {}


def register_panel(panel: StepPanel) -> StepPanel:
    """Add a panel to every step view built from now on (in registration order). A name
    already taken raises ValueError: two panels would write one host."""
    if not panel.name.replace("_", "").isalpha() or not panel.name.islower():
        raise ValueError(f"panel name {panel.name!r}: lowercase letters and _ only")
    if panel.name in PANELS:
        raise ValueError(f"a step-view panel named {panel.name!r} is registered already")
    PANELS[panel.name] = panel
    return panel


def unregister_panel(name: str) -> None:
    """Take a panel out again (tests that add one)."""
    PANELS.pop(name, None)


def panel_columns(trace: Trace, ks: list[int], n_steps: int, live: bool) -> dict[str, list[str]]:
    """Each registered panel's HTML at positions `ks` (position n_steps is the end)."""
    return {
        p.name: [p.render(trace, k if k < n_steps else None) for k in ks]
        for p in PANELS.values()
        if p.live or not live
    }


def panel_css() -> str:
    """Every registered panel's CSS."""
    return "".join(p.css for p in PANELS.values())


def panel_hosts() -> str:
    """The step view's empty host of each panel, filled by the script per position."""
    return "".join(f'<div data-panel="{p.name}"></div>' for p in PANELS.values())


register_panel(StepPanel("step_cost", step_cost_panel, css=COST_CSS))
