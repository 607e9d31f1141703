"""A third runtime, as docs/architecture.md's "Adding a runtime" builds one: one class,
one registry line. It runs the transformers runtime's model (loaded once, shared) behind a
name of its own; `auto` never picks it (it suits no model), a user asks for it by name."""

from __future__ import annotations

from engine.decoding.model import load_model
from engine.decoding.model_runtimes import TransformersRuntime


class ToyRuntime(TransformersRuntime):
    name, label = "toy", "toy (transformers, shared weights)"

    def suits(self, model, cpu: bool) -> bool:
        return False

    def load(self, model, device: str, trust_remote_code: bool):
        lm = load_model(model, device, trust_remote_code, runtime="transformers")
        return lm.model, lm.tokenizer, lm.dtype
