"""Run summaries, comparisons and the doctor's report as Markdown and figures: pure
functions from engine JSON (traces, doctor reports) to what the page shows."""

from __future__ import annotations

import html
from dataclasses import asdict

from engine.backends.json_options import open_objects
from engine.decoding.trace import StepEvent, Totals, Trace, WaitEvent
from engine.lazy import lazy_module
from engine.replay.tokens import expected_line
from engine.schema.pointer import walkable
from viz.highlight import regex_span_html, schema_node_html

from .cards import live_cards
from .doctor_text import UNBOUNDED_WHY, UNTYPED_WHY
from .panels import plural, strip_html
from .text import GLYPHS

go = lazy_module("plotly.graph_objects")


def summary_md(trace: Trace) -> str:
    t = trace.totals
    ideal = trace.ideal or {}
    speed = f"{t.wall_s} s \u00b7 {t.tokens_per_s} tok/s \u00b7 " if t.tokens_per_s else ""
    parts = [
        f"**{trace.mode}** with **{trace.backend or '-'}** \u00b7 "
        f"{plural(t.output_tokens, 'token')} \u00b7 "
        f"{plural(t.forward_passes, 'forward pass')} \u00b7 {speed}{plural(t.jumps, 'jump')} "
        f"({plural(t.jumped_chars, 'char')}) \u00b7 finished: {t.finished} ({t.reason})"
    ]
    if trace.backend_why:
        parts.append(f"**Backend chosen by auto**: {html.escape(trace.backend_why)}")
    valid, why = trace.valid, trace.validation
    if valid is not None or why:
        mark = {True: "\u2713 valid", False: "\u2717 invalid"}.get(
            valid, "? not checked"
        )  # glyphs every font has
        parts.append(f"**{mark}**: {html.escape(str(why))}")
    for w in trace.warnings:
        parts.append(f"**\u26a0 warning**: {html.escape(str(w))}")
    why = trace.unfinished  # stopped at the token limit: what kept it going
    if isinstance(why, dict) and why.get("line"):
        parts.append(f"**Why it did not end**: {html.escape(str(why['line']))}")
    skipped = skipped_jumps_line(trace)
    if skipped:
        parts.append(f"**\u26a0 {html.escape(skipped)}**")
    opened = open_objects_line(trace)
    if opened:
        parts.append(opened)
    if trace.replay:
        parts.append(replay_md(trace))
    elif ideal:
        parts.append(
            f"Ideal for this output: {plural(ideal['ideal_forward_passes'], 'pass')} "
            f"({per_token_line(ideal['ideal_reduction'])})."
        )
    est = time_saved_line(t)
    if est:
        parts.append(est)
    wait = kv_wait_line(t)
    if wait:
        parts.append(wait)
    return "  \n".join(parts)


def open_objects_line(trace: Trace) -> str:
    """Where this run's backend read objects as open (engine/backends/json_options.py
    `open_objects`), so keys the schema does not list read as expected, not as a bug."""
    c = trace.request.get("constraint") or {}
    if c.get("kind") != "schema":
        return ""
    backend = trace.backend or ""
    where = open_objects(walkable(str(c.get("text", ""))), backend, bool(c.get("spec")))
    spec = " (Spec reading; integers could also be written `1.0`)" if c.get("spec") else ""
    if not where:
        return "Spec reading: integers could be written `1.0`." if c.get("spec") else ""
    shown = ", ".join(f"`{p}`" for p in where[:4]) + (" …" if len(where) > 4 else "")
    return (
        f"**Open objects**: {backend or 'the backend'} read {shown} as open{spec}: the model "
        "could write keys the schema does not list there; the step view names such a key "
        "beside its object's pointer."
    )


