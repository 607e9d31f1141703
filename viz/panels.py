"""HTML panels of the step view: token strip, allowed tokens, jump diff, caption.
Pure functions of the typed trace (engine.decoding.trace)."""

from __future__ import annotations

import json

from engine.decoding.trace import JumpRecord, StepRecord, Trace

from .segments import segment_label_html, segment_sentence, token_segments, trigger_tokens
from .text import esc, visible

ORIGIN_COLOURS = {"model": "#dbeafe", "forced": "#fef3c7", "jump": "#dcfce7"}
ORIGIN_BORDER = {"model": "#3b82f6", "forced": "#d97706", "jump": "#16a34a"}

CSS = """
.cfsm-strip{font-family:ui-monospace,Menlo,monospace;font-size:13px;line-height:2.1;}
.cfsm-chip{display:inline-block;padding:0 3px;margin:1px;border-radius:4px;border:1px solid;\
white-space:pre;}
.cfsm-chip.cur{outline:2px solid #f97316;}
.cfsm-chip.future{opacity:.25;}
.cfsm-chip.seg-free{background:#f8fafc!important;border-style:dashed;color:#475569;}
.cfsm-chip.seg-tag{background:#f5f3ff!important;border-color:#7c3aed!important;}
.cfsm-chip.trigger{box-shadow:0 0 0 2px #7c3aed;font-weight:600;}
.cfsm-seg-label{display:inline-block;font-family:system-ui,sans-serif;font-size:11px;\
margin:0 2px 0 8px;padding:0 4px;border-radius:8px;background:#e2e8f0;color:#334155;}
.cfsm-seg-label.seg-constrained{background:#dbeafe;color:#1e3a8a;}
.cfsm-seg-label.seg-free{background:#f1f5f9;color:#64748b;border:1px dashed #94a3b8;}
.cfsm-seg-label.seg-tag{background:#ede9fe;color:#5b21b6;}
.cfsm-legend span{margin-right:10px;font-size:12px;}
.cfsm-tok{font-family:ui-monospace,Menlo,monospace;background:#f1f5f9;border-radius:3px;\
padding:0 3px;margin:1px;display:inline-block;white-space:pre;}
.cfsm-tok.changed{background:#fee2e2;border:1px solid #ef4444;}
.cfsm-tok.new{background:#dcfce7;border:1px solid #16a34a;}
.cfsm-tok.backed{background:#fef3c7;border:1px dashed #d97706;}
.cfsm-panel h4{margin:4px 0;overflow-wrap:anywhere;}
.cfsm-group{margin:2px 0;}
.cfsm-muted{color:#64748b;font-size:12px;}
#step-view.stale{opacity:.35;pointer-events:none;filter:grayscale(1);}
#step-view-rest{display:none !important;}
.cfsm-caption{font-size:15px;background:#f8fafc;border-left:4px solid #2563eb;padding:6px 10px;\
margin:4px 0;overflow-wrap:anywhere;}
.cfsm-row{display:flex;gap:12px;flex-wrap:wrap;}
.cfsm-row>*{flex:1 1 360px;min-width:0;}
.cfsm-col-graph{flex:3 1 520px;}
.cfsm-col-side{flex:2 1 340px;}
#fsm-graph{height:520px;min-height:200px;border:1px solid #e2e8f0;border-radius:6px;\
overflow:hidden;resize:vertical;cursor:grab;background:#fff;touch-action:none;}
.cfsm-graph-box:fullscreen,.cfsm-graph-box.cfsm-full{background:#fff;padding:8px;display:flex;\
flex-direction:column;box-sizing:border-box;}
.cfsm-graph-box.cfsm-full{position:fixed;inset:0;z-index:1000;}
.cfsm-graph-box:fullscreen #fsm-graph,.cfsm-graph-box.cfsm-full #fsm-graph{flex:1 1 auto;\
height:auto !important;resize:none;}
#fsm-graph svg{width:100%;height:100%;display:block;}
#fsm-graph svg text{text-rendering:geometricPrecision;}
#fsm-graph.cfsm-nograph{height:auto;padding:10px 12px;cursor:default;}
#fsm-graph g.node, #fsm-graph g.edge{cursor:pointer;}
.cfsm-graph-tools button{margin-right:4px;padding:0 8px;border:1px solid #cbd5e1;border-radius:4px;\
background:#f8fafc;}
.cfsm-graph-tools a{margin-left:8px;font-size:12px;}
.cfsm-legend i.lg{display:inline-block;width:12px;height:12px;border-radius:6px;margin-right:3px;\
vertical-align:middle;border:1px solid #64748b;}
.cfsm-legend i.cur{background:#f97316;} \
.cfsm-legend i.path{background:#dbeafe;border-color:#2563eb;}
.cfsm-legend i.jump{background:#16a34a;} \
.cfsm-legend i.acc{border:3px double #334155;background:#fff;}
.cfsm-legend i.stub{border:1px dashed #94a3b8;border-radius:2px;background:#fff;}
.cfsm-output{white-space:pre-wrap;word-break:break-word;font-size:13px;max-height:260px;\
overflow:auto;background:#f8fafc;padding:6px;margin:4px 0;}
.cfsm-output .rest{color:#94a3b8;}
.cfsm-badge{padding:1px 6px;border-radius:8px;font-weight:600;font-size:12px;}
.cfsm-badge.ok{background:#dcfce7;color:#166534;} \
.cfsm-badge.bad{background:#fee2e2;color:#991b1b;} \
.cfsm-badge.unk{background:#f1f5f9;color:#475569;}
.cfsm-arow,.cfsm-trow{display:flex;align-items:center;gap:6px;font-size:12px;margin:1px 0;}
#schema-outline{margin:4px 0;}
.cfsm-orow{display:flex;align-items:center;gap:8px;font-size:12px;padding:0 4px;border-radius:4px;}
.cfsm-orow.current{background:#ffedd5;outline:1px solid #f97316;}
.cfsm-obar{display:inline-flex;width:80px;height:8px;background:#e2e8f0;border-radius:3px;overflow:hidden;}
.cfsm-obar .j{background:#16a34a;} .cfsm-obar .f{background:#86efac;}
.cfsm-p{color:#475569;min-width:34px;font-size:11px;}
.cfsm-trow .bar{display:inline-block;height:10px;border-radius:2px;} .bar.raw{background:#94a3b8;} \
.bar.msk{background:#2563eb;}
.cfsm-mask{position:relative;display:inline-block;line-height:0;}
.cfsm-mask img{image-rendering:pixelated;border:1px solid #e2e8f0;}
.cfsm-chosen{position:absolute;width:8px;height:8px;border:2px solid #f97316;border-radius:5px;}
#step-view{position:relative;}
.cfsm-pop{position:absolute;z-index:20;width:320px;background:#fff;border:1px solid #94a3b8;\
border-radius:6px;padding:8px 10px;box-shadow:0 4px 14px rgba(0,0,0,.15);font-size:13px;}
.cfsm-pop [data-close]{float:right;text-decoration:none;}
.cfsm-pop [data-all]{font-size:12px;}
.cfsm-what{font-size:13px;margin:2px 0 6px;}
.cfsm-tour{position:fixed;right:16px;bottom:16px;z-index:30;max-width:440px;background:#eff6ff;\
border:1px solid #2563eb;border-radius:6px;padding:8px 12px;font-size:14px;\
box-shadow:0 4px 14px rgba(0,0,0,.2);}
.cfsm-tour.left{right:auto;left:16px;}
.cfsm-tour button{margin-left:6px;padding:0 8px;border:1px solid #93c5fd;border-radius:4px;}
.cfsm-tour-start{font-size:12px;}
.tour-focus{outline:3px solid #f59e0b;outline-offset:2px;}
.cfsm-allowed-ring{position:absolute;width:10px;height:10px;border:2px solid #2563eb;\
border-radius:7px;}
.cfsm-cards{display:flex;gap:8px;flex-wrap:wrap;}
.cfsm-card{border:1px solid #e2e8f0;border-radius:6px;padding:4px 10px;min-width:120px;}
.cfsm-card .v{font-size:20px;font-weight:600;} .cfsm-card .l{font-size:11px;color:#475569;}
.cfsm-card .bar{height:4px;background:#e2e8f0;border-radius:2px;} \
.cfsm-card .bar span{display:block;height:4px;background:#2563eb;border-radius:2px;}
#glossary dt{font-weight:600;margin-top:4px;} #glossary dd{margin-left:12px;font-size:13px;}
"""


