"""A step-view panel as a newcomer would add one (docs/architecture.md, "A step-view
panel"): a pure function of the trace and a position, registered once."""

from engine.decoding.trace import Trace
from viz.step_panels import StepPanel


def tokens_so_far(trace: Trace, step: int | None) -> str:
    """How many output tokens came before this position (the end: all of them)."""
    n = len(trace.tokens) if step is None else trace.steps[step].output_len
    return f'<div class="toy-count">{n} tokens before this position</div>'


TOY_PANEL = StepPanel("toy_tokens", tokens_so_far, css=".toy-count{font-weight:600;}")