def replay_md(trace: Trace) -> str:
    """What a replayed output says: whose it is, what jump-forward would have saved on it,
    and where (if anywhere) it left the constraint."""
    r = trace.replay or {}
    who = r.get("model") or "the engine"
    where = f" at {r['endpoint']}" if r.get("endpoint") else ""
    n, forced = r.get("tokens", 0), r.get("forced_tokens", 0)
    parts = [
        f"**Replay of {html.escape(who)}{html.escape(where)}** "
        f"({html.escape(r.get('source') or '')}, token ids: "
        f"{html.escape(r.get('ids_from') or '')}): {plural(n, 'token')}, "
        f"{plural(forced, 'forced token')} (every character fixed by the constraint).",
        _saved_line(r, n, forced),
    ]
    if r.get("streamed_ms"):
        per = r["streamed_ms"] / max(1, n)
        parts.append(
            f"Streamed in {r['streamed_ms'] / 1e3:.2f} s ({per:.1f} ms per token as it "
            f"arrived): the forced tokens took about {forced * per / 1e3:.2f} s of it."
        )
    if r.get("message") is not None:
        parts.append(
            "The engine's message differs from its tokens' text (its own parser rewrote it): "
            "the tokens are what it decoded, and what is walked here."
        )
    for v in r.get("violations") or []:
        parts.append(
            f"**\u2717 Outside the constraint at step {v['step']}**: token "
            f"{html.escape(repr(v['text']))} (character {v['char_offset']}) is not one the "
            f"mask allowed there ({html.escape(expected_line(v))}): this engine's output "
            "breaks the constraint."
        )
    return "  \n".join(parts)


def _saved_line(r: dict, n: int, forced: int) -> str:
    """What jump-forward would have saved: over the whole output, or, where the output
    left the constraint, over its tokens before that step only (none after it counts)."""
    saved = f"**Jump-forward would have saved {plural(forced, 'forward pass')}**"
    first = next(iter(r.get("violations") or []), None)
    if first is not None:
        k = first["step"]
        if k == 0:
            return (
                "**Jump-forward would have saved nothing**: this output left the constraint at "
                "its first token (step 0), and nothing is counted past it."
            )
        return (
            f"{saved} on the {plural(k, 'token')} before step {k}, where this output left the "
            "constraint; nothing is counted past it."
        )
    return (
        f"{saved} on this output ({r.get('saved_fraction', 0):.0%} of its tokens): the engine "
        f"decoded {plural(n, 'token')} one pass each, where {plural(n - forced, 'pass')} were "
        "choices."
    )


def kv_wait_line(totals: Totals) -> str:
    """Under KV-cache pressure a request waits for cells and may be evicted and recompute
    its tokens: the output is the same, the time is not, so the summary says so."""
    held, again = totals.kv_held_passes, totals.recomputed_tokens
    if not held and not again:
        return ""
    return (
        f"The model's KV cache was full: this run waited {plural(held, 'pass')} for cells and "
        f"computed {plural(again, 'token')} again after an eviction (the output is the same "
        "as alone; set CFSM_LLAMA_N_CTX for more cells)."
    )


def waiting_line(ev: WaitEvent) -> str:
    """While a run waits for KV cells, the page's status line says so (otherwise it would
    keep the last 'Decoding ... step N' as if the run had hung)."""
    ahead = f"{plural(ev.ahead, 'request')} ahead of this one" if ev.ahead else "this run goes next"
    again = (
        f"; {plural(ev.recomputed_tokens, 'token')} to compute again after an eviction"
        if ev.recomputed_tokens
        else ""
    )
    return (
        f"Waiting for the model's KV cache … {ahead}, held {plural(ev.held_passes, 'pass')} "
        f"so far{again}. The run resumes by itself; its output is the same as alone."
    )


def time_saved_line(t: Totals) -> str:
    """Passes saved as time saved, on this run's own clock: its forward passes as measured,
    against the same output decoded masked, timed with this run's prefill and its median
    one-token pass (on llama.cpp a k-token pass costs far more than one step, so fewer
    passes save less time than on the PyTorch path). Older traces: the load-time costs."""
    saved = t.time_saved()
    if saved is None:
        return ""
    rt = t.runtime or "this runtime"
    shared = t.prompt_cached_tokens
    if t.run_masked_ms:
        step = "its" if t.clock == "this run" else "the load-time model's"
        head = (
            f"On this run's clock ({rt}): {t.run_forward_ms / 1e3:.2f} s of forward passes "
            f"against {t.run_masked_ms / 1e3:.2f} s for the same output decoded masked (its "
            f"prefill, then {step} {t.run_step_ms:.1f} ms one-token step per token; "
            "both count one-token passes at that mean): "
        )
    else:
        head = (
            f"On {rt}'s measured costs: {t.est_forward_ms / 1e3:.2f} s of forward passes "
            f"against {t.est_masked_ms / 1e3:.2f} s for the same output decoded masked: "
        )
    pct = round(100 * saved)
    verdict = f"{pct}% of the time saved." if pct >= 0 else f"{-pct}% more time than masked."
    why = f" {lost_time_why(t, rt)}" if pct < 0 else ""
    return (
        head
        + verdict
        + why
        + (
            f" {shared} of the prompt's {t.prompt_tokens} tokens were shared "
            "from the previous request's cache, not computed (both figures count that)."
            if shared
            else ""
        )
    )


