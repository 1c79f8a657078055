"""Distillation against cross-entropy for embedding-only training of the new rows, on identical batches.

SmolLM2-135M-Instruct + a 16k tokenizer of the target language (the probe's setting: 4 sequences of up to 128
tokens per step, AdamW at a constant learning rate (1e-3 unless --learning-rate), no weight decay, rows="new",
200 held-out lines never trained on). Both objectives run through `vocabshift.DistillationTrainer` with the same
collator, order and seed: cross-entropy is the trainer with only the next-token weight (its teacher never runs),
distillation the trainer's default weights (its teacher runs every step), once per `--teacher-shares` value (the
share of each batch's sequences the teacher reads; `--teacher-dtype bfloat16` runs the teacher in bfloat16, the
student staying in float32). Held-out bits per byte after each checkpoint step, and seconds per training step
(scoring excluded), so that the comparison holds at equal steps and at equal wall time: `--baseline-steps` lets
cross-entropy run longer (its steps are cheaper), and the table gives cross-entropy's bits per byte interpolated at
each distillation checkpoint's training seconds.

    python benchmarks/bench_distill.py [--language ru] [--mode extend] [--steps 25 50 100 200]
                                       [--baseline-steps ...] [--teacher-shares 1 0.25] [--learning-rate 1e-3]
                                       [--teacher-dtype bfloat16] [--suffix _long]

Writes benchmarks/results/distill_<language>_<mode>[_lr<rate>][<suffix>].md / .json / .png.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import TrainerCallback, TrainingArguments

import vocabshift
from smollm2_ru import HELD_OUT, load_smollm2, machine_load
from vocabshift.training import DistillationWeights, bits_per_byte, pack_texts
from vocabshift.training.evaluation import eval_mode
from vocabshift.training.plots import plot_curves
from vocabshift_testing.corpora import held_out_split, read_corpus, target_tokenizer

RESULTS = Path(__file__).parent / "results"
CROSS_ENTROPY = DistillationWeights.next_token_only()


class Checkpoints(TrainerCallback):
    """Scores held-out bits per byte at the given steps and keeps the training time apart from scoring time.

    A step's seconds run from the end of the one before (or the start of training) to its own end: the batch's
    collation (the Trainer fetches it before `on_step_begin`) counts, scoring does not."""

    def __init__(self, model, tokenizer, held_out, steps):
        self.model, self.tokenizer, self.held_out, self.steps = model, tokenizer, held_out, set(steps)
        self.curve, self.elapsed, self.train_seconds, self._start = [], [], 0.0, None

    def on_train_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.train_seconds += time.perf_counter() - self._start
        self._after_step(state)
        self._start = time.perf_counter()

    def _after_step(self, state):
        if state.global_step in self.steps:
            with eval_mode(self.model):
                self.curve.append((state.global_step, bits_per_byte(self.model, self.tokenizer, self.held_out)))
                self.elapsed.append((state.global_step, self.train_seconds))
            self.model.train()
            print(f"  step {state.global_step}: {self.curve[-1][1]:.4f} bits/byte, "
                  f"{self.train_seconds / state.global_step:.2f} s/step", flush=True)


def run(base, source, new, texts, held_out, weights, mode, steps, rate, teacher_dtype=None) -> dict:
    model = copy.deepcopy(base)
    tokenizer = model.extend_vocabulary(new, method="subword", mode=mode, source_tokenizer=source)
    with eval_mode(model):
        start = bits_per_byte(model, tokenizer, held_out)
    packed = [{"text": text} for text in pack_texts(texts, tokenizer, max_length=128)]
    checkpoints = Checkpoints(model, tokenizer, held_out, steps)
    with tempfile.TemporaryDirectory() as work:
        args = TrainingArguments(work, max_steps=max(steps), per_device_train_batch_size=4, learning_rate=rate,
                                 lr_scheduler_type="constant", weight_decay=0.0, logging_steps=25, save_strategy="no",
                                 report_to=[], seed=0, disable_tqdm=True)
        trainer = vocabshift.DistillationTrainer(
            model=model, args=args, train_dataset=packed, processing_class=tokenizer, teacher_tokenizer=source,
            weights=weights, teacher_dtype=teacher_dtype,
            callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new"), checkpoints])
        trainer.train()
    return {"curve": [(0, start), *checkpoints.curve], "seconds_per_step": checkpoints.train_seconds / max(steps)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--language", default="ru")
    parser.add_argument("--mode", default="extend", choices=("extend", "replace"))
    parser.add_argument("--steps", type=int, nargs="+", default=[25, 50, 100, 200])
    parser.add_argument("--baseline-steps", type=int, nargs="+", default=None,
                        help="checkpoints of the cross-entropy run (default: --steps)")
    parser.add_argument("--teacher-shares", type=float, nargs="+", default=[1.0],
                        help="one distillation run per share of each batch the teacher reads (default: 1)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--teacher-dtype", choices=("bfloat16",), default=None,
                        help="the teacher's precision (autocast; default: the model's float32)")
    parser.add_argument("--suffix", default="", help="appended to the results' file names, to keep another run's")
    options = parser.parse_args()
    torch.set_num_threads(2)
    load_before = machine_load()
    train, held_out = held_out_split(read_corpus(options.language), HELD_OUT)
    base, source = load_smollm2()
    new = target_tokenizer(source, options.language, vocab_size=16000, held_out=HELD_OUT)
    with eval_mode(base):
        original = bits_per_byte(base, source, held_out)
    runs = {"cross-entropy": (CROSS_ENTROPY, options.baseline_steps or options.steps)}
    runs.update({_name(share): (DistillationWeights(teacher_share=share), options.steps)
                 for share in options.teacher_shares})
    results = {}
    for name, (weights, steps) in runs.items():
        print(f"{name}: {weights}", flush=True)
        results[name] = run(base, source, new, train[::8], held_out, weights, options.mode, steps,
                            options.learning_rate, options.teacher_dtype and getattr(torch, options.teacher_dtype))
    write(options, results, original, load_before)


def _name(share: float) -> str:
    return "distillation" if share == 1 else f"distillation, teacher share {share:g}"


def timed_curve(result) -> list[tuple[float, float]]:
    """The run's (training seconds, bits per byte) at its checkpoints: each checkpoint's own elapsed time where the
    run kept it, else its step times the run's mean seconds per step."""
    if "elapsed" in result:
        return [(seconds, bpb) for (_, seconds), (_, bpb) in zip(result["elapsed"], result["curve"], strict=True)]
    return [(step * result["seconds_per_step"], bpb) for step, bpb in result["curve"]]


