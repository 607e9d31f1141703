"""Shared fixtures: the embedded model and tokenizer are loaded once per test session
(the GGUF conversion is cached on disk by the first load)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
PAPER_BENCH = SHARED / "paper-bench" / "sglang_json_benchmark.json"


@pytest.fixture(scope="session")
def paper_bench() -> dict:
    if PAPER_BENCH.exists():
        return json.loads(PAPER_BENCH.read_text())
    pytest.skip("../shared/paper-bench is not present")


@pytest.fixture(scope="session")
def character_regex(paper_bench) -> str:
    return paper_bench["character"]["regex"]


@pytest.fixture(scope="session")
def engine():
    from engine.serving.service import Engine

    eng = Engine()
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def ctx(engine):
    return engine.ctx


@pytest.fixture(scope="session")
def tokenizer(engine):
    return engine.ctx.tokenizer


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
