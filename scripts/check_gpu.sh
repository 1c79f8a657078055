#!/usr/bin/env bash
# The GPU check, offline, in minutes, with only a CUDA PyTorch image (torch, transformers, accelerate, peft) and this
# checkout (vocabshift installed from it with `pip install --no-deps -e .`, or read from src/): the device-marked tests
# (where pytest is installed), then scripts/gpu_check.py on one GPU and under accelerate FSDP2 (one process, started by
# torchrun). `--dry-run` runs the same on the CPU with tiny model bodies (CI runs that). PYTHON picks the interpreter
# (default: the checkout's .venv if there is one, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY="${PYTHON:-.venv/bin/python}"; else PY="${PYTHON:-python3}"; fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
dry=()
case "${1:-}" in
    --dry-run) dry=(--dry-run) ;;
    "") ;;
    *) echo "check_gpu.sh: unknown argument '$1'; run it without arguments on a GPU machine, or with --dry-run." >&2
       exit 2 ;;
esac
if [ ${#dry[@]} -eq 0 ]; then
    if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "check_gpu.sh: torch sees no cuda device here; run it on a GPU machine, or with --dry-run." >&2
        exit 1
    fi
    "$PY" -c "import torch; print(f'torch {torch.__version__}, {torch.cuda.get_device_name()}')"
    if "$PY" -c "import pytest" 2>/dev/null; then
        "$PY" -m pytest -q -p no:cacheprovider -m device tests/
    else
        echo "pytest is not installed: the device-marked tests were not run."
    fi
fi
"$PY" scripts/gpu_check.py "${dry[@]}"
"$PY" -m torch.distributed.run --standalone --nproc_per_node 1 scripts/gpu_check.py --fsdp "${dry[@]}"
