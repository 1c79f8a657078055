"""lm-evaluation-harness on the adapted SmolLM2 folder: `lm_eval --model hf` with a local task (no hub) gives the bits
per byte of `vocabshift.evaluate` on the same held-out Russian and English text, to rounding.

How each scores text, and the settings that make them score the same tokens:
- `evaluate` scores each line as its own document: bos, then the line's tokens (without special tokens), in windows
  of `context_length` tokens (512) that each start with bos when a line is longer; it divides by the UTF-8 bytes of
  the lines.
- lm-eval's `loglikelihood_rolling` scores each document on its own: the prefix token (bos) and then windows rolled
  over the document that each read `max_length` positions; `bits_per_byte` divides by the UTF-8 bytes of the
  documents.
So each held-out line is one document (lm-eval's usual layout); `max_length=511` gives the same windows (a window of
512 tokens, bos included, reads 511 positions: its last token is only predicted); `add_bos_token=False` tokenizes
without special tokens as `evaluate` does (a tokenizer that adds bos itself, as Llama-2's and Gemma's do, would
otherwise score a second one). What is left: on a line longer than a window, lm-eval starts each window after the
first from the token before it instead of bos, and fills its last window up with earlier tokens as context. The
lines scored here each fit in a window, so the two must agree to rounding."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from vocabshift_testing.corpora import held_out_split, read_corpus, smollm2, target_tokenizer

pytestmark = pytest.mark.integration
lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install -e '.[lmeval]'")
lm_eval_tasks = pytest.importorskip("lm_eval.tasks")

WINDOW = 512  # evaluate's default context_length: lm-eval's max_length is one less (the positions a window reads)
MODEL_ARGS = f"max_length={WINDOW - 1},add_bos_token=False"
LANGUAGES = ("ru", "en")


@pytest.fixture(scope="module")
def adapted_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct extended with the cached 16k Russian tokenizer (`subword`, before any training), saved."""
    source = AutoTokenizer.from_pretrained(smollm2())
    model = AutoModelForCausalLM.from_pretrained(smollm2()).eval()
    tokenizer = model.extend_vocabulary(target_tokenizer(source, "ru"), method="subword", source_tokenizer=source)
    return vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path_factory.mktemp("lm_eval") / "smollm2-ru")


def write_task(directory: Path, name: str, lines: list[str]) -> None:
    """The lm-eval task `name` in `directory`: one document per line of `lines` (as `evaluate` scores them), in a
    JSON-lines file next to it; the datasets cache stays in `directory`."""
    data = directory / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"text": line}, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    task = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(directory / "datasets")},
        "test_split": "test",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": metric} for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte")],
        "metadata": {"version": 1.0},
    }
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(task, sort_keys=False), encoding="utf-8")


def test_lm_eval_bits_per_byte_agree_with_evaluate(adapted_dir, tmp_path):
    # the last 100 of the 200 lines per language that the Russian tokenizer never saw (each fits in a window)
    lines = {language: held_out_split(read_corpus(language), 200)[1][100:] for language in LANGUAGES}
    for language, texts in lines.items():
        write_task(tmp_path, f"vocabshift_{language}", texts)
    tasks = [f"vocabshift_{language}" for language in LANGUAGES]
    # what `lm_eval --model hf --model_args pretrained=DIR,max_length=511,add_bos_token=False --include_path TASKS
    # --tasks vocabshift_ru,vocabshift_en --batch_size 4 --device cpu` runs
    results = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={adapted_dir},{MODEL_ARGS}", tasks=tasks, batch_size=4, device="cpu",
        task_manager=lm_eval_tasks.TaskManager(include_path=str(tmp_path)),
    )["results"]
    model = AutoModelForCausalLM.from_pretrained(adapted_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(adapted_dir)
    figures = {}
    for language, texts in lines.items():
        ours = vocabshift.evaluate(model, tokenizer, texts, context_length=WINDOW).scores[0].bits_per_byte
        theirs = results[f"vocabshift_{language}"]
        figures[language] = (ours, theirs["bits_per_byte,none"], theirs["byte_perplexity,none"])
        print(f"\n{language}: vocabshift.evaluate {ours:.4f} bits per byte, lm-eval {figures[language][1]:.4f} "
              f"({figures[language][1] / ours - 1:+.2%}), lm-eval word perplexity {theirs['word_perplexity,none']:.1f}")
    for ours, theirs, byte_perplexity in figures.values():
        assert 0.5 < ours < 3 and math.isfinite(theirs)
        assert abs(theirs / ours - 1) < 1e-3
        assert byte_perplexity == pytest.approx(2**theirs)
