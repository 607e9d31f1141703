"""llama.cpp's library: loading it (its log kept out of stderr, the last lines kept for
error messages), and whether it can run here at all (platform, CPU instructions, the
library loading), checked before any decode so that a machine it cannot serve falls back."""

from __future__ import annotations

import platform

from ..errors import CfsmError
from ..internals import llama_lib_and_ffi
from ..lazy import lazy_module

llama_cpp = lazy_module("llama_cpp_py_sync")

LOG: list[str] = []  # llama.cpp's last log lines, for error messages
_HOOKS: dict = {}  # the log callback, kept alive for as long as the library


def bindings_version() -> str:
    try:
        return f"{llama_cpp.__version__} (llama.cpp {llama_cpp.__llama_cpp_tag__})"
    except Exception:  # noqa: BLE001
        return "unavailable"


# what llama-cpp-py-sync's prebuilt CPU library is compiled for, with no runtime dispatch:
# on a CPU without one of these the first decode dies with SIGILL (an illegal instruction)
CPU_FLAGS = ("avx2", "fma", "f16c")
PLATFORMS = (("Linux", "x86_64"),)  # where the wheel exists (pyproject.toml's marker)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags as the kernel reports them; None where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return set()


def unavailable_reason(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """Why the llama.cpp runtime cannot run here (checked before any decode, so a machine
    it cannot serve falls back instead of crashing), or None when it can: the platform has
    the wheel, the CPU has the instructions the library uses, and the library loads."""

    where = (platform.system(), platform.machine())
    if where not in PLATFORMS:
        return f"no llama.cpp build is installed for {where[0]} {where[1]}"
    flags = cpu_flags(cpuinfo)
    missing = [f.upper() for f in CPU_FLAGS if flags is not None and f not in flags]
    if missing:
        return f"this CPU lacks {', '.join(missing)}, which the prebuilt llama.cpp library needs"
    try:
        load_lib()
    except CfsmError as exc:
        return exc.message.split("; run `make setup`", 1)[0]
    return None


def available() -> bool:
    """Whether the llama.cpp runtime can run here (see `unavailable_reason`)."""
    return unavailable_reason() is None


def load_lib():
    """(lib, ffi), with llama.cpp's log kept out of stderr (the last lines are kept)."""
    if "lib" in _HOOKS:
        return _HOOKS["lib"], _HOOKS["ffi"]
    try:
        lib, ffi = llama_lib_and_ffi()
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise CfsmError(
            "unsupported_runtime",
            f"the llama.cpp library does not load: {first}; run `make setup`, or use "
            "--runtime transformers",
        ) from exc

    @ffi.callback("void(enum ggml_log_level, const char *, void *)")
    def _log(level, text, _data):  # pragma: no cover - called from C
        LOG.append(ffi.string(text).decode("utf-8", "replace"))
        del LOG[:-20]

    lib.llama_log_set(_log, ffi.NULL)
    lib.llama_backend_init()
    _HOOKS.update(lib=lib, ffi=ffi, log=_log)
    return lib, ffi
