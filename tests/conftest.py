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
JSONSCHEMABENCH = SHARED / "bench-data" / "jsonschemabench"


@pytest.fixture(scope="session")
def paper_bench() -> dict:
    if PAPER_BENCH.exists():
        return json.loads(PAPER_BENCH.read_text())
    pytest.skip("../shared/paper-bench is not present")


@pytest.fixture(scope="session")
def jsonschemabench() -> Path:
    """The shared JSONSchemaBench sample; without ../shared the test is skipped, as every
    test that reads ../shared is."""
    if JSONSCHEMABENCH.is_dir():
        return JSONSCHEMABENCH
    pytest.skip("../shared/bench-data/jsonschemabench is not present")


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
def hf_engine(engine):
    """The embedded model on the transformers runtime (PyTorch, float32 on the CPU),
    sharing the default engine's tokenizer context and compile cache."""
    engine.ensure_model("transformers")
    return engine


@pytest.fixture(scope="session")
def compile_engine():
    """The embedded model's tokenizer and compile cache, without weights."""
    from engine.serving.service import Engine

    eng = Engine(load_weights=False)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def ctx(compile_engine):
    return compile_engine.ctx


@pytest.fixture(scope="session")
def tokenizer(ctx):
    return ctx.tokenizer


@pytest.fixture(scope="session")
def app_server(engine):
    """`cfsm serve` in this process (page and /v1 API), shared by the browser and API
    tests, as (url, hub); its hub loads the embedded model once more, as a server does."""
    import socket

    from app.main import serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # a raised state limit: the stop test needs a compile that takes seconds (a 2^18-state DFA)
    demo, hub = serve(port=port, prevent_thread_lock=True, max_states=1_000_000)
    hub.get()  # the API answers 503 until the model is loaded
    yield f"http://127.0.0.1:{port}", hub
    demo.close()


@pytest.fixture(scope="session")
def app_url(app_server):
    return app_server[0]


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """`-m "not model"` must load no weights: a test that asks for the loaded model
    without the marker is a collection error, not a silent slow test."""
    bad = [
        it.nodeid
        for it in items
        if "engine" in getattr(it, "fixturenames", ()) and it.get_closest_marker("model") is None
    ]
    if bad:
        raise pytest.UsageError(
            "tests use the `engine` fixture (model weights) without @pytest.mark.model: "
            + ", ".join(bad[:10])
        )
