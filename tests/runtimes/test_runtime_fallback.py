"""Never a crash, never silently slower: where the prebuilt llama.cpp library cannot run
(a CPU without AVX2, a library that does not load, a platform with no wheel), `auto`
decodes on transformers and says why (CLI summary, model card, doctor), and an explicit
`--runtime llamacpp` is refused with the reason (exit 2, `unsupported_runtime`)."""

from __future__ import annotations

import json

import pytest

from cfsm.cli import main
from engine.analysis.doctor import format_report
from engine.constraint import Constraint
from engine.decoding.model import resolve_runtime, runtime_note
from engine.errors import CfsmError
from engine.runtimes import llamacpp_runner
from viz.summaries import doctor_md, model_card

INTEL_OLD = "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx\n"
NO_GOMP = "libgomp.so.1: cannot open shared object file"
MODERN = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c bmi2\n"


@pytest.fixture
def no_avx2(tmp_path, monkeypatch):
    """This machine as one whose CPU reports no AVX2, FMA or F16C."""
    info = tmp_path / "cpuinfo"
    info.write_text(INTEL_OLD)
    real = llamacpp_runner.cpu_flags
    monkeypatch.setattr(llamacpp_runner, "cpu_flags", lambda cpuinfo=None: real(str(info)))


@pytest.fixture
def unloadable(monkeypatch):
    """The bindings fail to load as they do without libgomp1 (or on a glibc older than the
    library's): `_lib` raises what it raises then."""
    why = f"the llama.cpp library does not load: {NO_GOMP}"

    def fail():
        raise CfsmError("unsupported_runtime", f"{why}; run `make setup`, or use --runtime X")

    monkeypatch.setattr(llamacpp_runner, "_lib", fail)


def test_cpu_flags_are_read_from_the_kernels_list(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(MODERN)
    assert {"avx2", "fma", "f16c"} <= llamacpp_runner.cpu_flags(str(info))
    assert llamacpp_runner.cpu_flags(str(tmp_path / "absent")) is None


def test_a_cpu_without_avx2_falls_back_to_transformers_with_the_reason(no_avx2):
    why = llamacpp_runner.unavailable_reason()
    assert why == "this CPU lacks AVX2, FMA, F16C, which the prebuilt llama.cpp library needs"
    assert resolve_runtime(None, None, "cpu") == "transformers"
    note = runtime_note("transformers", None, "cpu")
    assert note.startswith("llama.cpp unavailable (this CPU lacks AVX2") and "slower" in note
    with pytest.raises(CfsmError) as err:
        resolve_runtime("llamacpp", None, "cpu")
    assert err.value.kind == "unsupported_runtime" and "lacks AVX2" in err.value.message


def test_a_library_that_does_not_load_falls_back_with_the_loaders_words(unloadable):
    why = llamacpp_runner.unavailable_reason()
    assert why == f"the llama.cpp library does not load: {NO_GOMP}"
    assert resolve_runtime("auto", None, "cpu") == "transformers"
    assert "libgomp.so.1" in runtime_note("transformers", None, "cpu")


def test_a_platform_without_the_wheel_is_named(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    why = llamacpp_runner.unavailable_reason()
    assert why == "no llama.cpp build is installed for Linux aarch64"


def test_no_note_where_llamacpp_runs_or_was_never_the_choice():
    assert llamacpp_runner.unavailable_reason() is None  # this machine: it runs
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
