"""Shared material of the SmolLM2 + Russian benchmarks, on top of `vocabshift_testing.corpora`: the model, its
tokenizer, the cached 16k Russian tokenizer and the held-out split every benchmark and integration test uses
(200 lines drawn at random with seed 0, never trained on)."""

from __future__ import annotations

import os

from transformers import AutoModelForCausalLM, AutoTokenizer

from vocabshift_testing.corpora import held_out_split, read_corpus, smollm2, target_tokenizer

HELD_OUT = 200


def russian_lines() -> tuple[list[str], list[str]]:
    """(training lines, held-out lines) of the shared Russian corpus; held-out lines are never trained on."""
    return held_out_split(read_corpus("ru"), HELD_OUT)


def load_smollm2() -> tuple[object, object]:
    """SmolLM2-135M-Instruct (float32, eval mode) and its tokenizer."""
    model = AutoModelForCausalLM.from_pretrained(smollm2(), dtype="float32").eval()
    return model, AutoTokenizer.from_pretrained(smollm2())


def russian_tokenizer(like) -> object:
    """The 16k Russian tokenizer in SmolLM2's family, trained once (on the training lines) and cached."""
    return target_tokenizer(like, "ru", vocab_size=16000, held_out=HELD_OUT)


def machine_load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"
