"""What one step cost, where the time went: the forward pass (and the requests that shared
it), the grammar (the mask, then advancing the matcher), the sampling, and a jump's
re-tokenization and prefill. The panel an engineer reads when a schema decodes slowly: is it
the model or the grammar? Kept short: the bundle carries it once per position."""

from __future__ import annotations

from engine.decoding.trace import JumpRecord, StepRecord, Trace

from .panels import duration_us, jumps_for_step

COST_CSS = """
#cost-panel .cfsm-cost-bar{display:flex;height:10px;border-radius:3px;overflow:hidden;\\
background:#e2e8f0;margin:4px 0;}
#cost-panel .cfsm-cost-bar i{display:block;height:100%;}
#cost-panel .cfsm-cost-lines{font-size:13px;line-height:1.6;}
#cost-panel .cfsm-cost-lines i{display:inline-block;width:9px;height:9px;border-radius:2px;\\
margin-right:4px;}
#cost-panel .cf{background:#64748b;}#cost-panel .cg{background:#d97706;}
#cost-panel .cs{background:#a78bfa;}#cost-panel .cj{background:#16a34a;}
"""
KEYS = {"forward": "cf", "grammar": "cg", "sampling": "cs", "jump": "cj"}


def step_cost_panel(trace: Trace, step: int | None) -> str:
    """The step's costs as a bar of shares and a line each; "" at the end position and for a
    replayed step (another engine's tokens: nothing was timed here)."""
    if step is None or step >= len(trace.steps) or trace.mode == "replay":
        return ""
    s = trace.steps[step]
    jumps = jumps_for_step(trace, step)
    parts = [
        ("forward", 1000 * s.forward_ms, _forward_note(s)),
        ("grammar", s.grammar_us or s.mask_us, _grammar_note(trace, s)),
        ("sampling", s.sample_us, ""),
    ] + [("jump", _jump_us(j), _jump_note(j)) for j in jumps]
    total = sum(us for _, us, _ in parts)
    if total <= 0:
        return ""
    bar = "".join(
        f'<i class="{KEYS[k]}" style="width:{100 * us / total:.1f}%"></i>' for k, us, _ in parts
    )
    lines = "<br>".join(
        f'<i class="{KEYS[k]}"></i>{k} {duration_us(us)} ({_share(us / total)}{note})'
        for k, us, note in parts
    )
    return (
        f'<div class="cfsm-panel" id="cost-panel"><h4>This step: {duration_us(total)}</h4>'
        f'<div class="cfsm-cost-bar">{bar}</div><div class="cfsm-cost-lines">{lines}</div></div>'
    )


def _forward_note(s: StepRecord) -> str:
    if s.batch_size > 1:
        return f", {s.batch_size} requests in the pass"
    return ", its logits came with the jump's prefill" if not s.forward_ms else ""


def _grammar_note(trace: Trace, s: StepRecord) -> str:
    if trace.mode == "free":
        return ", free decoding: no mask"
    if s.grammar_us is None:
        return ", the mask"
    return f", the mask {duration_us(s.mask_us)} of it"


def _jump_us(j: JumpRecord) -> float:
    return 1000 * j.forward_ms + j.retokenize_us


def _jump_note(j: JumpRecord) -> str:
    return f", {j.prefilled} tokens prefilled, re-tokenized in {duration_us(j.retokenize_us)}"


def _share(p: float) -> str:
    pct = 100 * p
    return "<1%" if 0 < pct < 1 else ">99%" if 99 < pct < 100 else f"{pct:.0f}%"
