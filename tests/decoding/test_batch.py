"""Batched decoding: each request keeps its own grammar state; a jumping request leaves
the batch, prefills on its own prefix and rejoins."""

import re

import pytest

from cfsm.bench.batch import run_batch
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def setup(engine, paper_bench, character_regex):
    c = Constraint("regex", character_regex)
    comp = engine.compile(c, "fsm").compiled
    prompts = [
        paper_bench["character"]["prompt_template"].format(name=n)
        for n in ("Cho Chang", "Dobby", "Fred Weasley")
    ]
    return engine, c, comp, prompts


def test_batch_of_one_equals_the_single_decoder(setup):
    engine, c, comp, prompts = setup
    single = engine.generate(
        GenerateRequest(prompt=prompts[0], constraint=c, mode="jump", healing_tokens=0)
    ).to_json()
    r = run_batch(engine.ensure_model(), prompts[:1], comp, mode="jump")
    assert r["texts"][0] == single["text"]
    assert r["finished"] == [True]


def test_batched_requests_keep_their_own_states(setup, character_regex):
    engine, c, comp, prompts = setup
    jump = run_batch(engine.ensure_model(), prompts, comp, mode="jump")
    masked = run_batch(engine.ensure_model(), prompts, comp, mode="masked")
    for r in (jump, masked):
        assert all(r["finished"])
        for t in r["texts"]:
            assert re.fullmatch(character_regex, t)
    # each request's output is its own: the three outputs differ (different characters)
    assert len(set(jump["texts"])) == 3

    # jumping requests leave the batch for a prefill on their own prefix (requests that
    # jump in the same step share that pass) and rejoin: far fewer passes in all
    def total(r):
        return r["batched_passes"] + r["jump_prefill_passes"] + r["prompt_prefill_passes"]

    assert total(jump) * 2 < total(masked)
    assert 0 < jump["jump_prefill_passes"] <= 11 * len(prompts)
    assert masked["jump_prefill_passes"] == 0 and masked["prompt_prefill_passes"] == 1


def test_max_new_tokens_holds_in_a_batch(setup):
    engine, c, comp, prompts = setup
    r = run_batch(engine.ensure_model(), prompts[:2], comp, mode="jump", max_new_tokens=5)
    assert r["finished"] == [False, False]
    assert r["output_tokens"] == 10
