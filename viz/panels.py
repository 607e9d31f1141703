"""HTML panels of the step view: token strip, allowed tokens, jump diff, caption.
Pure functions of the trace; no engine imports."""

from __future__ import annotations

from .text import esc, visible

ORIGIN_COLOURS = {"model": "#dbeafe", "forced": "#fef3c7", "jump": "#dcfce7"}
ORIGIN_BORDER = {"model": "#3b82f6", "forced": "#d97706", "jump": "#16a34a"}

CSS = """
<style>
.cfsm-strip{font-family:ui-monospace,Menlo,monospace;font-size:13px;line-height:2.1;}
.cfsm-chip{display:inline-block;padding:0 3px;margin:1px;border-radius:4px;border:1px solid;white-space:pre;}
.cfsm-chip.cur{outline:2px solid #f97316;}
.cfsm-chip.future{opacity:.25;}
.cfsm-legend span{margin-right:10px;font-size:12px;}
.cfsm-tok{font-family:ui-monospace,Menlo,monospace;background:#f1f5f9;border-radius:3px;padding:0 3px;margin:1px;display:inline-block;white-space:pre;}
.cfsm-tok.changed{background:#fee2e2;border:1px solid #ef4444;}
.cfsm-tok.new{background:#dcfce7;border:1px solid #16a34a;}
.cfsm-tok.backed{background:#fef3c7;border:1px dashed #d97706;}
.cfsm-panel h4{margin:4px 0;}
.cfsm-group{margin:2px 0;}
.cfsm-muted{color:#64748b;font-size:12px;}
</style>
"""


def legend() -> str:
    return '<div class="cfsm-legend">' + "".join(
        f'<span><span class="cfsm-chip" style="background:{ORIGIN_COLOURS[o]};border-color:{ORIGIN_BORDER[o]}">{o}</span></span>'
        for o in ("model", "forced", "jump")
    ) + "</div>"


def token_strip(trace: dict, step: int | None = None) -> str:
    """One chip per output token coloured by origin; hover shows id, probability, step.
    Tokens that come after the selected step are dimmed."""
    steps = trace.get("steps", [])
    probs = {s["index"]: s.get("prob") for s in steps}
    chips = []
    for t in trace.get("tokens", []):
        o = t.get("origin", "model")
        p = probs.get(t.get("step"))
        title = f"id {t['id']} | step {t.get('step')} | {o}" + (f" | p={p:.3f}" if isinstance(p, (int, float)) and o != "jump" else "")
        cls = "cfsm-chip"
        if step is not None and t.get("step") is not None:
            if t["step"] == step:
                cls += " cur"
            elif t["step"] > step:
                cls += " future"
        chips.append(
            f'<span class="{cls}" data-origin="{o}" title="{esc(title)}" '
            f'style="background:{ORIGIN_COLOURS.get(o, "#eee")};border-color:{ORIGIN_BORDER.get(o, "#999")}">{esc(visible(t["text"]))}</span>'
        )
    n = len(trace.get("tokens", []))
    head = f'<div class="cfsm-muted">{n} output tokens</div>'
    return CSS + '<div class="cfsm-strip" id="token-strip">' + legend() + head + "".join(chips) + "</div>"


def allowed_tokens(step: dict, vocab_size: int, limit: int = 48) -> str:
    """The first allowed tokens grouped by the FSM state each leads to."""
    sample = step.get("allowed_sample") or []
    groups: dict = {}
    for tid, text, nxt in sample[:limit]:
        groups.setdefault(nxt, []).append((tid, text))
    chosen = step.get("token_id")
    parts = [f'<h4>Allowed tokens: {step.get("allowed", 0):,} / {vocab_size:,}</h4>']
    for nxt, toks in groups.items():
        label = f"\u2192 state {nxt}" if nxt is not None else "\u2192 (backend has no char states)"
        chips = "".join(
            f'<span class="cfsm-tok{" new" if tid == chosen else ""}" title="id {tid}">{esc(visible(text))}</span>' for tid, text in toks
        )
        parts.append(f'<div class="cfsm-group"><span class="cfsm-muted">{esc(label)}</span> {chips}</div>')
    if step.get("allowed", 0) > len(sample):
        parts.append(f'<div class="cfsm-muted">\u2026 and {step["allowed"] - len(sample):,} more</div>')
    return CSS + '<div class="cfsm-panel" id="allowed-panel">' + "".join(parts) + "</div>"


def _tok_row(tokens: list, marks: dict[int, str]) -> str:
    return "".join(
        f'<span class="cfsm-tok {marks.get(i, "")}" title="id {t[0]}">{esc(visible(t[1]))}</span>' for i, t in enumerate(tokens)
    )


