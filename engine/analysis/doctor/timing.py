"""The ideal as time on a runtime (its cost model measured at load) and how far the
tokenizer reaches into forced text."""

from __future__ import annotations

from ...runtimes.base import CostModel


def ideal_time(total: int, chosen: int, costs: dict | None) -> dict | None:
    """The ideal as decode time on a runtime: masked decoding steps through every token;
    the ideal takes one step per model-chosen token, and the forced tokens ride in prefills
    at the marginal cost of a token in a 32-token pass (measured at load). On llama.cpp a
    forced token costs about 0.4 steps, on the PyTorch path far less: the same passes saved
    are less time saved."""

    model = CostModel.from_json(costs)
    if model is None or total <= 0:
        return None
    marginal = (model.pass_ms(32) - model.step_ms) / 31
    masked = total * model.step_ms
    ideal = chosen * model.step_ms + (total - chosen) * max(marginal, 0.0)
    return {
        "runtime": costs.get("runtime", ""),
        "step_ms": model.step_ms,
        "forced_token_ms": round(marginal, 3),
        "masked_ms": round(masked, 1),
        "ideal_ms": round(ideal, 1),
        "ideal_time_reduction": round(masked / max(ideal, 1e-9), 2),
    }


def tokenizer_reach(tokenizer, texts: list[str]) -> dict | None:
    """Can the engine re-tokenize these outputs exactly on this tokenizer? Where it cannot,
    its jumps are skipped (each with this reason) and the ideal is out of reach. None for
    a plain tokenizer (one without the engine's continuation encoder)."""
    exact = getattr(tokenizer, "exact", None)
    if exact is None:
        return None
    whys = [why for _, why in (exact(t) for t in texts) if why]
    return {
        **tokenizer.traits.to_json(),
        "exact_samples": len(texts) - len(whys),
        "samples": len(texts),
        "reachable": not whys,
        "why": whys[0] if whys else None,
    }
