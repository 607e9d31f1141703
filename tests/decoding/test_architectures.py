"""Models of other architectures (random tiny weights from transformers configs, built
offline): each loads through the self-check, decodes with KV reuse under jump-forward,
and decodes the same in a stacked batch and under continuous batching as alone."""

from __future__ import annotations

import concurrent.futures as cf
import re

import pytest

from cfsm.bench.batch import run_batch
from cfsm.bench.tiny_models import ARCHS, build_model
from engine.constraint import Constraint
from engine.decoding.request import GenerateRequest

pytestmark = pytest.mark.model

REGEX = r'\{"name": "[a-z ]{1,10}", "house": "(Gryffindor|Slytherin)", "age": [0-9]{1,2}\}'
PROMPTS = ["Describe a wizard.", "A student, please.", "Who lives there?"]


@pytest.fixture(scope="module", params=ARCHS)
def arch_engine(request, tmp_path_factory):
    from engine.serving.service import Engine

    folder = build_model(tmp_path_factory.mktemp(request.param), "byte_level", request.param)
    eng = Engine(str(folder))
    yield request.param, eng
    eng.close()


def _req(prompt: str, mode: str = "jump") -> GenerateRequest:
    return GenerateRequest.from_inputs(
        prompt,
        Constraint("regex", REGEX),
        mode=mode,
        raw_prompt=True,
        max_new_tokens=80,
        healing_tokens=0,
    )


def test_loads_through_the_self_check_and_jumps(arch_engine):
    arch, eng = arch_engine
    diffs = eng.lm.self_check["max_logprob_diff"]  # cached and stacked steps vs a fresh prefill
    assert set(diffs) == {"cached step", "stacked batch", "stacked fresh"}
    assert max(diffs.values()) < 1e-2, (arch, diffs)
    tr = eng.generate(_req(PROMPTS[0])).to_json()
    assert tr["model"]["architecture"] == arch
    assert tr["valid"] and re.fullmatch(REGEX, tr["text"]), (arch, tr["text"])
    assert tr["totals"]["jumps"] > 0 and tr["totals"]["jumps_skipped"] == 0
    masked = eng.generate(_req(PROMPTS[0], "masked")).to_json()
    assert masked["valid"], arch
    assert tr["totals"]["forward_passes"] < masked["totals"]["forward_passes"], arch


def test_a_stacked_batch_equals_single_runs(arch_engine):
    arch, eng = arch_engine
    comp = eng.compile(Constraint("regex", REGEX)).compiled
    single = [eng.generate(_req(p)).text for p in PROMPTS]
    batch = run_batch(
        eng.ensure_model(), PROMPTS, comp, mode="jump", max_new_tokens=80, healing_tokens=0
    )
    # (no chat template on these models: raw or not, the prompts tokenize alike)
    assert batch["texts"] == single, arch
    assert all(re.fullmatch(REGEX, t) for t in single), arch


def test_continuous_batching_equals_single_runs(arch_engine):
    arch, eng = arch_engine
    from engine.serving.service import Engine

    single = [eng.generate(_req(p)).text for p in PROMPTS]
    cont = Engine(eng.model_name, continuous=True)
    try:
        with cf.ThreadPoolExecutor(3) as pool:
            texts = [
                t["text"] for t in pool.map(lambda p: cont.generate(_req(p)).to_json(), PROMPTS)
            ]
    finally:
        cont.close()
    assert texts == single, arch


def test_a_sliding_window_model_crops_and_stacks_past_its_window(tmp_path):
    """Mistral's window is 16 positions here: a cache filled past it, cropped back (as a
    jump does) and extended, alone and stacked with another request, gives the logits of a
    fresh prefill; and its requests share batched passes."""
    import torch

    from engine.runtimes.base import Feed
    from engine.serving.service import Engine

    eng = Engine(str(build_model(tmp_path / "mistral", "byte_level", "mistral")))
    try:
        runner = eng.lm.runner
        assert eng.lm.model.config.sliding_window == 16 and runner.can_stack
        ids = list(range(5, 45))  # 40 positions: past the window
        cache = runner.new_cache()
        runner.forward([Feed(cache, ids[:36])])
        runner.crop(cache, 30)  # a jump that keeps 30 positions
        other = runner.new_cache()
        runner.forward([Feed(other, ids[:20])])
        (alone,), _ = runner.forward([Feed(cache, ids[30:])])
        (fresh,), _ = runner.forward([Feed(runner.new_cache(), ids)])
        assert torch.allclose(alone[-1], fresh[-1], atol=1e-4)
        runner.crop(cache, 30)
        stacked, _ = runner.forward([Feed(cache, ids[30:]), Feed(other, ids[20:])])
        assert torch.allclose(stacked[0][-1], fresh[-1], atol=1e-4)
        assert torch.allclose(stacked[1][-1], fresh[-1], atol=1e-4)
    finally:
        eng.close()