def legend() -> str:
    return (
        '<div class="cfsm-legend">'
        + "".join(
            '<span><span class="cfsm-chip" '
            f'style="background:{ORIGIN_COLOURS[o]};border-color:{ORIGIN_BORDER[o]}">{o}</span>'
            "</span>"
            for o in ("model", "forced", "jump")
        )
        + "</div>"
    )


def chip_labels(tokens: list[dict]) -> list[tuple[str, str]]:
    """Each token's chip text and hover note. Byte-fallback tokens (with `hex`) read as the
    engine wrote them, `<E5 9F>`; the one that completes a character also shows it:
    `<A6> = 日`."""
    out: list[tuple[str, str]] = []
    pending = b""
    for t in tokens:
        h = t.get("hex")
        if h is None:
            pending = b""
            out.append((visible(t["text"]), ""))
            continue
        label = str(t["text"])  # its spaces are the label's own: not shown as glyphs
        pending += bytes.fromhex(h)
        try:
            ch = pending.decode("utf-8")
            out.append((f"{label} = {ch}", f"bytes {pending.hex(' ').upper()} make {ch!r}"))
            pending = b""
        except UnicodeDecodeError as exc:
            if exc.reason != "unexpected end of data":
                pending = b""
            out.append((label, "part of a character (byte-fallback token)"))
    return out


