"""A new tokenizer of more than 100k tokens (Gemma-3's 262k) into SmolLM2 and into Llama-3: `extend_vocabulary`
against transformers' `add_tokens` + `resize_token_embeddings` on the same tokens, in one run.

Gemma-3's tokenizer is SentencePiece-style BPE, SmolLM2's and Llama-3's byte-level BPE: the cross-family merge a
user may try by mistake or on purpose. Every step of extend must stay near-linear in the vocabulary (a quadratic
step made this case hang). SmolLM2 is the real model; Llama-3 is its real tokenizer on a model built from config
at Llama-3's vocabulary with a small hidden size (the vocabulary work does not depend on the body). The baseline
adds the same tokens as AddedTokens and resizes with transformers' default mean resizing; it does strictly less
(no merge table, no alignment, no initialization method).

    python benchmarks/bench_large_extend.py [--method subword]

Writes benchmarks/results/large_extend.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from bench_gemma_extend import against_add_tokens
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from smollm2_ru import machine_load
from vocabshift_testing.corpora import smollm2
from vocabshift_testing.real_tokenizers import real_tokenizer_dir

RESULT = Path(__file__).parent / "results" / "large_extend.md"


def llama3_model(tokenizer) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


TARGETS = {
    "SmolLM2-135M": (lambda: AutoTokenizer.from_pretrained(smollm2()),
                     lambda tokenizer: AutoModelForCausalLM.from_pretrained(smollm2(), dtype=torch.float32)),
    "Llama-3 (tokenizer; model from config)": (lambda: AutoTokenizer.from_pretrained(real_tokenizer_dir("llama3")),
                                               llama3_model),
}


def measure(name: str, new, method: str) -> tuple[str, ...]:
    load_tokenizer, load_model = TARGETS[name]
    source = load_tokenizer()
    _, _, added, ours, theirs = against_add_tokens(lambda: load_model(source), source, new, method, load_tokenizer)
    return name, f"{len(source):,}", f"{len(added):,}", f"{ours:.1f}", f"{theirs:.1f}", f"{ours / theirs:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="subword")
    options = parser.parse_args()
    torch.set_num_threads(2)
    load_before = machine_load()
    new = AutoTokenizer.from_pretrained(real_tokenizer_dir("gemma3"))
    rows = [measure(name, new, options.method) for name in TARGETS]
    lines = [f"# Gemma-3's tokenizer ({len(new):,} tokens) into other models: extend_vocabulary ({options.method}) "
             "against add_tokens + resize_token_embeddings", "",
             "| model | its tokens | tokens added | extend_vocabulary (s) | add_tokens + resize (s) | ratio |",
             "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", f"Machine (2 cores): before {load_before}; after {machine_load()}.",
              f"Command: `python benchmarks/bench_large_extend.py --method {options.method}`"]
    RESULT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
