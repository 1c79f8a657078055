"""What the source replay (`DistillationWeights.source`) adds to an embedding-only step, against the step itself.

SmolLM2-135M-Instruct extended with each language's 16k tokenizer (bench_languages.py's setting), new rows split off
(`freeze_for_embedding_training(rows="new")`), float32. Timed, alternating so that load from other processes hits
both alike: the cross-entropy forward and backward of a batch of 4 x 128 target-language tokens (the baseline: what
a cross-entropy step computes before the optimizer), and `source_loss` with its backward on one sequence of 128
tokens of the shipped English, cut by the extended tokenizer. Medians of `--repeats`.

    python benchmarks/bench_source_replay.py [--languages ru de vi] [--repeats 9]

Writes benchmarks/results/source_replay.md / .json.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from bench_languages import BATCH, LENGTH, CausalCollator, setting_for, training_texts

from smollm2_ru import machine_load
from vocabshift.training import freeze_for_embedding_training
from vocabshift.training.distill.replay import SourceReplay, source_loss

RESULTS = Path(__file__).parent / "results"


def _seconds(step) -> float:
    start = time.perf_counter()
    step().backward()
    return time.perf_counter() - start


def measure(setting, repeats: int) -> dict:
    model = copy.deepcopy(setting["base"])
    tokenizer = model.extend_vocabulary(setting["new"], method="subword", source_tokenizer=setting["source"])
    rows = freeze_for_embedding_training(model, rows="new")
    batch = CausalCollator(tokenizer)([{"text": t} for t in training_texts(setting["train"], tokenizer, BATCH, 0)])
    english = SourceReplay(tokenizer, None, max_length=LENGTH).batch("cpu")
    steps = {"cross-entropy, 4 x 128": lambda: model(**batch).loss,
             "source replay, 1 x 128": lambda: source_loss(model, english)}
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats + 1):  # the first round warms up
        for name, step in steps.items():
            times[name].append(_seconds(step))
            for parameter in rows.parameters:
                parameter.grad = None
    return {name: statistics.median(values[1:]) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["ru", "de", "vi"])
    parser.add_argument("--repeats", type=int, default=9)
    options = parser.parse_args()
    torch.set_num_threads(2)
    load = machine_load()
    rows = {language: measure(setting_for(language), options.repeats) for language in options.languages}
    lines = ["# Cost of the source replay", "",
             f"Median seconds of forward + backward (`python benchmarks/bench_source_replay.py`, {options.repeats} "
             f"alternating repeats, float32, 2 threads; {load} at the start).", "",
             "| language | cross-entropy, 4 x 128 | source replay, 1 x 128 | replay / cross-entropy |",
             "|---|---|---|---|"]
    for language, row in rows.items():
        ce, replay = row["cross-entropy, 4 x 128"], row["source replay, 1 x 128"]
        lines.append(f"| {language} | {ce:.3f} | {replay:.3f} | {replay / ce:.3f} |")
    (RESULTS / "source_replay.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (RESULTS / "source_replay.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