BUSY_FACTOR = 1.5  # a jump's pass this many times dearer than the cost model: a busy machine


def lost_time_why(t: Totals, runtime: str) -> str:
    """Why a run that made fewer passes took more time, in the cost model's terms: what its
    jump passes cost in this run's steps against the steps they spared (the output's
    tokens less the one-token passes made), and whether they cost far more than the model
    measured at load (the machine was busy: a many-token pass slows most when another
    process holds a core) or as much (jumps too short to pay on this runtime). '' when
    the run recorded no jump pass to explain it by."""
    n, run_x = t.run_jump_passes, t.run_jump_in_steps
    if not n or not run_x:
        return ""
    model_x = t.model_jump_in_steps
    k = t.run_jump_tokens / n
    masked_steps = max(0, t.output_tokens - 1) + (t.reason == "eos")
    spared = max(0, masked_steps - (t.forward_passes - 1 - n))
    head = (
        f"Why: its {plural(n, 'jump pass')} ({k:.0f} tokens each on average) cost "
        f"{run_x:.1f}x a one-token step each on this run"
    )
    cost = f"{run_x * n:.0f} steps' time in all against the {spared} steps they spared"
    if model_x and run_x > BUSY_FACTOR * model_x:
        return (
            f"{head}, against {model_x:.1f}x in the cost model measured at load ({cost}): "
            "the machine was busy, and a pass of many tokens slows down most when another "
            "process holds a core."
        )
    model = f" ({model_x:.1f}x in the cost model)" if model_x else ""
    if run_x * n > spared:
        return f"{head}{model}, {cost}: on {runtime} jumps this short do not pay."
    return f"{head}{model}, {cost}; the rest of the difference is the first pass."


def previous_run_note(trace: Trace | None) -> str:
    """After a run that failed: what the results still on the page belong to, so that the
    previous run's output, badge, cards and timeline are not read as this run's."""
    if trace is None:
        return ""
    c = trace.request.get("constraint") or {}
    text = " ".join(str(c.get("text", "")).split())
    short = text[:60].replace("`", "'") + ("\u2026" if len(text) > 60 else "")
    what = f"{c.get('kind', 'constraint')} `{short}`"
    tokens = plural(trace.totals.output_tokens, "token")
    return (
        "**This run failed (the message above); nothing below is from it.** The output, "
        f"figures and step view are still the previous run's: {what if c else 'no constraint'}, "
        f"{tokens}."
    )


def skipped_jumps_line(trace: Trace) -> str:
    """'' when no jump was skipped; else how many and why (the first skip's reason), so
    that `jumps 0` is never silent."""
    n = trace.totals.jumps_skipped
    if not n:
        return ""
    first = trace.jump_skips[0] if trace.jump_skips else None
    where = f" (first at step {first.step}: {first.string[:40]!r})" if first else ""
    reason = first.reason if first else "reason not recorded"
    return f"{n} jump{'s' if n != 1 else ''} skipped: {reason}{where}"


def model_card(model: dict) -> str:
    """One line on the model a run used: architecture, vocabulary, tokenizer family, byte
    fallback, prefix space, EOS, runtime and device."""
    tok = model.get("tokenizer") or {}
    bits = [
        f"**{model.get('name', '?')}**",
        model.get("architecture") or "",
        f"vocab {model['vocab_size']:,}" if model.get("vocab_size") else "",
        tok.get("family", ""),
        f"byte fallback {'yes' if tok.get('byte_fallback') else 'no'}" if tok else "",
        (
            f"prefix space ({tok['prefix_space_by']}; off for outputs)"
            if tok.get("prefix_space")
            else "no prefix space"
        )
        if tok
        else "",
        f"EOS {model['eos_token_id']}" if model.get("eos_token_id") is not None else "",
        f"{model.get('runtime', 'transformers')} on `{model.get('device', '?')}`",
        _costs_line(model.get("costs")),
        _threads_line(model.get("pass_threads")),
        f"**{model['runtime_note']}**" if model.get("runtime_note") else "",
    ]
    return " \u00b7 ".join(b for b in bits if b)