def jump_for_step(trace: dict, step: int | None) -> dict | None:
    """The jump made right after this step (or the initial jump for step 0)."""
    jumps = trace.get("jumps", [])
    if step is None:
        return None
    for j in jumps:
        if j.get("step") == step:
            return j
    if step == 0:
        for j in jumps:
            if j.get("step") == -1:
                return j
    return None


def jump_panel(trace: dict, step: int | None) -> str:
    """The jump-forward string at this step and the re-tokenization diff."""
    j = jump_for_step(trace, step)
    if j is None:
        msg = "No jump at this step: the next character is a choice (or the forced text is too short to be worth a jump)."
        if trace.get("mode") != "jump":
            msg = f"Mode is {trace.get('mode')!r}: jump-forward is off, forced text is decoded token by token."
        return CSS + f'<div class="cfsm-panel" id="jump-panel"><h4>Jump-forward</h4><div class="cfsm-muted">{esc(msg)}</div></div>'
    before = j.get("tokens_before", [])
    after = j.get("tokens_after", [])
    reused = j.get("reused_output_tokens", 0)
    n_back = len(j.get("backed_off", []))
    tail = max(0, reused - 3)
    marks_before = {i - tail: "changed" for i in range(reused, len(before))}
    marks_after = {i - tail: "new" for i in range(reused, len(after))}
    for k in range(n_back):
        marks_after[len(after) - 1 - k - tail] = "backed"
    more = " \u2026" if tail else ""
    when = "before the first step" if j.get("step") == -1 else f"after step {j.get('step')}"
    body = [
        f"<h4>Jump-forward {esc(when)}: <code>{esc(visible(j['string']))}</code> ({len(j['string'])} chars)</h4>",
        f'<div class="cfsm-muted">before (last tokens){more}</div><div>{_tok_row(before[tail:], marks_before)}</div>',
        f'<div class="cfsm-muted">after re-tokenizing the output{more}</div><div>{_tok_row(after[tail:], marks_after)}</div>',
        f'<div class="cfsm-muted">reused KV prefix: {reused} output tokens \u00b7 prefilled in one pass: {j.get("prefilled", 0)} tokens'
        f' \u00b7 re-decided by the model (boundary back-off): {n_back} \u00b7 re-tokenize {j.get("retokenize_us", 0)} \u00b5s</div>',
    ]
    return CSS + '<div class="cfsm-panel" id="jump-panel">' + "".join(body) + "</div>"


def caption(trace: dict, step: int | None) -> str:
    """One or two plain sentences saying what happened at this step and why."""
    steps = trace.get("steps", [])
    if not steps or step is None or step >= len(steps):
        t = trace.get("totals", {})
        return f"Decoding ended: {t.get('reason', '?')} after {t.get('output_tokens', 0)} tokens and {t.get('forward_passes', 0)} forward passes."
    s = steps[step]
    tok = visible(s["token_text"])
    allowed = s.get("allowed", 0)
    vocab = trace.get("model", {}).get("vocab_size", 0)
    mass = s.get("feasible_mass", 1.0)
    parts = []
    if trace.get("mode") == "free":
        parts.append(f"Step {step}: no constraint, the model picked \u201c{tok}\u201d (p={s.get('prob', 0):.2f}).")
    elif s["origin"] == "forced":
        parts.append(f"Step {step}: only one token fits the constraint here, so \u201c{tok}\u201d is forced \u2014 the model still needs a forward pass to read it.")
    elif "verifies" in s:
        same = s.get("verified")
        parts.append(
            f"Step {step}: the jumped text ended in \u201c{visible(s['verifies'][1])}\u201d, which a longer token could extend, so the model re-decided it from the same prefill pass"
            + (" and kept it." if same else f" and chose \u201c{tok}\u201d instead (healing the token boundary).")
        )
    else:
        parts.append(
            f"Step {step}: the constraint allows {allowed:,} of {vocab:,} tokens (they keep {mass:.0%} of the model's probability); the model chose \u201c{tok}\u201d (p={s.get('prob', 0):.2f} after masking)."
        )
        if mass < 0.2:
            parts.append("Low feasible mass: the constraint is fighting what the model wants to write.")
    j = jump_for_step(trace, step)
    if j is not None:
        parts.append(
            f"After it the automaton has exactly one way forward for {len(j['string'])} characters, so \u201c{visible(j['string'])}\u201d was appended without decoding; "
            f"re-tokenizing kept {j.get('reused_output_tokens', 0)} cached tokens and prefilled {j.get('prefilled', 0)} in one pass."
        )
    return " ".join(parts)
