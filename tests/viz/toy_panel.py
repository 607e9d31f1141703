"""A step-view panel as a newcomer would add one (docs/architecture.md, "A step-view
panel"): a pure function of the trace and a position, registered once."""

from viz.step_panels import StepPanel


def tokens_so_far(trace: dict, step: int | None) -> str:
    """How many output tokens came before this position (the end: all of them)."""
    steps = trace.get("steps") or []
    n = len(trace.get("tokens") or []) if step is None else steps[step]["output_len"]
    return f'<div class="toy-count">{n} tokens before this position</div>'


TOY_PANEL = StepPanel("toy_tokens", tokens_so_far, css=".toy-count{font-weight:600;}")
