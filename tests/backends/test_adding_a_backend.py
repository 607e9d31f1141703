"""docs/architecture.md's "Adding a backend", followed: one file (toy_backend.py) and one
registry line, and the CLI, the page's choices, the server's compile cache and the
differential tests pick it up."""

from __future__ import annotations

import json
import random

import pytest
from test_backends_differential import CASES, _compare, _matchers, random_walk
from toy_backend import ToyBackend

from engine.backends import (
    BACKEND_CHOICES,
    BACKENDS,
    NATIVE_BACKENDS,
    register_backend,
    unregister_backend,
)
from engine.constraint import Constraint


@pytest.fixture()
def toy():
    register_backend(ToyBackend)  # the registry line
    yield "toy"
    unregister_backend("toy")


def test_a_backend_added_in_one_file_is_listed_compiled_and_compared(
    toy, ctx, compile_engine, tokenizer, capsys
):
    from app.inputs import CHOICES
    from cfsm.cli import main

    assert toy in BACKENDS and toy in BACKEND_CHOICES and toy not in NATIVE_BACKENDS
    assert toy in CHOICES["backend"]  # the page's dropdown and its permalink check
    pattern, text = CASES[0]
    assert main(["check", "--regex", pattern, "--text", text, "--backend", toy]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["backend"], out["accepted"]) == (toy, True)
    res = compile_engine.cache.get(Constraint("regex", pattern), toy)  # /v1's and Run's path
    assert res.compiled.backend == toy and res.dfa is not None
    ms = _matchers(ctx, pattern)  # the differential test's own helpers: every backend
    assert toy in ms
    for t in tokenizer.encode(text, add_special_tokens=False):
        _compare(ms, ctx.vocab)
        assert all(m.accept_token(t) for m in ms.values())
    random_walk(_matchers(ctx, pattern), ctx.vocab, random.Random(7))


def test_a_backend_needs_a_new_name(toy):
    with pytest.raises(ValueError):
        register_backend(ToyBackend)
    assert list(BACKENDS).count(toy) == 1
