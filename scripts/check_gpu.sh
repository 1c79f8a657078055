#!/usr/bin/env bash
# On a machine with a GPU (cuda, or mps on Apple silicon): the device-marked tests, then a short SmolLM2 extend +
# embedding-only train on that device (scripts/gpu_smoke.py). Offline: SmolLM2 and the corpora must be cached
# (scripts/get_smollm2.sh). PYTHON picks the interpreter (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
device=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else '')")
if [ -z "$device" ]; then
    echo "check_gpu.sh: neither cuda nor mps is available here; run it on a machine with a GPU." >&2
    exit 1
fi
"$PY" -m pytest -q -m device tests/
"$PY" scripts/gpu_smoke.py --device "$device"
