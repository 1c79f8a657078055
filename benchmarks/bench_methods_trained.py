"""Initialization methods judged after training: every method through the same embedding-only training.

SmolLM2-135M-Instruct + the 16k tokenizer of the target language (`wordvec_common.py`'s material: split, tokenizer,
token-level fastText, multilingual vectors, the Gemma-3-270M helper). Each method initializes the new rows, then
the same training runs: the probe's setting (4 sequences of up to 128 tokens per step, AdamW at a constant 1e-3, no
weight decay, rows="new"), next-token cross-entropy (the default objective of `vocabshift train` and of
`EmbeddingOnlyCallback` with a plain Trainer; `DistillationTrainer` with only the next-token weight), the same
packed training lines in the same order. Held-out bits per byte (200 lines never trained on) at step 0 and at each
checkpoint; `subword`, the default method, is the named baseline of every run.

    python benchmarks/bench_methods_trained.py [--language ru] [--mode extend] [--methods ...] [--steps 25 50 100]
                                               [--seeds 0]

Writes benchmarks/results/methods_trained_<language>_<mode>[_seeds<seeds>].md / .json / .png (the suffix unless
the seeds are just 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from bench_distill import Checkpoints
from bench_wordvec_init import VARIANTS
from transformers import AutoModelForCausalLM, TrainingArguments

import vocabshift
import wordvec_common as common
from smollm2_ru import machine_load
from vocabshift.training import DistillationWeights, bits_per_byte, pack_texts
from vocabshift.training.evaluation import eval_mode
from vocabshift.training.plots import plot_curves

RESULTS = Path(__file__).parent / "results"
DEFAULT_METHODS = ["subword", "mean", "focus", "salt", "ofa", "hyperofa"]
CROSS_ENTROPY = DistillationWeights.next_token_only()


class Material(dict):
    """The word-vector material, built (or read from the cache) on first use only."""

    def __init__(self, language: str, train: list[str], held: list[str], tokenizer) -> None:
        super().__init__()
        self.builders = {"token_vectors": lambda: common.token_vectors(train, tokenizer),
                         "multilingual": lambda: common.multilingual_vectors(train, held, language),
                         "gemma": lambda: common.gemma_helper(tokenizer)}

    def __missing__(self, key: str):
        self[key] = self.builders[key]()
        return self[key]


def run(name: str, seed: int, options, source, new, train, held, steps) -> dict:
    method, build = VARIANTS[name]
    model = AutoModelForCausalLM.from_pretrained(common.SMOLLM2, dtype="float32").eval()
    started = time.perf_counter()
    tokenizer = model.extend_vocabulary(new, method=method, mode=options.mode, source_tokenizer=source, seed=seed,
                                        **build(options.material))
    init_seconds = time.perf_counter() - started
    with eval_mode(model):
        start = bits_per_byte(model, tokenizer, held)
    print(f"{name} (seed {seed}): step 0 {start:.4f} bits/byte, init {init_seconds:.1f} s", flush=True)
    packed = [{"text": text} for text in pack_texts(train[::8], tokenizer, max_length=128)]
    checkpoints = Checkpoints(model, tokenizer, held, steps)
    with tempfile.TemporaryDirectory() as work:
        args = TrainingArguments(work, max_steps=max(steps), per_device_train_batch_size=4, learning_rate=1e-3,
                                 lr_scheduler_type="constant", weight_decay=0.0, logging_steps=25, save_strategy="no",
                                 report_to=[], seed=seed, disable_tqdm=True)
        vocabshift.DistillationTrainer(
            model=model, args=args, train_dataset=packed, processing_class=tokenizer, teacher_tokenizer=source,
            weights=CROSS_ENTROPY, callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new"), checkpoints]).train()
    return {"method": name, "seed": seed, "init_seconds": round(init_seconds, 1),
            "curve": [(0, start), *checkpoints.curve], "seconds_per_step": checkpoints.train_seconds / max(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--language", default="ru", choices=("ru", "de", "vi"))
    parser.add_argument("--mode", default="extend", choices=("extend", "replace"))
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, nargs="+", default=[25, 50, 100])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    options = parser.parse_args()
    torch.set_num_threads(2)
    load_before = machine_load()
    train, held = common.split(options.language)
    source, new = common.source_tokenizer(), common.target_tokenizer(train, options.language)
    options.material = Material(options.language, train, held, new)
    with eval_mode(original := AutoModelForCausalLM.from_pretrained(common.SMOLLM2, dtype="float32")):
        options.original = bits_per_byte(original, source, held)
    del original
    names = ["subword", *[m for m in options.methods if m != "subword"]]
    runs = [run(name, seed, options, source, new, train, held, options.steps) for seed in options.seeds
            for name in names]
    write(options, runs, load_before)


def write(options, runs: list[dict], load_before: str) -> None:
    seeds = "" if options.seeds == [0] else "_seeds" + "-".join(map(str, options.seeds))
    stem = RESULTS / f"methods_trained_{options.language}_{options.mode}{seeds}"
    steps = [step for step, _ in runs[0]["curve"]]
    lines = [f"# Methods after embedding-only training: SmolLM2-135M-Instruct, {options.language}, {options.mode} mode",
             "", "Held-out bits per byte (200 lines); next-token cross-entropy, 4 x 128 tokens per step, lr 1e-3, "
             "rows=\"new\". Mean over seeds " + ", ".join(map(str, options.seeds)) + " (min-max when several).", "",
             "| method | " + " | ".join(f"step {s}" for s in steps) + f" | vs subword at step {steps[-1]} | init s |",
             "|---|" + "---|" * (len(steps) + 2)]
    by_method: dict[str, list[dict]] = {}
    for r in runs:
        by_method.setdefault(r["method"], []).append(r)
    baseline = _mean([r["curve"][-1][1] for r in by_method["subword"]])
    for name, group in by_method.items():
        cells = [_cell([r["curve"][i][1] for r in group]) for i in range(len(steps))]
        last = _mean([r["curve"][-1][1] for r in group])
        init = _mean([r["init_seconds"] for r in group])
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {last - baseline:+.3f} | {init:.1f} |")
    lines += ["", f"Original model with its own tokenizer: {options.original:.4f} bits/byte.",
              f"Seconds per training step (scoring excluded), mean over runs: "
                  f"{_mean([r['seconds_per_step'] for r in runs]):.2f}.",
              f"Machine: before {load_before}; after {machine_load()}.",
              "Command: `python benchmarks/bench_methods_trained.py --language {} --mode {} --methods {} --steps {} "
              "--seeds {}`".format(options.language, options.mode, " ".join(f"'{m}'" if " " in m else m
                                                                           for m in by_method),
                                    " ".join(map(str, options.steps)), " ".join(map(str, options.seeds)))]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    curves = {f"{r['method']} (seed {r['seed']})": r["curve"] for r in runs}
    plot_curves(curves, stem.with_suffix(".png"), reference=("original model, own tokenizer", options.original),
                title=f"Methods after embedding-only training, {options.language}, {options.mode}")
    print("\n".join(lines))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _cell(values: list[float]) -> str:
    return f"{_mean(values):.3f}" + (f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else "")


if __name__ == "__main__":
    main()
