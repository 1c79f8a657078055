"""Held-out bits per byte at step 0 (right after `extend_vocabulary`, no training) on SmolLM2-135M-Instruct with a
16k Russian BPE, per method and mode, next to the original model with its own tokenizer (the baseline).

    python benchmarks/bench_step0.py [--methods subword mean random] [--modes extend replace] [--lines 200]

Held-out lines: drawn at random (seed 0) from the shared corpora and excluded from tokenizer training.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from vocabshift.training import bits_per_byte
from vocabshift_testing.corpora import held_out_split, read_corpus, smollm2, target_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["subword", "mean", "random"])
    parser.add_argument("--modes", nargs="+", default=["extend", "replace"], choices=["extend", "replace"])
    parser.add_argument("--lines", type=int, default=200, help="held-out lines per language")
    args = parser.parse_args()
    torch.manual_seed(0)
    source = AutoTokenizer.from_pretrained(smollm2())
    russian = target_tokenizer(source, "ru", held_out=args.lines)
    base = AutoModelForCausalLM.from_pretrained(smollm2()).eval()
    ru = held_out_split(read_corpus("ru"), args.lines)[1]
    en = held_out_split(read_corpus("en"), args.lines)[1]
    original = {"ru": bits_per_byte(base, source, ru), "en": bits_per_byte(base, source, en)}
    print(f"| model | tokens/word (ru) | ru bits/byte | vs original | en bits/byte | vs original |\n|{'---|' * 6}")
    print(f"| original tokenizer | {vocabshift.tokens_per_word(source, ru):.3f} | {original['ru']:.4f} | 1.000 "
          f"| {original['en']:.4f} | 1.000 |")
    for mode in args.modes:
        for method in args.methods:
            model = copy.deepcopy(base)
            tokenizer = model.extend_vocabulary(russian, method=method, mode=mode, source_tokenizer=source)
            ru_bpb, en_bpb = bits_per_byte(model, tokenizer, ru), bits_per_byte(model, tokenizer, en)
            print(f"| {mode} `{method}` | {vocabshift.tokens_per_word(tokenizer, ru):.3f} | {ru_bpb:.4f} "
                  f"| {ru_bpb / original['ru']:.3f} | {en_bpb:.4f} | {en_bpb / original['en']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
