"""The doctor's report as plain text (`cfsm doctor`); `summaries.doctor_md` is the page's
Markdown of the same report."""

from __future__ import annotations


def _tokenizer_lines(tok: dict | None) -> list[str]:
    if not tok:
        return []
    prefix = (
        f"prefix space by {tok['prefix_space_by']}, off for outputs"
        if tok["prefix_space"]
        else "no prefix space"
    )
    lines = [
        f"Tokenizer: {tok['family']}, {prefix}, byte fallback "
        f"{'yes' if tok['byte_fallback'] else 'no'}"
    ]
    if not tok["reachable"]:
        lines.append(
            f"The engine cannot reach this ideal on this tokenizer: "
            f"{tok['samples'] - tok['exact_samples']} of "
            f"{tok['samples']} samples cannot be re-tokenized exactly ({tok['why']}); their jumps "
            f"are skipped."
        )
    return lines


def _time_lines(t: dict | None) -> list[str]:
    if not t:
        return []
    return [
        f"As decode time on {t['runtime'] or 'this runtime'}: ideal {t['ideal_time_reduction']}x "
        f"faster than masked (a step {t['step_ms']:.1f} ms, a forced token in a prefill "
        f"{t['forced_token_ms']:.2f} ms)"
    ]


def format_report(rep: dict) -> str:
    lines = [
        f"Ideal forward-pass reduction: {rep['ideal_reduction']}x ({rep['total_tokens']} tokens, "
        f"{rep['model_tokens']} chosen "
        f"by the model, over {rep['samples']['count']} {rep['samples']['source']} samples)",
        f"Compressed FSM: {rep['fsm']['num_states']} states, {rep['fsm']['jumpable_states']} "
        f"jumpable "
        f"({rep['fsm']['jumpable_share']:.0%}), {rep['fsm']['num_chains']} chains, longest "
        f"{rep['fsm']['longest_chain']} chars",
        *_tokenizer_lines(rep.get("tokenizer")),
        *_time_lines(rep.get("time")),
        *([f"NOTE: {rep['runtime_note']}"] if rep.get("runtime_note") else []),
        "",
        "Where the forward passes go:",
    ]
    for c in rep["causes"]:
        where = ", ".join(c["places"][:3])
        lines.append(f"  {c['share']:6.1%}  {c['title']}  [{where}]")
        lines.append(f"          -> {c['suggestion']}")
    b = rep["token_boundaries"]
    lines.append(
        f"  ({b['share']:.1%} of those tokens also carry forced text: {b['title'].lower()})"
    )
    if rep["what_if"]:
        lines.append("")
        lines.append("What if:")
        for w in rep["what_if"]:
            if "error" in w:
                lines.append(f"  {w['change']}: {w['error']} ({w.get('meaning', '')})")
            else:
                lines.append(f"  {w['change']}: {w['advice']} ({w['note']})")
    if rep.get("untyped"):
        lines += ["", f"Accepts more than it seems: {UNTYPED_WHY}"]
        lines += [f"  {u['where']}: {u['what']} -> {u['fix']}" for u in rep["untyped"]]
    if rep.get("unbounded"):
        lines += ["", f"Runs may not end: {UNBOUNDED_WHY}"]
        lines += [f"  {u['where']}: {u['what']} -> {u['bound']}" for u in rep["unbounded"]]
    return "\n".join(lines)


UNTYPED_WHY = (
    "these places state no type, so the samples (and the model) may write any JSON value "
    "there; the figures above count those values."
)
UNBOUNDED_WHY = (
    "a run can stay in any of these parts until the token limit (the page and `cfsm "
    "generate` say which one a run stopped in); bound them to let every run end."
)
