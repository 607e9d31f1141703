"""The run's figures as labelled cards (tokens/s, passes and time saved against masked,
compile, runtime): value first, each on its own scale; a loss reads as a loss."""

from __future__ import annotations

from engine.decoding.trace import Totals

from .text import esc

RUNTIME_NAMES = {"llamacpp": "llama.cpp", "transformers": "transformers (PyTorch)"}


def masked_passes(output_tokens: int, reason: str = "eos") -> int:
    """What masked decoding spends on the same output: one pass per output token (the
    prompt's pass gives the first token's logits), and one more for a stop the model chose
    (`eos`); a run that ends where only EOS is allowed needs none for it. While a run
    streams (no reason yet) the stop is counted."""
    return max(1, output_tokens) + (1 if reason == "eos" else 0)


def replay_cards(totals: Totals) -> list[tuple]:
    """A replay's cards: the other engine's passes, and what jump-forward would save."""
    n = max(1, totals.output_tokens)
    forced = totals.forced_steps
    cards = [
        ("tokens (one forward pass each)", f"{totals.output_tokens}", None),
        ("passes jump-forward would save", f"{100 * forced / n:.0f}%", forced / n),
    ]
    if totals.tokens_per_s:
        cards.append(("tokens/s as streamed", f"{totals.tokens_per_s:.1f}", None))
    return cards


def _jumped_card(jumped: int, out: int, steps: int | None) -> tuple:
    """The output tokens no step decoded. A jump's re-tokenization can merge the model's
    last choice into a jumped token (its "v", then "iew." jumped: " interview"), and the
    trace marks that token jumped: counted as such, a run of 4 tokens in 2 passes read
    "100% jumped". Tokens beyond the steps are what jumps added, net (`steps` None: a run
    still streaming, its steps not counted yet)."""
    if steps is not None:
        jumped = min(jumped, max(0, out - steps))
    share = jumped / max(1, out)
    return "output tokens jumped", f"{100 * share:.0f}%", share


def _head_cards(per_s: float | None, passes: int, base: int, jumped: tuple) -> list[tuple]:
    """The three cards a run shows from its first streamed step to its end."""
    return [
        ("tokens/s", f"{per_s or 0:.1f}", None),
        _saving_card("forward passes", "vs masked", 1 - passes / base),
        jumped,
    ]


def live_cards(output_tokens: int, forward_passes: int, tokens_per_s: float, jumped: int) -> str:
    """A streaming run's cards: what it has decoded so far, against masked decoding."""
    base = masked_passes(output_tokens)
    return _card_row(
        _head_cards(tokens_per_s, forward_passes, base, _jumped_card(jumped, output_tokens, None))
    )


def stat_cards(totals: Totals) -> str:
    """The run's figures as labelled cards: value first, each with its own scale."""
    t = totals
    if t.reason == "replay":
        return _card_row(replay_cards(t))
    base = masked_passes(t.output_tokens, t.reason)
    cards = _head_cards(
        t.tokens_per_s,
        t.forward_passes,
        base,
        _jumped_card(t.jumped_tokens, t.output_tokens, t.steps),
    )
    over = t.grammar_us_per_step / 1000 / max(1e-9, t.forward_ms_per_pass or 1)
    cards.append(("grammar time per forward pass", f"{100 * over:.1f}%", min(1.0, over)))
    saved = t.time_saved()
    if saved is not None:
        clock = "this run's clock" if t.run_masked_ms else "this runtime's costs"
        cards.append(_saving_card("decode time", f"vs masked ({clock})", saved))
    # a cached constraint: its once-paid compile time, said so (not this run's)
    label = "compile (cached, from an earlier run)" if t.compile_cached else "compile"
    cards.append((label, f"{1000 * t.compile_s:.0f} ms", None))
    if t.runtime:
        cards.append(("runtime", RUNTIME_NAMES.get(t.runtime, t.runtime), None))
    return _card_row(cards)


def _saving_card(what: str, against: str, saved: float) -> tuple:
    """A saving as a card that never reads as a negative saving: a loss is named a loss
    ("104%" over "more decode time vs masked": "more" said once), and a saving that rounds
    to 0 reads 0%, not -0%."""
    pct = round(100 * saved)
    if pct < 0:
        return (f"more {what} {against}", f"{-pct}%", None)
    return (f"{what} saved {against}", f"{pct}%", max(0.0, saved))


def _card_row(cards: list[tuple]) -> str:
    body = "".join(
        f'<div class="cfsm-card"><div class="v">{v}</div><div class="l">{esc(label)}</div>'
        + (
            f'<div class="bar"><span style="width:{max(0.0, min(1.0, f)) * 100:.0f}%"></span></div>'
            if f is not None
            else ""
        )
        + "</div>"
        for label, v, f in cards
    )
    return f'<div id="stat-cards" class="cfsm-cards">{body}</div>'
