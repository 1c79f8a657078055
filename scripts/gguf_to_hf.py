"""Convert a GGUF file into a plain Hugging Face folder (config.json, model.safetensors, tokenizer files), float32.

    python scripts/gguf_to_hf.py FOLDER GGUF_NAME OUTDIR

The quantized weights are dequantized into a model built from the GGUF's config, so that the folder loads without
gguf. transformers rebuilds the tokenizer from the GGUF without the pre-tokenizer steps that llama.cpp keeps only as
a name (`tokenizer.ggml.pre`); for `smollm` the published tokenizer's step that splits digits one by one is put back
in front, so that the folder tokenizes as SmolLM2 and llama.cpp do. Written to a temporary sibling folder, then
renamed. Used by get_smollm2.sh and get_gemma3.sh.
"""

import json
import os
import pathlib
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
import torch  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def restore_digits(tokenizer_json: pathlib.Path, gguf_path: pathlib.Path) -> None:
    """Put SmolLM2's `Digits(individual_digits=True)` step back in front of its byte-level pre-tokenizer."""
    field = GGUFReader(gguf_path).get_field("tokenizer.ggml.pre")
    if field is None or field.contents() != "smollm":
        return
    state = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    assert state["pre_tokenizer"]["type"] == "ByteLevel", state["pre_tokenizer"]
    digits = {"type": "Digits", "individual_digits": True}
    state["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [digits, state["pre_tokenizer"]]}
    tokenizer_json.write_text(json.dumps(state, ensure_ascii=False, indent=2), encoding="utf-8")


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
restore_digits(temporary / "tokenizer.json", folder / name)
model.save_pretrained(temporary)
temporary.rename(out)
print(f"wrote {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)")
