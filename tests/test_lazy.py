"""engine.lazy: a heavy library is imported at its first attribute read, not when a module
that names it is imported; `cfsm`'s own modules load none of them but numpy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.lazy import HEAVY, lazy_module

ROOT = Path(__file__).resolve().parent.parent


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}; import json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_the_proxy_imports_on_the_first_read_and_forwards():
    code = "from engine.lazy import lazy_module; m = lazy_module('colorsys')"
    assert "colorsys" not in _loaded_after(code)
    assert "colorsys" in _loaded_after(code + "; m.rgb_to_hsv")
    m = lazy_module("json")
    assert "not loaded" in repr(m)
    assert m.dumps([1]) == "[1]"
    assert "loaded" in repr(m) and "dumps" in dir(m)


def test_a_missing_library_fails_at_the_read():
    m = lazy_module("no_such_library_cfsm")
    with pytest.raises(ImportError):
        _ = m.anything


def test_the_cli_and_the_engine_load_no_heavy_library():
    mods = ("cfsm.cli", "engine.backends", "engine.decoding.decoder", "viz.graph")
    loaded = set(_loaded_after("import " + ", ".join(mods)))
    heavy = {name for name in HEAVY if name != "numpy"} | {"gradio"}
    assert sorted(heavy & loaded) == []
