"""Typed traces made by hand for viz tests: every figure zero (or empty) unless a test
names it, so that a test states only what its assertion reads."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.decoding.trace import StepRecord, Totals, Trace


def totals(**given: Any) -> Totals:
    """A run's totals: the figures given, every other one 0 / "" / False."""
    blank = {
        f.name: {"int": 0, "float": 0.0, "str": "", "bool": False}.get(str(f.type).split(" ")[0])
        for f in dataclasses.fields(Totals)
        if f.default is dataclasses.MISSING
    }
    blank["finished"], blank["reason"], blank["tokens_per_s"] = True, "complete", None
    return Totals(**{**blank, **given})


def trace(**given: Any) -> Trace:
    """A run with no step, token or jump: the fields given (`totals` a dict or Totals)."""
    t = given.pop("totals", {})
    return Trace(
        request=given.pop("request", {}),
        model=given.pop("model", {}),
        backend=given.pop("backend", "fsm"),
        mode=given.pop("mode", "jump"),
        prompt_tokens=given.pop("prompt_tokens", 0),
        text=given.pop("text", ""),
        tokens=given.pop("tokens", []),
        steps=given.pop("steps", []),
        jumps=given.pop("jumps", []),
        masks=given.pop("masks", {}),
        totals=t if isinstance(t, Totals) else totals(**t),
        scheduler=given.pop("scheduler", {}),
        **given,
    )


def step(**given: Any) -> StepRecord:
    """One step: the fields given, the rest a model's choice of token 1 with nothing timed."""
    base = dict(
        index=0, char_state=None, token_state=None, allowed=1, token_id=1, token_text="",
        origin="model", prob=1.0, raw_prob=1.0, feasible_mass=1.0, top_raw=[], top_masked=[],
        forward_ms=0.0, mask_us=0.0, sample_us=0.0, output_len=0,
    )  # fmt: skip
    return StepRecord(**{**base, **given})
