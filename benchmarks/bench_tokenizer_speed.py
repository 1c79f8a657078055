"""Tokenization speed: SmolLM2's tokenizer vs the same tokenizer merged with a 16k Russian BPE (vocabshift) vs the
same tokens added as AddedTokens (`tokenizer.add_tokens`, what Unsloth / LlamaFactory do), on 1 MB of text.

    python benchmarks/bench_tokenizer_speed.py

Prints, per tokenizer, the time to tokenize the text (MB/s) and tokens per second, each as a ratio to the
original tokenizer (best of 7 interleaved runs, one thread). Where the merged tokenizer cuts Russian into 3x fewer
tokens, tokens per second understates it: MB/s is what a user waits for.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import AutoTokenizer  # noqa: E402

from vocabshift import merge_tokenizers  # noqa: E402
from vocabshift_testing.corpora import held_out_split, read_corpus, smollm2, target_tokenizer  # noqa: E402

MEGABYTE = 1_000_000


def first_megabyte(language: str) -> list[str]:
    lines, size = [], 0
    for line in held_out_split(read_corpus(language), 200)[0]:
        lines.append(line)
        size += len(line.encode())
        if size >= MEGABYTE:
            return lines
    return lines


def best_time(tokenizers: list, lines: list[str], repeats: int = 7) -> list[float]:
    """Best wall time of each tokenizer over `repeats` interleaved runs (interleaving spreads machine noise)."""
    best = [float("inf")] * len(tokenizers)
    for _ in range(repeats):
        for index, tokenizer in enumerate(tokenizers):
            start = time.perf_counter()
            tokenizer.backend_tokenizer.encode_batch(lines, add_special_tokens=False)
            best[index] = min(best[index], time.perf_counter() - start)
    return best


def main() -> None:
    source = AutoTokenizer.from_pretrained(smollm2())
    merged, report = merge_tokenizers(source, target_tokenizer(source, "ru"))
    added = AutoTokenizer.from_pretrained(smollm2())
    added.add_tokens([merged.convert_tokens_to_string([t]) for t in merged.convert_ids_to_tokens(
        list(range(len(source), len(merged))))])
    named = [("SmolLM2 original", source), (f"vocabshift merged (+{report.tokens_added} in the BPE model)", merged),
             (f"add_tokens (+{len(added) - len(source)} AddedTokens)", added)]
    rows = ["| text (1 MB) | tokenizer | tokens | MB/s | vs original | tokens/s | vs original |",
            "|---|---|---|---|---|---|---|"]
    for language in ("ru", "en"):
        lines = first_megabyte(language)
        size = sum(len(line.encode()) for line in lines) / MEGABYTE
        times = best_time([tokenizer for _, tokenizer in named], lines)
        counts = [sum(map(len, t(lines, add_special_tokens=False)["input_ids"])) for _, t in named]
        for (name, _), seconds, count in zip(named, times, counts):
            rows.append(
                f"| {language} | {name} | {count:,} | {size / seconds:.2f} | {times[0] / seconds:.2f}x "
                f"| {count / seconds:,.0f} | {count / seconds / (counts[0] / times[0]):.2f}x |"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