def token_strip(trace: Trace, step: int | None = None) -> str:
    """One chip per output token coloured by origin; hover shows id, probability, step.
    Tokens that come after the selected step are dimmed (the page moves that on the client).
    A triggered run's segments are labelled, free text and tags look different, and the
    token that wrote a trigger is marked."""
    probs = {s.index: s.prob for s in trace.steps}
    return strip_html(trace.tokens, probs, trace.segments, step)


def strip_html(
    tokens: list[dict],
    probs: dict[int, float] | None = None,
    segs: list[dict] | None = None,
    step: int | None = None,
) -> str:
    """The token strip of `tokens` (a streaming run's so far: no probabilities or
    segments yet)."""
    probs, segs = probs or {}, segs or []
    seg_of, triggers = token_segments(tokens, segs), trigger_tokens(segs)
    by_index = {sg["index"]: sg for sg in segs}
    chips = []
    for i, (t, (label, note)) in enumerate(zip(tokens, chip_labels(tokens), strict=True)):
        for sg in segs:
            if sg["start"] == i and sg["end"] > i:
                chips.append(segment_label_html(sg))
        chips.append(_chip(t, label, note, probs, step, seg_of[i], by_index, triggers.get(i)))
    head = f'<div class="cfsm-muted">{len(tokens)} output tokens</div>'
    return '<div class="cfsm-strip" id="token-strip">' + legend() + head + "".join(chips) + "</div>"


