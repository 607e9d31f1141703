"""A backend's mask and its accept agree: every token the mask allows is accepted, along
seeded random walks (what sampling does, whatever the model), on objects with many optional
properties. llguidance's parser refused `{` after allowing it on 700 optional properties
(its row limit), and the server answered a 500 `dead_end` that clients retried."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.constraint import Constraint
from engine.errors import CfsmError

SEEDS = range(3)
STEPS = 40
# the sizes each backend compiles within its budgets (larger ones are refused by name:
# the regex path's state budget, xgrammar's compile memory cap)
SIZES = {
    "fsm": (1, 17),
    "outlines": (1, 5),
    "xgrammar": (1, 120),
    "llguidance": (1, 17, 700, 2000),
}


def wide_object(n: int) -> Constraint:
    props = {f"p{i:05d}": {"type": "string"} for i in range(n)}
    schema = {"type": "object", "properties": props}
    return Constraint.from_inputs("schema", json.dumps(schema), "compact", False, False)


def walk_agrees(compiled, seed: int, eos: int) -> bool:
    """Walk `STEPS` random allowed tokens from the start; at the first step every allowed
    token is tried (accepted, then rolled back). True when the walk went all the way or
    stopped where only the end may come (a complete document)."""
    rng = np.random.default_rng(seed)
    m = compiled.matcher()
    first = m.allowed_ids()
    for tid in first.tolist():
        if tid != eos:
            assert m.accept_token(tid), (tid, m.refusal())
            m.rollback(1)
    for step in range(STEPS):
        ids = [t for t in m.allowed_ids().tolist() if t != eos]
        if not ids:
            return m.is_final()
        tid = int(rng.choice(ids))
        assert m.accept_token(tid), (step, tid, m.refusal())
    return True


@pytest.mark.parametrize(("backend", "n"), [(b, n) for b, sizes in SIZES.items() for n in sizes])
def test_every_allowed_token_is_accepted_on_wide_objects(compile_engine, backend, n):
    compiled = compile_engine.compile(wide_object(n), backend).compiled
    eos = compile_engine.ctx.eos_token_id
    for seed in SEEDS:
        assert walk_agrees(compiled, seed, eos)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(1, 2000), seed=st.integers(0, 2**16))
def test_auto_agrees_on_any_number_of_optional_properties(compile_engine, n, seed):
    """`auto`'s backend, whichever it picks for the size, agrees with itself."""
    try:
        compiled = compile_engine.compile(wide_object(n), "auto").compiled
    except CfsmError as exc:  # a refusal must be a clear compile error, never a dead end
        assert exc.kind in ("state_explosion", "compile_memory", "compile_timeout"), exc
        return
    assert walk_agrees(compiled, seed, compile_engine.ctx.eos_token_id)


def test_a_refused_allowed_token_names_the_backend_and_the_reason(compile_engine):
    """Under llguidance's default row limit the old failure comes back, now as a 422 that
    says which backend refused what and why (not a 500 a client retries)."""
    import llguidance as llg

    from engine.decoding.sequence import Sequence
    from engine.decoding.token_text import TokenText

    compiled = compile_engine.compile(wide_object(700), "llguidance").compiled
    m = compiled.matcher()
    m.m = llg.LLMatcher(compiled.tokenizer, compiled.grammar, log_level=0)  # default limits
    brace = int(m.allowed_ids()[0])
    assert not m.accept_token(brace)
    assert "max is 2000" in m.refusal()
    seq = Sequence.__new__(Sequence)  # only what the message reads
    seq.matcher, seq.out_ids, seq.texts = m, [], TokenText(compile_engine.ctx)
    err = seq._refused(brace)
    assert err.kind == "dead_end" and err.spec.status == 422 and not err.spec.retryable
    assert err.message.startswith(f"llguidance refused token {brace} ('{{') it had allowed")
    assert "max is 2000" in err.message
