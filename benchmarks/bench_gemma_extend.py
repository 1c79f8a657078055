"""Gemma-3-270M (262k vocabulary) + a 16k Russian tokenizer: `extend_vocabulary` against transformers'
`add_tokens` + `resize_token_embeddings` on the same tokens, in one run.

The baseline adds the tokens `extend_vocabulary` added, as AddedTokens (`tokenizer.add_tokens`), and resizes the
embeddings with transformers' default mean resizing: the usual recipe. It does strictly less work (no merge table,
no alignment, no initialization method), and AddedTokens are matched in raw text before the tokenizer's model, so
the table also reports how each result cuts English (1,000 lines of the repository's English sample) and Russian.

    python benchmarks/bench_gemma_extend.py [--method subword]

Writes benchmarks/results/gemma_extend.md.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from smollm2_ru import HELD_OUT, machine_load
from vocabshift_testing.corpora import gemma3, held_out_split, read_corpus, read_sample, target_tokenizer

RESULT = Path(__file__).parent / "results" / "gemma_extend.md"


def changed_lines(before, after, texts) -> int:
    return sum(a != b for a, b in zip(before(texts, add_special_tokens=False)["input_ids"],
                                      after(texts, add_special_tokens=False)["input_ids"]))


def timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def against_add_tokens(load_model, source, new, method, load_tokenizer):
    """`extend_vocabulary` on a model from `load_model()`, then, on a fresh model and tokenizer, transformers'
    `add_tokens` + `resize_token_embeddings` of the tokens it added: (extended tokenizer, the baseline's tokenizer,
    the tokens added, the seconds of each)."""
    model = load_model()
    extended, ours = timed(functools.partial(model.extend_vocabulary, new, method=method, source_tokenizer=source))
    added = extended.convert_ids_to_tokens(vocabshift.get_record(model).new_ids)
    texts = [extended.convert_tokens_to_string([token]) for token in added]
    del model
    baseline, plain = load_model(), load_tokenizer()

    def add_and_resize():
        plain.add_tokens(texts)
        baseline.resize_token_embeddings(len(plain))

    return extended, plain, added, ours, timed(add_and_resize)[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="subword")
    options = parser.parse_args()
    torch.set_num_threads(2)
    load_before = machine_load()
    source = AutoTokenizer.from_pretrained(gemma3())
    russian = target_tokenizer(source, "ru", vocab_size=16000, held_out=HELD_OUT)
    english = list(read_sample("en")[3000:4000])
    ru_held = held_out_split(read_corpus("ru"), HELD_OUT)[1]

    extended, plain, added, ours, theirs = against_add_tokens(
        lambda: AutoModelForCausalLM.from_pretrained(gemma3(), dtype=torch.float32), source, russian, options.method,
        lambda: AutoTokenizer.from_pretrained(gemma3()))
    rows = [
        ("seconds (2 cores)", f"{ours:.1f}", f"{theirs:.1f}", f"{ours / theirs:.2f}x"),
        ("tokens added", f"{len(added):,}", f"{len(plain) - len(source):,}", ""),
        ("English lines cut differently (of 1,000)", str(changed_lines(source, extended, english)),
         str(changed_lines(source, plain, english)), ""),
        ("Russian tokens per word (200 held-out lines)", f"{vocabshift.tokens_per_word(extended, ru_held):.3f}",
         f"{vocabshift.tokens_per_word(plain, ru_held):.3f}",
         f"(original {vocabshift.tokens_per_word(source, ru_held):.3f})"),
    ]
    lines = [f"# Gemma-3-270M: extend_vocabulary ({options.method}) vs add_tokens + resize_token_embeddings", "",
             "| | vocabshift extend_vocabulary | transformers add_tokens + resize | ratio |", "|---|---|---|---|"]
    lines += [f"| {name} | {a} | {b} | {c} |" for name, a, b, c in rows]
    lines += ["", f"Machine: before {load_before}; after {machine_load()}.",
              f"Command: `python benchmarks/bench_gemma_extend.py --method {options.method}`"]
    RESULT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
