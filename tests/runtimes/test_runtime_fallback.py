"""Never a crash, never silently slower: where the prebuilt llama.cpp library cannot run
(a CPU without AVX2, a library that does not load, a platform with no wheel), `auto`
decodes on transformers and says why (CLI summary, model card, doctor), and an explicit
`--runtime llamacpp` is refused with the reason (exit 2, `unsupported_runtime`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cfsm.cli import main
from engine.constraint import Constraint
from engine.decoding.model import resolve_runtime, runtime_note
from engine.errors import CfsmError
from engine.runtimes import llamacpp_lib
from viz.doctor_text import format_report
from viz.summaries import doctor_md, model_card

INTEL_OLD = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx\n"
NO_GOMP = "libgomp.so.1: cannot open shared object file"
MODERN = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c bmi2\n"


@pytest.fixture
def no_avx2(tmp_path, monkeypatch):
    """This machine as one whose CPU reports no AVX2, FMA or F16C."""
    info = tmp_path / "cpuinfo"
    info.write_text(INTEL_OLD)
    real = llamacpp_lib.cpu_flags
    monkeypatch.setattr(llamacpp_lib, "cpu_flags", lambda cpuinfo=None: real(str(info)))


@pytest.fixture
def unloadable(monkeypatch):
    """The bindings fail to load as they do without libgomp1 (or on a glibc older than the
    library's): `load_lib` raises what it raises then."""
    why = f"the llama.cpp library does not load: {NO_GOMP}"

    def fail():
        raise CfsmError("unsupported_runtime", f"{why}; run `make setup`, or use --runtime X")

    monkeypatch.setattr(llamacpp_lib, "load_lib", fail)


def test_cpu_flags_are_read_from_the_kernels_list(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(MODERN)
    assert {"avx2", "fma", "f16c"} <= llamacpp_lib.cpu_flags(str(info))
    assert llamacpp_lib.cpu_flags(str(tmp_path / "absent")) is None


def test_a_cpu_without_avx2_falls_back_to_transformers_with_the_reason(no_avx2):
    why = llamacpp_lib.unavailable_reason()
    assert why == "this CPU lacks AVX2, FMA, F16C, which the prebuilt llama.cpp library needs"
    assert resolve_runtime(None, None, "cpu") == "transformers"
    note = runtime_note("transformers", None, "cpu")
    assert note.startswith("llama.cpp unavailable (this CPU lacks AVX2") and "slower" in note
    with pytest.raises(CfsmError) as err:
        resolve_runtime("llamacpp", None, "cpu")
    assert err.value.kind == "unsupported_runtime" and "lacks AVX2" in err.value.message


def test_a_library_that_does_not_load_falls_back_with_the_loaders_words(unloadable):
    why = llamacpp_lib.unavailable_reason()
    assert why == f"the llama.cpp library does not load: {NO_GOMP}"
    assert resolve_runtime("auto", None, "cpu") == "transformers"
    assert "libgomp.so.1" in runtime_note("transformers", None, "cpu")


def test_a_platform_without_the_wheel_is_named(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    why = llamacpp_lib.unavailable_reason()
    assert why == "no llama.cpp build is installed for Linux aarch64"


def test_no_note_where_llamacpp_runs_or_was_never_the_choice():
    assert llamacpp_lib.unavailable_reason() is None  # this machine: it runs
    assert runtime_note("transformers", None, "cpu") == ""
    assert runtime_note("llamacpp", None, "cpu") == ""


def test_the_model_card_and_the_doctor_show_the_note(compile_engine):
    note = "llama.cpp unavailable (this CPU lacks AVX2): decoding on transformers, slower"
    card = model_card({"name": "m", "runtime": "transformers", "runtime_note": note})
    assert note in card
    assert note not in model_card({"name": "m", "runtime": "llamacpp", "runtime_note": ""})
    rep = {**compile_engine.diagnose(Constraint("regex", "(yes|no)"), samples=2)}
    assert "runtime_note" not in rep  # llama.cpp runs here: nothing to say
    rep["runtime_note"] = note
    assert note in doctor_md(rep) and f"NOTE: {note}" in format_report(rep)


def test_an_explicit_llamacpp_runtime_is_refused_with_exit_2(no_avx2, capsys):
    rc = main(["generate", "--regex", "(yes|no)", "--prompt", "Wet?", "--runtime", "llamacpp"])
    err = capsys.readouterr().err
    assert rc == 2 and "error (unsupported_runtime): this CPU lacks AVX2" in err
    rc = main(["check", "--regex", "a", "--text", "a", "--runtime", "llamacpp", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 2 and out["error"]["kind"] == "unsupported_runtime"


@pytest.mark.model
def test_generate_on_a_cpu_without_avx2_decodes_on_transformers_and_says_so(no_avx2, capsys):
    rc = main(["generate", "--regex", "(yes|no)", "--prompt", "Is water wet?", "--json"])
    tr = json.loads(capsys.readouterr().out)
    assert rc == 0 and tr["text"] in ("yes", "no") and tr["valid"]
    assert tr["model"]["runtime"] == "transformers"
    assert "lacks AVX2" in tr["model"]["runtime_note"]
    rc = main(["generate", "--regex", "(yes|no)", "--prompt", "Is water wet?"])
    err = capsys.readouterr().err
    assert rc == 0 and "NOTE: llama.cpp unavailable (this CPU lacks AVX2" in err


def test_the_llamacpp_dependency_is_only_asked_for_where_its_wheel_exists():
    """pyproject's marker: pip installs the project on aarch64 Linux and macOS without
    llama-cpp-py-sync (which would otherwise be built from source and fail the install)."""
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement

    py = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    deps = [Requirement(d) for d in py["project"]["dependencies"]]
    (llama,) = [d for d in deps if d.name == "llama-cpp-py-sync"]
    linux_x86 = {"platform_system": "Linux", "platform_machine": "x86_64"}
    assert llama.marker.evaluate(linux_x86)
    for env in (
        {"platform_system": "Linux", "platform_machine": "aarch64"},
        {"platform_system": "Darwin", "platform_machine": "arm64"},
        {"platform_system": "Windows", "platform_machine": "AMD64"},
    ):
        assert not llama.marker.evaluate(env), env
    assert all(d.marker is None for d in deps if d.name != "llama-cpp-py-sync")


@pytest.mark.model
def test_installed_without_the_llamacpp_package_the_cli_decodes_on_transformers(tmp_path):
    """As on a platform with no wheel: `llama_cpp_py_sync` cannot be imported (a package of
    that name that raises ImportError, first on the path). `cfsm generate` still decodes,
    on transformers, and says why."""
    import os
    import subprocess
    import sys

    shadow = tmp_path / "llama_cpp_py_sync"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('no module for this platform')\n")
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    cmd = [sys.executable, "-m", "cfsm", "generate", "--regex", "(yes|no)", "--prompt", "Wet?"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() in ("yes", "no")
    assert "NOTE: llama.cpp unavailable (the llama.cpp library does not load:" in r.stderr
