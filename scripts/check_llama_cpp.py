"""A saved SmolLM2-family folder (`make demo`'s out/smollm2-ru) through `vocabshift gguf` and llama.cpp itself, with
tests/test_llama_runtime.py's checks: 1,000 held-out Russian and 1,000 English lines tokenize as in transformers, and
greedy continuations (32 tokens from its 5 Russian prompts) on the f32 GGUF equal transformers' float32 ones.

    python scripts/check_llama_cpp.py out/smollm2-ru

Exits with an AssertionError naming the first lines that differ. Needs the `gguf` and `llama` extras (in `dev`).
"""

import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the checkout's vocabshift_testing and the test's checks
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import test_llama_runtime as runtime  # noqa: E402
from vocabshift.cli import main  # noqa: E402

folder = pathlib.Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
with tempfile.TemporaryDirectory() as work:
    gguf = pathlib.Path(work) / "model-f32.gguf"
    assert main(["gguf", str(folder), str(gguf), "--outtype", "f32"]) == 0
    runtime.check_tokenization(gguf, tokenizer, str(folder))
    prompts = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in runtime.PROMPTS]
    expected = runtime.transformers_greedy(model, prompts, tokenizer.eos_token_id)
    found = runtime.llama_cpp_greedy(gguf, prompts, tokenizer.eos_token_id)
    for prompt, want, got in zip(runtime.PROMPTS, expected, found):
        print(f"{prompt} | {tokenizer.decode(want)!r}" + ("" if got == want else f"\n  llama.cpp differs: {got}"))
    assert found == expected, "greedy continuations differ"
    print(f"{folder}: greedy continuations identical ({sum(map(len, found))} tokens)")