def bpb_at_seconds(result, seconds) -> float | None:
    """The run's bits per byte after `seconds` of training, interpolated between its checkpoints (None past them)."""
    points = timed_curve(result)
    for (t0, a), (t1, b) in zip(points, points[1:]):
        if t0 <= seconds <= t1:
            return a + (b - a) * (seconds - t0) / (t1 - t0)
    return None


def at_seconds(result, seconds) -> str:
    """`bpb_at_seconds` with the seconds, for a table ("-" past the run's checkpoints)."""
    bpb = bpb_at_seconds(result, seconds)
    return "-" if bpb is None else f"{bpb:.4f} ({seconds:.0f} s)"


def _table(results) -> list[str]:
    """One row per checkpoint step: each run's bits per byte, and for each distillation run cross-entropy's at the
    same training seconds."""
    ce, names = results["cross-entropy"], [name for name in results if name != "cross-entropy"]
    lines = ["| step | cross-entropy | " + " | ".join(f"{n} | cross-entropy at its seconds" for n in names) + " |",
             "|---|---|" + "---|---|" * len(names)]
    curves = {name: dict(r["curve"]) for name, r in results.items()}
    for step in sorted(set().union(*curves.values())):
        cells = [f"{curves['cross-entropy'][step]:.4f}" if step in curves["cross-entropy"] else "-"]
        for name in names:
            here = curves[name].get(step)
            cells += ["-", ""] if here is None else [
                f"{here:.4f}", at_seconds(ce, step * results[name]["seconds_per_step"])]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def write(options, results, original, load_before) -> None:
    suffix = ("" if options.learning_rate == 1e-3 else f"_lr{options.learning_rate:g}") + options.suffix
    stem = RESULTS / f"distill_{options.language}_{options.mode}{suffix}"
    ce = results["cross-entropy"]
    seconds = ", ".join(f"{name} {r['seconds_per_step']:.2f} ({r['seconds_per_step'] / ce['seconds_per_step']:.2f}x)"
                        for name, r in results.items() if name != "cross-entropy")
    lines = [f"# Distillation vs cross-entropy: SmolLM2-135M-Instruct, {options.language}, {options.mode} mode, "
             f"learning rate {options.learning_rate:g}", "", "Held-out bits per byte after each step.", "",
             *_table(results), "",
             f"Seconds per training step (scoring excluded): cross-entropy {ce['seconds_per_step']:.2f}; {seconds}.",
             f"Original model with its own tokenizer: {original:.4f} bits/byte.",
             f"Distillation weights: {DistillationWeights().to_dict()} (teacher_share as in each run's name); "
             f"the teacher runs in {options.teacher_dtype or 'float32'}, the student in float32.",
             f"Machine: before {load_before}; after {machine_load()}.",
             "Command: `python benchmarks/bench_distill.py --language {} --mode {} --steps {}{} --teacher-shares {} "
             "--learning-rate {:g}{}{}`".format(
                 options.language, options.mode, " ".join(map(str, options.steps)),
                 f" --baseline-steps {' '.join(map(str, options.baseline_steps))}" if options.baseline_steps else "",
                 " ".join(f"{share:g}" for share in options.teacher_shares), options.learning_rate,
                 f" --teacher-dtype {options.teacher_dtype}" if options.teacher_dtype else "",
                 f" --suffix {options.suffix}" if options.suffix else "")]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps({"original": original, **results}, indent=1) + "\n")
    by_time = {f"{name} (x: seconds)": [(step * r["seconds_per_step"], bpb) for step, bpb in r["curve"]]
               for name, r in results.items()}
    plot_curves({name: r["curve"] for name, r in results.items()}, stem.with_suffix(".png"),
                reference=("original model, own tokenizer", original),
                title=f"Embedding-only training, {options.language}, {options.mode}: bits/byte by step")
    plot_curves(by_time, stem.parent / (stem.name + "_time.png"), reference=("original model", original),
                xlabel="training seconds", title=f"{options.language}, {options.mode}: bits/byte by wall time")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
