"""Make llama-cpp-py-sync's prebuilt libraries load on a glibc older than 2.38.

The wheel is built on a newer Linux and its libraries ask for four C23 functions
(`__isoc23_strtol` and kin) at version GLIBC_2.38, which Debian 12's glibc 2.36 lacks, so
the import fails. Building llama.cpp from source instead takes about 15 minutes on 2 cores.
This script, run by scripts/setup.sh, does three things to each library that asks for a
missing version, and nothing when the library already loads:

1. builds scripts/c23_compat.c (the four functions, forwarding to their C99 twins) next to
   the libraries and adds it as a needed library (patchelf);
2. clears the version of those symbols (patchelf), so any library may define them;
3. marks the missing version requirement weak (one flag in the ELF's version-needs table),
   so the loader does not refuse the library for it.

Idempotent; exit code 0 when the bindings load afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

SHIM = "libcfsm_c23.so"
SHT_GNU_VERNEED = 0x6FFFFFFE
VER_FLG_WEAK = 0x2


def loads() -> str | None:
    """None when the bindings load in a fresh interpreter, else the error's first line."""
    code = "from llama_cpp_py_sync._cffi_bindings import get_lib; get_lib()"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode == 0:
        return None
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    return lines[-1] if lines else f"exit code {r.returncode}"


def glibc_version() -> tuple[int, int]:
    major, minor = os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2]
    return int(major), int(minor)


def missing_versions(lib: Path, have: tuple[int, int]) -> dict[str, list[str]]:
    """GLIBC_x.y versions newer than `have` that `lib` needs, with the symbols at each."""
    out = subprocess.run(["objdump", "-T", str(lib)], capture_output=True, text=True).stdout
    need: dict[str, list[str]] = {}
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            p = p.strip("()")
            if p.startswith("GLIBC_2."):
                ver = tuple(int(x) for x in p[len("GLIBC_") :].split(".")[:2])
                if ver > have and "*UND*" in line:
                    need.setdefault(p, []).append(parts[-1])
    return need


def weaken(lib: Path, versions: set[str]) -> int:
    """Set VER_FLG_WEAK on the version-needs entries named in `versions`."""
    data = bytearray(lib.read_bytes())
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise SystemExit(f"{lib}: not a 64-bit ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    changed = 0
    for _, typ, _, _, off, _, link, info, _, _ in secs:
        if typ != SHT_GNU_VERNEED:
            continue
        strtab = secs[link][4]
        pos = off
        for _ in range(info):
            _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, pos)
            apos = pos + aux
            for _ in range(cnt):
                _, flags, _, name, anext = struct.unpack_from("<IHHII", data, apos)
                end = data.index(0, strtab + name)
                if data[strtab + name : end].decode() in versions:
                    struct.pack_into("<H", data, apos + 4, flags | VER_FLG_WEAK)
                    changed += 1
                apos += anext
            if not nxt:
                break
            pos += nxt
    lib.write_bytes(bytes(data))
    return changed


def patch(pkg: Path) -> None:
    have = glibc_version()
    patchelf = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")
    src = Path(__file__).with_name("c23_compat.c")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(pkg / SHIM), str(src)], check=True)
    for lib in sorted(pkg.glob("lib*.so*")):
        if lib.is_symlink() or lib.name == SHIM:
            continue
        need = missing_versions(lib, have)
        if not need:
            continue
        for sym in sorted({s for syms in need.values() for s in syms}):
            subprocess.run([patchelf, "--clear-symbol-version", sym, str(lib)], check=True)
        needed = subprocess.run(
            [patchelf, "--print-needed", str(lib)], capture_output=True, text=True
        ).stdout
        if SHIM not in needed.split():
            subprocess.run([patchelf, "--add-needed", SHIM, str(lib)], check=True)
        weaken(lib, set(need))
        print(f"llama_glibc_compat: {lib.name}: {', '.join(sorted(need))} made optional")


def main() -> int:
    why = loads()
    if why is None:
        return 0
    spec = importlib.util.find_spec("llama_cpp_py_sync")
    if spec is None or not spec.origin:
        print("llama_glibc_compat: llama-cpp-py-sync is not installed", file=sys.stderr)
        return 1
    if "GLIBC_" not in why:
        print(f"llama_glibc_compat: the bindings fail for another reason: {why}", file=sys.stderr)
        return 1
    patch(Path(spec.origin).parent)
    why = loads()
    if why is not None:
        print(f"llama_glibc_compat: still failing: {why}", file=sys.stderr)
        return 1
    print("llama_glibc_compat: the llama.cpp bindings load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
