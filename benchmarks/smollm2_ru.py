"""Shared material of the SmolLM2 + Russian benchmarks: the model, its tokenizer, a 16k Russian tokenizer, text.

The Russian tokenizer is trained once with `vocabshift.train_tokenizer(..., like=smollm2, vocab_size=16000)` on the
shared Russian corpus minus the held-out lines, and cached under ~/.cache/vocabshift/tokenizers/.
"""

from __future__ import annotations

import lzma
import os
import time
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

import vocabshift

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VOCABSHIFT_SHARED", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift"))
SMOLLM2 = CACHE / "SmolLM2-135M-Instruct"
HELD_OUT = range(40000, 40200)  # the same 200 lines as the tests' `ru_held` fixture
VOCAB_SIZE = 16000


def russian_lines() -> tuple[list[str], list[str]]:
    """(training lines, held-out lines) of the shared Russian corpus; held-out lines are never trained on."""
    with lzma.open(SHARED / "data" / "mono" / "ru.txt.xz", "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    held = set(HELD_OUT)
    return [line for i, line in enumerate(lines) if i not in held], [lines[i] for i in HELD_OUT]


def load_smollm2() -> tuple[object, object]:
    """SmolLM2-135M-Instruct (float32, eval mode) and its tokenizer."""
    model = AutoModelForCausalLM.from_pretrained(SMOLLM2, dtype="float32").eval()
    return model, AutoTokenizer.from_pretrained(SMOLLM2)


def russian_tokenizer(like, train_lines: list[str]) -> PreTrainedTokenizerFast:
    """The 16k Russian tokenizer in SmolLM2's family, trained once and cached."""
    folder = CACHE / "tokenizers" / f"ru-{VOCAB_SIZE}-like-smollm2-heldout-{HELD_OUT.start}-{HELD_OUT.stop}"
    if not (folder / "tokenizer.json").exists():
        start = time.perf_counter()
        tokenizer = vocabshift.train_tokenizer(train_lines, like=like, vocab_size=VOCAB_SIZE)
        partial = folder.with_name(folder.name + ".partial")
        tokenizer.save_pretrained(partial)
        partial.rename(folder)
        print(f"trained the {VOCAB_SIZE} Russian tokenizer in {time.perf_counter() - start:.0f} s -> {folder}")
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


def machine_load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"
