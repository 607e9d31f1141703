"""The oldest transformers that pyproject.toml admits (installed by scripts/setup.sh into
.venv/compat/transformers-oldest) decodes exactly like the installed one. That version
names the KV-cache argument `past_key_values` where newer ones say `cache`; before the
runner read the name from `forward`, it silently produced garbage there."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cfsm.bench.batch import run_batch
from engine.constraint import Constraint
from engine.decoding.decoder import GenerateRequest

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / ".venv" / "compat" / "transformers-oldest"
REGEX = r'\{"name": "[A-Za-z ]{1,20}", "age": [0-9]{1,2}\}'
PROMPTS = ["Describe Harry Potter as JSON.", "Describe Hermione Granger as JSON."]

SCRIPT = """
import json, sys, transformers
from engine.serving.service import Engine
from engine.decoding.decoder import GenerateRequest
from engine.constraint import Constraint
from cfsm.bench.batch import run_batch
regex, prompts = json.loads(sys.argv[1])
eng = Engine(runtime="transformers")
c = Constraint("regex", regex)
texts = [eng.generate(GenerateRequest(prompt=p, constraint=c, max_new_tokens=40)).text \
for p in prompts]
batch = run_batch(eng.ensure_model(), prompts, eng.compile(c, "fsm").compiled, max_new_tokens=40)
print(json.dumps({"version": transformers.__version__, "check": eng.lm.self_check, "texts": texts,
                  "batch": batch["texts"]}))
"""


def oldest_declared() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'"transformers>=([0-9.]+),', text).group(1)


def test_oldest_supported_transformers_decodes_like_the_installed_one(engine):
    assert COMPAT.is_dir(), (
        "run `make setup`: it installs the oldest supported transformers for this test"
    )
    env = {**os.environ, "PYTHONPATH": f"{COMPAT}{os.pathsep}{ROOT}"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps([REGEX, PROMPTS])],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    old = json.loads(out.stdout.strip().splitlines()[-1])
    assert old["version"].startswith(oldest_declared())
    assert old["check"]["cache_arg"] == "past_key_values"
    c = Constraint("regex", REGEX)
    here = [
        engine.generate(GenerateRequest(prompt=p, constraint=c, max_new_tokens=40)).text
        for p in PROMPTS
    ]
    assert old["texts"] == here
    assert "Harry Potter" in here[0]  # the text the broken cache turned into "H and and and"
    batch = run_batch(
        engine.ensure_model(), PROMPTS, engine.compile(c, "fsm").compiled, max_new_tokens=40
    )
    assert old["batch"] == batch["texts"]
    for t in old["texts"] + old["batch"]:
        assert re.fullmatch(REGEX, t)


def test_a_cache_passed_under_the_wrong_name_is_refused_at_load(hf_engine):
    from engine.errors import CfsmError
    from engine.runtimes.transformers_runner import ModelRunner

    lm = hf_engine.ensure_model("transformers").lm
    runner = ModelRunner(lm.model, lm.device)
    # as when a transformers release renames the argument again: forward() swallows the
    # unknown name into **kwargs and never fills the cache
    runner.cache_arg = "kv_cache"
    ids = list(
        lm.tokenizer.encode(
            "The quick brown fox jumps over the lazy dog.", add_special_tokens=False
        )
    )
    with pytest.raises(CfsmError) as ei:
        runner.self_check(ids)
    assert ei.value.kind == "unsupported_model"
    assert "transformers" in ei.value.message