def _chip(t, label, note, probs, step, seg, segs, trigger) -> str:
    o = t.get("origin", "model")
    p = probs.get(t.get("step"))
    title = f"id {t['id']} | step {t.get('step')} | {o}" + (
        f" | p={p:.3f}" if isinstance(p, (int, float)) and o != "jump" else ""
    )
    title += f" | {note}" if note else ""
    cls = "cfsm-chip"
    if seg is not None:
        cls += f" seg-{segs[seg]['kind']}"
        title += f" | segment {seg}: {segs[seg]['label']}"
    if trigger is not None:
        cls += " trigger"
        title += f" | trigger: the {trigger} starts after it"
    if step is not None and t.get("step") is not None:
        if t["step"] == step:
            cls += " cur"
        elif t["step"] > step:
            cls += " future"
    return (
        f'<span class="{cls}" data-origin="{esc(str(o))}" '
        f'data-step="{esc(str(t.get("step")))}" title="{esc(title)}" '
        f'style="background:{ORIGIN_COLOURS.get(o, "#eee")};'
        f'border-color:{ORIGIN_BORDER.get(o, "#999")}">{esc(label)}</span>'
    )


def _tok_row(tokens: list, marks: dict[int, str]) -> str:
    return "".join(
        f'<span class="cfsm-tok {marks.get(i, "")}" title="id {t[0]}">{esc(visible(t[1]))}</span>'
        for i, t in enumerate(tokens)
    )


def jumps_for_step(trace: Trace, step: int | None) -> list[JumpRecord]:
    """The jumps shown at this step, in order: at step 0 the initial one (made before the
    first step), then the one made right after this step's token."""
    if step is None:
        return []
    first = [j for j in trace.jumps if j.step == -1] if step == 0 else []
    return first + [j for j in trace.jumps if j.step == step][:1]


def jump_for_step(trace: Trace, step: int | None) -> JumpRecord | None:
    """The last jump shown at this step (None when there is none)."""
    js = jumps_for_step(trace, step)
    return js[-1] if js else None


# why a run ended, in words: the end position names it instead of a next character
END_WHY = {
    "eos": "the model wrote its end token",
    "complete": "the constraint was complete, nothing more could follow",
    "max_new_tokens": "it reached the Max new tokens limit",
    "cancelled": "it was stopped",
    "dead_end": "the constraint allowed no token",
    "error": "an error ended it",
}


def no_jump_text(trace: Trace, step: int | None = None) -> str:
    """Why a step shows no jump: the mode, the end of the run, or a choice ahead."""
    if trace.mode == "replay":
        return REPLAY_NO_JUMP
    if trace.mode != "jump":
        return (
            f"Mode is {trace.mode!r}: jump-forward is off, forced text is decoded token by token."
        )
    reason = trace.totals.reason
    if step is not None and step >= len(trace.steps) and reason:
        why = END_WHY.get(reason)
        return f"No jump here: the run has ended ({reason}{': ' + why if why else ''})."
    return (
        "No jump at this step: the next character is a choice (or the forced text is too short "
        "to be worth a jump)."
    )


def jump_panel(trace: Trace, step: int | None) -> str:
    """Each jump-forward string at this step with its re-tokenization diff (step 0 may
    have two: the initial jump and the one after its token)."""
    js = jumps_for_step(trace, step)
    if js:
        return "".join(_one_jump_panel(j, k) for k, j in enumerate(js))
    msg = no_jump_text(trace, step)
    return (
        '<div class="cfsm-panel" id="jump-panel"><h4>Jump-forward</h4><div '
        f'class="cfsm-muted">{esc(msg)}</div></div>'
    )


REPLAY_NO_JUMP = (
    "A replay: the engine decoded every token with a forward pass. Tokens marked forced were "
    "fixed by the constraint: jump-forward would have written them without one."
)


