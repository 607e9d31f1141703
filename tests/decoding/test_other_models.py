"""`--model PATH`: any causal LM folder works offline. The test builds its own tiny model
(random weights, the embedded tokenizer) instead of fetching one."""

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=49152 + 64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def test_generate_with_a_local_model_folder(tiny_model):
    # the output layer has 64 more rows than the tokenizer: masks must cover them (never allowed)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cfsm",
            "generate",
            "--model",
            str(tiny_model),
            "--regex",
            "(cat|dog)s? [0-9]{2}",
            "--prompt",
            "Pet?",
            "--json",
            "--max-new-tokens",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    tr = json.loads(r.stdout)
    assert tr["model"]["vocab_size"] == 49152 + 64
    assert tr["model"]["name"] == str(tiny_model)
    assert re.fullmatch(r"(cat|dog)s? [0-9]{2}", tr["text"]), tr["text"]
    assert all(t["id"] < 49152 for t in tr["tokens"])


def test_model_folder_without_weights_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cfsm",
            "generate",
            "--model",
            str(tmp_path),
            "--regex",
            "a",
            "--prompt",
            "x",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["kind"] == "unknown_model"