def _costs_line(costs: dict | None) -> str:
    """The runtime's measured pass costs: what a jump-forward prefill costs in steps."""
    if not costs:
        return ""
    spread = costs.get("spread") or {}

    def span(k: str) -> str:  # the rounds' lowest and highest medians, where measured
        lo_hi = spread.get(k)
        return f" ({lo_hi[0]:.1f}-{lo_hi[1]:.1f})" if lo_hi else ""

    again = f", measured again {costs['remeasured']}x" if costs.get("remeasured") else ""
    return (
        f"step {costs['step_ms']:.1f} ms{span('1')}, a 32-token prefill "
        f"{costs['prefill_ms'].get('32', 0):.1f} ms{span('32')} = "
        f"{costs.get('prefill_32_in_steps', '?')}x a step"
        + (f" (medians of 3 rounds{again})" if spread else "")
    )


def _threads_line(threads: dict | None) -> str:
    """The threads each kind of pass runs on now (llama.cpp picks them by measured speed as
    it runs: a busy machine can make one thread faster than every core)."""
    if not threads:
        return ""
    named = {"step": "a step", "short": "a short pass", "long": "a long pass"}
    each = [f"{threads[k]} for {v}" for k, v in named.items() if k in threads]
    return "threads now: " + ", ".join(each)


def live_figures(ev: StepEvent) -> tuple[str, str, str]:
    """What the page shows while a run streams: the token strip, the running figures as
    stat cards, and a one-line summary."""
    tokens = [asdict(t) for t in ev.tokens]
    per_s = round(len(tokens) / max(1e-6, ev.elapsed_s), 1)
    jumped = sum(1 for t in tokens if t["origin"] == "jump")
    line = (
        f"Decoding \u2026 step {ev.step.index} \u00b7 {plural(len(tokens), 'token')} \u00b7 "
        f"{plural(ev.forward_passes, 'forward pass')} \u00b7 {plural(ev.jumps, 'jump')}"
    )
    cards = live_cards(len(tokens), ev.forward_passes, per_s, jumped)
    return strip_html(tokens), cards, line


def _times(ratio: float, more: str, less: str) -> str:
    """'3.20x faster' / '16.5x slower': a ratio below 1 is read the other way round, never
    as '0.06x slower'."""
    if ratio >= 1:
        return f"{ratio:.2f}x {more}" if ratio < 10 else f"{ratio:.1f}x {more}"
    inv = 1 / max(ratio, 1e-9)
    return f"{inv:.2f}x {less}" if inv < 10 else f"{inv:.1f}x {less}"