def _one_jump_panel(j: JumpRecord, index: int) -> str:
    """One jump's part of the jump panel (the first keeps the stable ids)."""
    suffix = "" if index == 0 else f"-{index + 1}"
    before, after, reused = j.tokens_before, j.tokens_after, j.reused_output_tokens
    n_back = len(j.backed_off)
    tail = max(0, reused - 3)
    marks_before = {i - tail: "changed" for i in range(reused, len(before))}
    marks_after = {i - tail: "new" for i in range(reused, len(after))}
    for k in range(n_back):
        marks_after[len(after) - 1 - k - tail] = "backed"
    more = " \u2026" if tail else ""
    when = "before the first step" if j.step == -1 else f"after step {j.step}"
    body = [
        f"<h4>Jump-forward {esc(when)}: <code>{esc(visible(j.string))}</code> "
        f"({len(j.string)} chars)</h4>",
        f'<div class="cfsm-what" id="what-happened{suffix}">{esc(what_happened(j))}</div>',
        f'<div class="cfsm-muted">before (last tokens){more}</div>'
        f"<div>{_tok_row(before[tail:], marks_before)}</div>"
        if before[tail:]
        else '<div class="cfsm-muted">before: no output yet (the jump starts the output)</div>',
        f'<div class="cfsm-muted">after re-tokenizing the output{more}</div>'
        f"<div>{_tok_row(after[tail:], marks_after)}</div>",
        f'<div class="cfsm-muted">reused KV prefix: {reused} output tokens \u00b7 prefilled in '
        f"one pass: {j.prefilled} tokens"
        f" \u00b7 re-decided by the model (boundary back-off): {n_back} \u00b7 re-tokenize "
        f"{duration_us(j.retokenize_us)}</div>",
    ]
    return f'<div class="cfsm-panel" id="jump-panel{suffix}">' + "".join(body) + "</div>"


def plural(k: int, word: str) -> str:
    """'1 token', '2 tokens', '1 pass', '3 passes'."""
    return f"{k} {word}" + ("" if k == 1 else "es" if word.endswith("s") else "s")


def what_happened(j: JumpRecord) -> str:
    """A jump in plain words, for a reader who has not met the terms yet."""
    n, p = len(j.string), j.prefilled
    changed = len(j.tokens_before) - j.reused_output_tokens
    back = len(j.backed_off)
    out = (
        f"What just happened: the constraint left only one way to go on for "
        f"{plural(n, 'character')}, so they were written without asking the model"
    )
    if p:
        out += f": {plural(p, 'new token')} read in one pass"
    out += f" instead of {p} steps. " if p > 1 else ". "
    if changed > 0:
        out += (
            f"Splitting the text into tokens again changed the last {plural(changed, 'token')} the "
            "model had written (red): the new text joins onto them. "
        )
    if back:
        out += (
            f"The last {plural(back, 'token')} of it (amber) "
            + ("is" if back == 1 else "are")
            + " left for the model to choose, since a longer token could fit there."
        )
    return out.strip()


def _replay_sentence(
    trace: Trace, s: StepRecord, step: int, tok: str, allowed: int, vocab: int
) -> str:
    """A replayed token: what the other engine wrote, against this lab's mask."""
    first = next(iter((trace.replay or {}).get("violations") or []), None)
    if first is not None and first["step"] == step:
        return (f"Step {step}: the engine wrote {tok}, outside the constraint: it is not among "
                f"the {allowed:,} tokens the mask allows here.")  # fmt: skip
    if first is not None and step > first["step"]:
        return f"Step {step}: the engine wrote {tok}, after its output had left the constraint."
    if s.origin == "forced":
        fit = f"{allowed:,} token fits" if allowed == 1 else f"{allowed:,} tokens fit"
        return (f"Step {step}: every character of {tok} was fixed by the constraint ({fit} "
                "it): jump-forward would have written it without a forward pass; "
                "this engine spent one.")  # fmt: skip
    return (f"Step {step}: a choice: the constraint allows {allowed:,} of {vocab:,} tokens and "
            f"the engine wrote {tok} (p={s.prob:.2f} by its own logprobs).")  # fmt: skip


def _g(term: str, text: str | None = None) -> str:
    """A link to the glossary entry for a term."""
    return f'<a class="cfsm-g" href="#g-{term}">{esc(text or term)}</a>'


