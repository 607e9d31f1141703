"""What one step cost, where the time went: the forward pass (and the requests that shared
it), the grammar (the mask, then advancing the matcher), the sampling, and a jump's
re-tokenization and prefill. The panel an engineer reads when a schema decodes slowly: is it
the model or the grammar? Kept short: the bundle carries it once per position."""

from __future__ import annotations

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


def step_cost_panel(trace: dict, step: int | None) -> str:
    """The step's costs as a bar of shares and a line each; "" at the end position and for a
    replayed step (another engine's tokens: nothing was timed here)."""
    steps = trace.get("steps") or []
    if step is None or step >= len(steps) or trace.get("mode") == "replay":
        return ""
    s = steps[step]
    jumps = jumps_for_step(trace, step)
    parts = [
        ("forward", 1000 * float(s.get("forward_ms") or 0), _forward_note(s)),
        ("grammar", float(s.get("grammar_us") or s.get("mask_us") or 0), _grammar_note(trace, s)),
        ("sampling", float(s.get("sample_us") or 0), ""),
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


def _forward_note(s: dict) -> str:
    batch = int(s.get("batch_size") or 1)
    if batch > 1:
        return f", {batch} requests in the pass"
    return ", its logits came with the jump's prefill" if not s.get("forward_ms") else ""


def _grammar_note(trace: dict, s: dict) -> str:
    if trace.get("mode") == "free":
        return ", free decoding: no mask"
    if s.get("grammar_us") is None:
        return ", the mask"
    return f", the mask {duration_us(float(s.get('mask_us') or 0))} of it"


def _jump_us(j: dict) -> float:
    return 1000 * float(j.get("forward_ms") or 0) + float(j.get("retokenize_us") or 0)


def _jump_note(j: dict) -> str:
    re_us = duration_us(float(j.get("retokenize_us") or 0))
    return f", {int(j.get('prefilled') or 0)} tokens prefilled, re-tokenized in {re_us}"


def _share(p: float) -> str:
    pct = 100 * p
    return "<1%" if 0 < pct < 1 else ">99%" if 99 < pct < 100 else f"{pct:.0f}%"