def first_difference(a: str, b: str) -> int | None:
    """The index of the first character where two texts part (None: equal)."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _code(text: str) -> str:
    """Text as a code span inside a table cell: whitespace as glyphs; a backquote or a bar
    would end the span or the cell, so they are spelled with look-alikes."""
    shown = "".join(GLYPHS.get(ch, ch) for ch in text).replace("`", "ˋ").replace("|", "∣")
    return f"`{shown}`" if shown else ""


def _output_cell(text: str, part: int | None, keep: int = 40, show: int = 60) -> str:
    """An output as text (no Python quoting): `keep` characters of the shared start, then
    the part after the first difference in bold behind a marker."""
    if part is None:
        return (_code(text[: keep + show]) or "*(empty)*") + (
            "…" if len(text) > keep + show else ""
        )
    head = ("…" if part > keep else "") + _code(text[max(0, part - keep) : part])
    rest = text[part : part + show]
    tail = f"**{_code(rest)}**" if rest else "*(ends here)*"
    return f"{head} ▶ {tail}" + ("…" if len(text) > part + show else "")


UNEXPLAINED_RATIO = 3.0  # a wall-time ratio past this with equal passes needs a reason


def passes_agree(ta: Totals, tb: Totals) -> bool:
    """Wall time and passes tell one story: the faster side made fewer passes (or equal
    times), or equal passes within UNEXPLAINED_RATIO (else Compare's verdict explains)."""
    speed = ta.wall_s / max(1e-9, tb.wall_s)
    pa, pb = ta.forward_passes, tb.forward_passes
    if pa != pb:
        return speed == 1 or (speed > 1) == (pb < pa)
    return max(speed, 1 / max(speed, 1e-9)) <= UNEXPLAINED_RATIO


def _unexplained_ratio(ta: Totals, tb: Totals) -> str:
    """Where the passes do not explain the wall times (`passes_agree`), what may: the side
    with fewer passes took longer (costlier passes, or load); equal passes past
    UNEXPLAINED_RATIO (the prompt one side took from the cache, else the machine's load)."""
    if passes_agree(ta, tb):
        return ""
    pa, pb = ta.forward_passes, tb.forward_passes
    if pa != pb:
        return (
            f"{'B' if pb < pa else 'A'} made fewer forward passes yet took longer: its passes "
            "cost more each (a jump's prefill of many tokens against the steps it spared), or "
            "the machine was busier during its run"
        )
    ca, cb = ta.prompt_cached_tokens, tb.prompt_cached_tokens
    if ca != cb:
        return (
            f"both made {pa} forward passes: the time differs because one "
            f"side took more of its prompt from the cache ({ca} against {cb} tokens)"
        )
    return (
        f"both made {pa} forward passes, so the time difference is not the "
        "method's: the machine was busier during one of the runs"
    )


def _cache_caveat(ta: Totals, tb: Totals) -> str:
    """The sides took different shares of their prompt from the cache (another request ran
    between them on a shared server, or llama.cpp emptied its cache, which it does once
    its cells since the last emptying pass 256): their prefill times are not alike."""
    ca, cb = ta.prompt_cached_tokens, tb.prompt_cached_tokens
    if abs(ca - cb) <= 1:  # a first jump's feed may share the prompt's last token too
        return ""
    return (
        f"A took {ca} prompt tokens from the cache and B {cb} (the cache held the prompt "
        "for one side only), so their prefills cost differently"
    )


def compare_md(a: Trace, b: Trace, cfg_a: str, cfg_b: str, temperature: float, seed: int) -> str:
    """A vs B with the caveats a reader needs: unfinished runs, different outputs, sampling."""
    ta, tb = a.totals, b.totals
    part = first_difference(a.text, b.text)
    speed = ta.wall_s / max(1e-9, tb.wall_s)
    rows = [
        "| | A | B |",
        "|---|---|---|",
        f"| config | {cfg_a} | {cfg_b} |",
        "| output | " + " | ".join(_output_cell(x, part) for x in (a.text, b.text)) + " |",
        f"| tokens | {ta.output_tokens} | {tb.output_tokens} |",
        f"| forward passes | {ta.forward_passes} | {tb.forward_passes} |",
        f"| wall time | {ta.wall_s} s | {tb.wall_s} s |",
        f"| prompt tokens from the cache | {ta.prompt_cached_tokens} | {tb.prompt_cached_tokens} |",
        f"| finished | {ta.finished} ({ta.reason}) | {tb.finished} ({tb.reason}) |",
        "",
    ]
    caveats = [
        f"{n} did not finish ({t.reason})" for n, t in (("A", ta), ("B", tb)) if not t.finished
    ]
    if part is not None:
        caveats.append(
            f"the outputs differ from character {part} on (▶), so the runs did different work"
        )
    if temperature > 0:
        caveats.append(
            f"both were sampled (temperature {temperature:g}, seed {seed}); another seed gives "
            "other outputs"
        )
    verdict = f"B is {_times(speed, 'faster', 'slower')} than A in wall time, with " + (
        _times(ta.forward_passes / max(1, tb.forward_passes), "fewer", "more") + " forward passes"
    )
    odd, cache = _unexplained_ratio(ta, tb), _cache_caveat(ta, tb)
    caveats += [odd] if odd else []
    if cache and "from the cache" not in odd:  # equal passes: `odd` names the cache already
        caveats.append(cache)
    if a.text != b.text and {a.mode, b.mode} == {"masked", "jump"}:
        caveats.append(
            "jump-forward re-tokenizes what it jumps and the model then reads those tokens, "
            "not the ones it would have chosen, so greedy outputs can part ways"
        )
    if caveats:
        rows.append(f"**{verdict}, but {'; '.join(caveats)}: read the ratio with care.**")
    else:
        rows.append(f"**{verdict}.**")
    return "\n".join(rows)


def _doctor_time(t: dict | None) -> list[str]:
    """The ideal as time on the runtime that decodes: forced tokens are not free there."""
    if not t:
        return []
    return [
        "",
        f"As decode time on **{t['runtime'] or 'this runtime'}**: the ideal is "
        f"**{_times(t['ideal_time_reduction'], 'faster', 'slower')}** than masked decoding "
        "(a step costs "
        f"{t['step_ms']:.1f} ms, a forced token inside a prefill {t['forced_token_ms']:.2f} ms, "
        "measured at load).",
    ]


def doctor_md(rep: dict, source: str = "") -> str:
    """The doctor's report; with the constraint's `source`, the node or regex span the top
    cause points at is shown highlighted."""
    f = rep["fsm"]
    out = [
        f"### Ideal forward-pass reduction: **{rep['ideal_reduction']}x**",
        f"{rep['total_tokens']} output tokens, {rep['model_tokens']} chosen by the model, over "
        f"{rep['samples']['count']} {rep['samples']['source']} samples. Compressed FSM: "
        f"{f['num_states']} states, {f['jumpable_states']} jumpable ({f['jumpable_share']:.0%}), "
        f"{f['num_chains']} chains, longest {f['longest_chain']} characters.",
        *_doctor_time(rep.get("time")),
        *([f"**Note:** {rep['runtime_note']}."] if rep.get("runtime_note") else []),
        "",
        "| share | cause | where | suggestion |",
        "|---:|---|---|---|",
    ]
    for c in rep["causes"]:
        where = ", ".join(f"`{p}`" for p in c["places"][:3])
        out.append(
            f"| {c['share']:.0%} | **{c['title']}**: {c['why']} | {where} | {c['suggestion']} |"
        )
    b = rep["token_boundaries"]
    out.append(
        f"\n{b['share']:.0%} of those tokens also carry forced text ({b['title'].lower()}): "
        f"{b['suggestion']}"
    )
    bar = "\\|"  # a pipe inside a table cell
    if rep.get("untyped"):
        out += ["", "#### Accepts more than it seems", UNTYPED_WHY, "", "| where | what | fix |"]
        out += ["|---|---|---|"] + [
            f"| {html.escape(u['where']).replace('|', bar)} | {u['what']} | {u['fix']} |"
            for u in rep["untyped"]
        ]
    if rep.get("unbounded"):
        out += ["", "#### Runs may not end", UNBOUNDED_WHY, "", "| where | what | to bound it |"]
        out += ["|---|---|---|"] + [
            f"| {html.escape(u['where']).replace('|', bar)} | {u['what']} | {u['bound']} |"
            for u in rep["unbounded"]
        ]
    if rep["what_if"]:
        out += ["", "#### What if", "| change | before | after | verdict |", "|---|---:|---:|---|"]
        for w in rep["what_if"]:
            if "error" in w:
                out.append(f"| {w['change']} | | {w['error']} | {w.get('meaning', '')} |")
            else:
                out.append(
                    f"| {w['change']} | {w['ideal_reduction_before']}x | "
                    f"**{w['ideal_reduction_after']}x** | {w['advice']} |"
                )
    top = next(
        (c for c in rep["causes"] if c["places"] and c["places"][0] not in ("end", "/")), None
    )
    if top is not None and source:
        place = top["places"][0]
        mark = (
            schema_node_html(source, place)
            if rep["constraint"]["kind"] == "schema"
            else regex_span_html(source, place)
        )
        if mark:
            out += ["", f"#### Where \u201c{top['title']}\u201d points: `{place}`", mark]
    if rep["samples"]["texts"]:
        out += [
            "",
            "Sample: `"
            + rep["samples"]["texts"][0][:200].replace("`", "'").replace("\n", "\u21b5")
            + "`",
        ]
    return "\n".join(out)


def doctor_plot(rep: dict):
    cs = rep["causes"]
    fig = go.Figure(
        go.Bar(
            x=[c["share"] * 100 for c in cs],
            y=[c["title"] for c in cs],
            orientation="h",
            marker_color="#2563eb",
        )
    )
    fig.update_layout(
        height=80 + 40 * len(cs),
        margin=dict(l=10, r=10, t=30, b=30),
        xaxis_title="% of model-chosen tokens",
        yaxis=dict(autorange="reversed"),
        title="Where the forward passes go",
    )
    return fig


def per_token_line(reduction: float) -> str:
    """The ideal against one pass per token, never "0.995x fewer": a ratio under 1.01
    reads as one pass per token."""
    if reduction >= 1.01:
        return f"{reduction}x fewer than one per token"
    return "about one per token: no pass to save"
