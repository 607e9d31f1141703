"""A run's time on its own clock, and the same output decoded masked: what the page's
"decode time saved" compares (read from a finished `Sequence`'s counters)."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import TYPE_CHECKING

from .trace import RunClock

if TYPE_CHECKING:
    from .sequence import Sequence


def est_forward_ms(self: Sequence) -> float:
    """The cost model's time for this run's passes as they were made."""
    c = self.runner.costs
    return 0.0 if c is None else c.passes_ms(self.n.pass_sizes)


def est_masked_ms(self: Sequence) -> float:
    """The cost model's time for this output decoded masked, pass for pass as the
    page's 'passes saved' counts it (viz.cards.masked_passes): the prompt's prefill
    gives the first token, one step each gives the others, and one more step a stop the
    model chose (EOS). A run that jumps nothing then saves 0%, not the one step a
    baseline of one step per output token added."""
    c = self.runner.costs
    if c is None:
        return 0.0
    prompt = len(self.prompt_ids) - self.n.prompt_cached_tokens  # shared either way
    steps = max(0, len(self.out_ids) - 1) + (1 if self.reason == "eos" else 0)
    return c.passes_ms(Counter({prompt: 1}) + Counter({1: steps}))


def run_clock(self: Sequence) -> RunClock:
    """This run's passes on its own clock: its measured prefill, its one-token passes at
    their mean, its many-token passes (jumps) as measured; and the same output decoded
    masked timed alike: the prefill, then one mean step per further token (and one for
    a stop the model chose), as `est_masked_ms` counts passes. The mean, not the
    median, on both sides: on a busy machine a stalled pass is as likely among the
    steps masked decoding would make as among the jumps' passes, and a median would
    drop the steps' stalls and keep the jumps'. A run without a one-token pass takes
    the step from the load-time cost model."""
    n, c = self.n, self.runner.costs
    if n.step_ms:
        step, source = statistics.fmean(n.step_ms), "this run"
    elif c is not None:
        step, source = c.step_ms, "load-time model"
    else:
        return RunClock()
    prefill = n.prefill_ms or 0.0
    steps = max(0, len(self.out_ids) - 1) + (1 if self.reason == "eos" else 0)
    forward = prefill + step * len(n.step_ms) + sum(n.multi_ms)
    jumps = len(n.multi_ms)
    in_steps = sum(n.multi_ms) / jumps / step if jumps and step else 0.0
    model = (
        sum(c.pass_ms(k) for k in n.multi_tokens) / jumps / c.step_ms
        if jumps and c is not None and c.step_ms
        else 0.0
    )
    masked = _prompt_only(self, prefill) + step * steps
    return RunClock(step, forward, masked, source, jumps, sum(n.multi_tokens), in_steps, model)


def _prompt_only(self: Sequence, prefill_ms: float) -> float:
    """The first pass's time for the prompt alone: a jump made before the first step
    rides in that pass, and masked decoding would pay for its tokens as steps instead
    (scaled by the cost model's pass times, else by token counts)."""
    new = self.n.first_feed_new
    prompt = len(self.prompt_ids) - self.n.prompt_cached_tokens
    if new <= prompt or prompt <= 0:
        return prefill_ms
    c = self.runner.costs
    share = c.pass_ms(prompt) / c.pass_ms(new) if c is not None else prompt / new
    return prefill_ms * min(1.0, share)
