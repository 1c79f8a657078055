"""What one reading of the teacher adds to a `DistillationTrainer` step, part by part, and what one source replay
adds.

bench_step_cost.py times whole steps of training runs, where a step varies by a tenth from one to the next on a
shared machine. Here every part is timed on batches of 4 sequences of bench_languages.py's setting (SmolLM2-135M-
Instruct, extend mode, `subword`, the recipe's vocabulary, the new rows split off by `EmbeddingOnlyCallback` as in
training), in one process, the parts alternating call by call so that the machine's drift hits all of them alike,
each repeat on the next batch of the training texts (seed 0); medians over `--repeats` batches (a first one
dropped). The baseline is the step without a reading: the student's next-token loss and its backward (no optimizer
step, which is the same for every part). The parts:

- `teacher forward`: the teacher reading the batch's first sequence (`teacher_targets`, no gradients);
- `student side, <objectives>`: the student's loss and backward with the teacher's targets of that sequence, less
  the baseline on the same batch: what the teacher's objectives add (the targets are computed before the clock
  starts);
- `a reading`: the two above together (batch by batch);
- `source replay`: one sequence of English read at the head (`source_loss`, forward and backward), taken every
  `READ_EVERY` steps.

    python benchmarks/bench_reading_cost.py [--languages vi ru de] [--repeats 8]

Writes benchmarks/results/reading_cost.md / .json (a language's rows replace its earlier ones).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

from bench_languages import BATCH, _arguments, _extended, make_trainer, setting_for, training_texts
from bench_step_cost import KIND, earlier, write

import vocabshift
from smollm2_ru import machine_load
from vocabshift.training import DistillationWeights
from vocabshift.training.distill.objective import distillation_loss, teacher_targets
from vocabshift.training.distill.replay import READ_EVERY, source_loss

DEFAULT = DistillationWeights()
OBJECTIVES = {  # the student side of a reading with these weights (all of the default's, then one at a time)
    "student side, default objectives": DEFAULT,
    "student side, hidden only": dataclasses.replace(DEFAULT, next_piece=0, piece_tree=0, gate=False),
    "student side, next_piece only": dataclasses.replace(DEFAULT, hidden=0, piece_tree=0, gate=False),
    "student side, piece_tree only": dataclasses.replace(DEFAULT, hidden=0, next_piece=0, gate=False),
}


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def parts(language, repeats) -> dict[str, list[float]]:
    """Seconds of every part on `language`'s batches (one per repeat, the first dropped), the parts alternating."""
    setting = setting_for(language)
    extended, tokenizer = _extended(setting, KIND)
    model = copy.deepcopy(extended)
    texts = [{"text": t} for t in training_texts(setting["train"], tokenizer, BATCH * (repeats + 1), 0)]
    with tempfile.TemporaryDirectory() as work:  # the callback splits the new rows off when the trainer is built
        trainer = make_trainer(setting, model, tokenizer, DEFAULT, _arguments(work, 1, 0), texts,
                               [vocabshift.EmbeddingOnlyCallback(rows="new")])
    model.train()
    seconds: dict[str, list[float]] = defaultdict(list)
    for start in range(0, len(texts), BATCH):
        for name, action in _actions(trainer, model, trainer.data_collator(texts[start: start + BATCH])).items():
            seconds[name].append(_timed(action))
            model.zero_grad(set_to_none=True)
    return {name: values[1:] for name, values in seconds.items()}


def _actions(trainer, model, batch) -> dict[str, Callable[[], object]]:
    """Each part as a call on `batch` (the teacher's targets of the student side computed beforehand)."""

    def student(weights, count):
        targets = teacher_targets(trainer.teacher, batch, weights, tree=trainer.tree, count=count)
        return lambda: distillation_loss(model, targets, batch, weights, first_pieces=trainer.first_pieces,
                                         tree=trainer.tree, count=count)[0].backward()

    actions = {"step without a reading": student(DEFAULT, 0),
               "teacher forward": lambda: teacher_targets(trainer.teacher, batch, DEFAULT, tree=trainer.tree, count=1),
               **{name: student(weights, 1) for name, weights in OBJECTIVES.items()}}
    if trainer.source is not None:
        actions["source replay"] = lambda: _replay(trainer, model)
    return actions


def _replay(trainer, model) -> None:
    """As `DistillationTrainer.compute_loss` runs the replay: in the teacher's precision, on the model's device."""
    with trainer.teacher.precision(model.device):
        loss = source_loss(model, trainer.source.batch(model.device))
    loss.backward()


def table(results) -> list[str]:
    lines = ["| language | part | median seconds (added) | x a step without a reading | per step |",
             "|---|---|---|---|---|"]
    for language, seconds in results.items():
        base = seconds["step without a reading"]
        added = {name: [value - b if name.startswith("student side") else value for value, b in zip(values, base)]
                 for name, values in seconds.items() if name != "step without a reading"}
        added["a reading"] = [t + s for t, s in zip(added["teacher forward"],
                                                     added["student side, default objectives"])]
        scale = statistics.median(base)
        lines.append(f"| {language} | step without a reading | {scale:.3f} | 1.000 | |")
        for name, values in added.items():
            median = statistics.median(values)
            every = f"{median / scale / READ_EVERY:+.3f} (one in {READ_EVERY})" if name == "source replay" else ""
            lines.append(f"| {language} | {name} | {median:.3f} | {median / scale:+.3f} | {every} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["vi", "ru", "de"])
    parser.add_argument("--repeats", type=int, default=8)
    options = parser.parse_args()
    results, before = earlier("reading_cost"), machine_load()
    for language in options.languages:
        results[language] = parts(language, options.repeats)
        print("\n".join(table({language: results[language]})), flush=True)
    write("reading_cost", results, "What a reading of the teacher and a source replay add to a step",
          f"Medians over {options.repeats} batches of 4 sequences, the parts alternating on each "
          "(benchmarks/bench_reading_cost.py). Seconds a part adds (the `student side` rows: what the teacher's "
          "objectives add to the step's loss and backward, batch by batch).", table(results), before)


if __name__ == "__main__":
    main()
