"""docs/architecture.md's "Adding a runtime", followed: one class (toy_runtime.py) and one
registry line, and the request, the page's choices and the decoding loop take it by name
while `auto` keeps choosing as before."""

from __future__ import annotations

import pytest
from toy_runtime import ToyRuntime

from engine.constraint import Constraint
from engine.decoding.model import resolve_runtime
from engine.decoding.model_runtimes import (
    RUNTIME_CHOICES,
    register_runtime,
    runtime_names,
    unregister_runtime,
)
from engine.decoding.request import GenerateRequest
from engine.errors import CfsmError


@pytest.fixture()
def toy():
    register_runtime(ToyRuntime())  # the registry line
    yield "toy"
    unregister_runtime("toy")


def test_a_runtime_added_by_name_is_offered_and_auto_is_unchanged(toy):
    from app.inputs import CHOICES

    assert toy in runtime_names() and toy in RUNTIME_CHOICES and toy in CHOICES["runtime"]
    assert resolve_runtime(toy, None, "cpu") == toy
    assert resolve_runtime("auto", None, "cpu") == resolve_runtime("auto", None, "cpu") != toy
    req = GenerateRequest.from_inputs("hi", None, runtime=toy)
    assert req.runtime == toy
    with pytest.raises(CfsmError) as ei:
        GenerateRequest.from_inputs("hi", None, runtime="nope")
    assert ei.value.kind == "invalid_input" and toy in ei.value.message


@pytest.mark.model
def test_the_decoding_loop_runs_a_request_on_the_added_runtime(toy, hf_engine):
    """The engine loads the model through the toy runtime (self-check and costs included)
    and decodes a constrained request on it: the trace names the runtime, the output is
    the constraint's and the transformers runtime's (greedy, same weights)."""
    c = Constraint("regex", "(yes|no)")
    on_toy = hf_engine.generate(
        GenerateRequest.from_inputs("Is water wet?", c, runtime=toy)
    ).to_json()
    on_hf = hf_engine.generate(
        GenerateRequest.from_inputs("Is water wet?", c, runtime="transformers")
    ).to_json()
    assert on_toy["totals"]["runtime"] == "transformers"  # its runner is transformers'
    assert hf_engine.decoders[toy].lm.runtime == toy
    assert on_toy["text"] in ("yes", "no") and on_toy["text"] == on_hf["text"]
