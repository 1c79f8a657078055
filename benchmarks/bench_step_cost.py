"""What a `DistillationTrainer` step costs against a cross-entropy step, the arms timed in turn in one process.

Two runs of one arm, minutes apart, can differ by several percent in seconds per step on a shared machine, about as
much as the arms differ once the teacher has fallen behind (bench_languages.py's equal wall time tables time each
run on its own). Here the arms take turns: each round trains every arm for `--steps` steps from a fresh copy of the
extended model (bench_languages.py's recipe: SmolLM2-135M-Instruct, `subword`, 4 x 128 tokens, lr 1e-3) on that
round's texts, so that slow drift of the machine hits all of them alike, and each round starts one arm later than
the one before, so that an arm's place in the round does not count as its cost (as many rounds as arms give each arm
every place once). A step's seconds run from the end of the step before to its own end (the batch's collation
included); the first `--warmup` steps of each round are dropped.

Arms: `cross-entropy` (`Trainer` + `EmbeddingOnlyCallback`, the baseline), `default` (the default objective from the
start of training: the teacher reads a quarter of the sequences until its schedule turns it down), `default, caught
up` (the schedule as once the student models the text better than the teacher: a language the original model is
weak in, soon after the start), `default, caught up, no replay` (`source=0`: what the English replay adds) and
`next-token only` (`DistillationWeights.next_token_only()`: the trainer's own path, its collator included, without
teacher or replay).

    python benchmarks/bench_step_cost.py [--languages vi] [--steps 20] [--rounds 5] [--warmup 3]

Writes benchmarks/results/step_cost.md / .json (a language's runs replace its earlier ones).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

from bench_languages import BATCH, _arguments, _extended, make_trainer, setting_for, training_texts
from transformers import TrainerCallback

import vocabshift
from smollm2_ru import machine_load
from vocabshift.training import DistillationWeights

RESULTS = Path(__file__).parent / "results"
KIND = "English kept for the target"  # the recipe's vocabulary
CAUGHT_UP = -0.1  # a running lead of the teacher on the whole text below 0: the student models it better
ARMS = {"cross-entropy": (None, False), "default": (DistillationWeights(), False),
        "default, caught up": (DistillationWeights(), True),
        "default, caught up, no replay": (DistillationWeights(source=0.0), True),
        "next-token only": (DistillationWeights.next_token_only(), False)}


class StepClock(TrainerCallback):
    """Seconds of each step, from the end of the one before (or the start of training) to its own end."""

    def __init__(self):
        self.seconds, self._last = [], None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now


def time_arm(setting, arm, texts, steps) -> list[float]:
    """Seconds of each of `steps` steps of `arm` on `texts`, from a fresh copy of the extended model."""
    weights, caught_up = ARMS[arm]
    extended, tokenizer = _extended(setting, KIND)
    model, clock = copy.deepcopy(extended), StepClock()
    callbacks = [vocabshift.EmbeddingOnlyCallback(rows="new"), clock]
    with tempfile.TemporaryDirectory() as work:
        trainer = make_trainer(setting, model, tokenizer, weights, _arguments(work, steps, 0), texts, callbacks)
        if caught_up:
            trainer.schedule.text_lead = CAUGHT_UP
        trainer.train()
    return clock.seconds


def measure(language, steps, rounds, warmup) -> dict:
    """Every arm's kept step seconds over `rounds` rounds, the arms in turn within each round."""
    setting = setting_for(language)
    _, tokenizer = _extended(setting, KIND)
    texts = [{"text": t} for t in training_texts(setting["train"], tokenizer, BATCH * steps * rounds, 0)]
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    names = list(ARMS)
    for round_ in range(rounds):
        part = texts[round_ * BATCH * steps: (round_ + 1) * BATCH * steps]
        for arm in names[round_ % len(names):] + names[: round_ % len(names)]:  # each round starts one arm later
            seconds[arm] += time_arm(setting, arm, part, steps)[warmup:]
            print(f"  {language} round {round_} {arm}: {statistics.mean(seconds[arm][-(steps - warmup):]):.3f} "
                  "s/step", flush=True)
    return seconds


def table(results) -> list[str]:
    lines = ["| language | arm | steps timed | mean s/step | median s/step | x cross-entropy (mean) | "
             "x cross-entropy (median) |", "|---|---|---|---|---|---|---|"]
    for language, seconds in results.items():
        mean, median = statistics.mean(seconds["cross-entropy"]), statistics.median(seconds["cross-entropy"])
        for arm, values in seconds.items():
            lines.append(f"| {language} | {arm} | {len(values)} | {statistics.mean(values):.3f} | "
                         f"{statistics.median(values):.3f} | {statistics.mean(values) / mean:.3f}x | "
                         f"{statistics.median(values) / median:.3f}x |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["vi"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=len(ARMS))
    parser.add_argument("--warmup", type=int, default=3)
    options = parser.parse_args()
    results, before = earlier("step_cost"), machine_load()
    for language in options.languages:
        results[language] = measure(language, options.steps, options.rounds, options.warmup)
    write("step_cost", results, "A distillation step against a cross-entropy step, timed in turn",
          f"Rounds of {options.steps} steps per arm (the first {options.warmup} dropped), arms in turn, each round "
          "starting one arm later; seconds per step with the batch's collation (benchmarks/bench_step_cost.py).",
          table(results), before)


def earlier(name) -> dict:
    """The per-language results of benchmarks/results/`name`.json (empty before the first run)."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write(name, results, title, intro, lines, before) -> None:
    """`name`.json (the results by language) and `name`.md (the title, intro, table `lines`, the machine's load
    `before` and now, and the command) in benchmarks/results/."""
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    command = " ".join([f"python benchmarks/bench_{name}.py", *sys.argv[1:]])
    text = "\n".join([f"# {title}", "", intro, "", *lines, "", f"Machine: before {before}; after {machine_load()}.",
                      f"Command (last run): `{command}`", ""])
    (RESULTS / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
