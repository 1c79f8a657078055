"""Convert a GGUF file into a plain Hugging Face folder (config.json, model.safetensors, tokenizer files), float32.

    python scripts/gguf_to_hf.py FOLDER GGUF_NAME OUTDIR

The quantized weights are dequantized into a model built from the GGUF's config, so that the folder loads without
gguf. Written to a temporary sibling folder, then renamed. Used by get_smollm2.sh and get_gemma3.sh.
"""

import os
import pathlib
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

folder, name, out = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
config = quantized.config
if hasattr(config, "quantization_config"):
    delattr(config, "quantization_config")
model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
assert not unexpected, unexpected
model.tie_weights()
model.generation_config = quantized.generation_config
temporary = pathlib.Path(tempfile.mkdtemp(dir=out.parent if out.parent.exists() else None))
tokenizer.save_pretrained(temporary)
model.save_pretrained(temporary)
temporary.rename(out)
print(f"wrote {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)")