def _q(text: str) -> str:
    return "\u201c" + esc(visible(text)) + "\u201d"


def _choice_sentence(trace: Trace, s: StepRecord, step: int) -> str:
    tok, allowed = _q(s.token_text), s.allowed
    vocab = trace.model.get("vocab_size", 0)
    mass = s.feasible_mass
    if trace.mode == "free":
        return f"Step {step}: no constraint; the model picked {tok} (p={s.prob:.2f})."
    in_segment = segment_sentence(trace.segments, s, step)
    if in_segment is not None:
        return in_segment
    if trace.mode == "replay":
        return _replay_sentence(trace, s, step, tok, allowed, vocab)
    if s.origin == "forced":
        return (
            f"Step {step}: only one token fits the constraint here, so {tok} is forced \u2014 the "
            "model still needs a forward pass to read it."
        )
    if s.verifies is not None:
        kept = (
            " and kept it."
            if s.verified
            else f" and chose {tok} instead (healing the token boundary)."
        )
        return (
            f"Step {step}: the jumped text ended in {_q(s.verifies[1])}, which a longer token "
            f"could extend, so the model re-decided it ({_g('back-off')}) from the same prefill "
            "pass" + kept
        )
    if step == 0:
        return (
            f"Step 0, the first token: the constraint allows {allowed:,} of {vocab:,} tokens and "
            f"the model chose {tok}."
        )
    out = (
        f"Step {step}: the constraint allows {allowed:,} of {vocab:,} tokens (they keep "
        f"{share(mass)} of the model's probability, the "
        f"{_g('feasible-mass', 'feasible mass')}); the model chose {tok} "
        f"(p={s.prob:.2f} after masking)."
    )
    if mass < 0.2:
        out += " Low feasible mass: the constraint is fighting what the model wants to write."
    return out


def caption(trace: Trace, step: int | None) -> str:
    """One or two plain sentences (HTML) saying what happened at this step and why."""
    steps = trace.steps
    if not steps or step is None or step >= len(steps):
        t = trace.totals
        first = jump_for_step(trace, 0) if not steps else None
        lead = (
            f"The constraint forced the whole output, {_q(first.string)}, in one "
            f"{_g('jump', 'jump-forward')}. "
            if first is not None
            else ""
        )
        return (
            lead + f"Decoding ended: {esc(t.reason)} after {t.output_tokens} "
            f"tokens and {t.forward_passes} forward passes."
        )
    parts = [_choice_sentence(trace, steps[step], step)]
    for j in jumps_for_step(trace, step):
        when = "Before it" if j.step == -1 else "After it"
        parts.append(
            f"{when} {_why_forced(trace, j)}, so {_q(j.string)} was appended without decoding "
            f"({_g('jump', 'jump-forward')}); {_g('re-tokenization', 're-tokenizing')} kept "
            f"{j.reused_output_tokens} cached tokens and prefilled {j.prefilled} in one pass."
        )
    return " ".join(parts)


def _why_forced(trace: Trace, j: JumpRecord) -> str:
    """Why a jump's text had one way forward: a tag the run writes (a reasoning marker, a
    tool call's start), then what the automaton or the grammar allowed."""
    tag = next(
        (
            g
            for g in trace.segments
            if g["kind"] == "tag"
            and g.get("char_start") == j.char_start
            and g["text"]
            and j.string.startswith(g["text"])
        ),
        None,
    )
    rest = len(j.string) - (len(tag["text"]) if tag else 0)
    written = f"the tag {_q(tag['text'])} ({esc(tag['label'])}) is written as is" if tag else ""
    if tag and rest == 0:
        return written
    lead = f"{written} and " if tag else ""
    if trace.automaton:  # a grammar's run has no automaton: no chain to point at
        chain = _g("chain")
        return f"{lead}the automaton had exactly one way forward for {rest} characters (a {chain})"
    return f"{lead}the grammar allowed exactly one continuation for {rest} characters"


GLOSSARY = [
    (
        "chain",
        "Chain",
        "A run of states with exactly one way forward each. The graph draws it as one thick edge "
        "labelled with its text; a state inside it is not drawn, the chain is highlighted instead.",
    ),
    (
        "jumpable",
        "Jumpable state",
        "A state where a chain starts: the constraint alone decides the next characters, "
        "so they need no sampling.",
    ),
    (
        "jump",
        "Jump-forward",
        "Appending a chain's text in one go instead of decoding it token by token; the model "
        "reads the appended tokens in a single forward pass (prefill).",
    ),
    (
        "re-tokenization",
        "Re-tokenization",
        "After a jump the output text is tokenized again, because the model would "
        "have split it differently; only the tokens that changed are recomputed.",
    ),
    (
        "back-off",
        "Back-off",
        "The last jumped token may be the start of a longer token; it is removed and re-decided "
        "by the model so the token boundary is the one the model would pick.",
    ),
    (
        "feasible-mass",
        "Feasible mass",
        "The share of the model's probability that falls on tokens the constraint "
        "allows. Low values mean the constraint fights the model.",
    ),
    (
        "mask",
        "Allowed-token mask",
        "Which tokens of the vocabulary the constraint allows at this step; the rest get "
        "probability zero.",
    ),
]


def glossary_html() -> str:
    items = "".join(f'<dt id="g-{k}">{esc(t)}</dt><dd>{esc(d)}</dd>' for k, t, d in GLOSSARY)
    return f'<details id="glossary"><summary>Glossary</summary><dl>{items}</dl></details>'


def pretty_json(text: str) -> str | None:
    """The output pretty-printed when it is JSON (None otherwise)."""

    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return None


def output_panel(trace: Trace) -> str:
    """The decoded text (bytes merged into characters) with the validator's verdict and,
    for JSON, a pretty-printed copy. The step view dims what comes after the current step."""
    text, valid, why = trace.text, trace.valid, trace.validation
    cls, mark = {True: ("ok", "\u2713 valid"), False: ("bad", "\u2717 invalid")}.get(
        valid, ("unk", "? not checked")
    )
    badge = (
        f'<span id="output-valid" class="cfsm-badge {cls}" '
        f'data-valid="{esc(str(valid).lower())}">{mark}</span>'
    )
    parts = [
        f'<div class="cfsm-out-head"><b>Output</b> {badge} <span '
        f'class="cfsm-muted">{esc(why)}</span></div>',
        f'<pre id="output-text" class="cfsm-output"><span class="done">{esc(text)}</span><span '
        'class="rest"></span></pre>',
    ]
    kind = (trace.request.get("constraint") or {}).get("kind")
    pj = pretty_json(text) if kind == "schema" else None
    if pj is not None and pj != text:
        parts.append(
            "<details><summary>Pretty-printed JSON</summary><pre "
            f'class="cfsm-output">{esc(pj)}</pre></details>'
        )
    return '<div id="output-panel" class="cfsm-panel">' + "".join(parts) + "</div>"


def share(p: float) -> str:
    """A probability as a share a reader can compare: 0.3%, not 0% beside p = 0.62."""
    if p <= 0:
        return "0%"
    if p < 0.001:
        return "<0.1%"
    if p >= 1:
        return "100%"
    if p > 0.999:
        return ">99.9%"
    # near either end one decimal, so that 99.7% stands beside 0.3% (not 100%)
    return f"{100 * p:.1f}%" if p < 0.1 or p > 0.99 else f"{100 * p:.0f}%"


def duration_us(us: float) -> str:
    """45.2 \u00b5s, 3.4 ms, 1.83 s: never '182630.3 \u00b5s'."""
    if us < 1000:
        return f"{us:.1f} \u00b5s"
    if us < 1_000_000:
        return f"{us / 1000:.1f} ms"
    return f"{us / 1e6:.2f} s"
