"""`vocabshift train` as shipped: `--objective auto` against `--objective next_token` at the command's defaults.

The defaults are 100 steps of 8 sequences of 128 tokens, AdamW at a constant lr 1e-3, seed 0; `auto` is
distillation for a model extended in extend mode. The model is the README's recipe, as in bench_languages.py:
SmolLM2-135M-Instruct, extend mode, `subword`, the language's 16k tokenizer, `target_texts=` its training lines and
`source_texts=` English lines. The trainers are the command's own (`cli_train.trainer_for` with the arguments
`vocabshift train ... --objective X` parses to), on the language's training lines.

First `next_token` and `auto` train `--steps` steps in turns, one step each (turns.py), so that their clocks meet the
same drift of the machine: that gives the seconds ratio. Then `next_token` trains alone for steps x that ratio (with
a learning rate that decays over the run, `--lr-scheduler-type linear`, a checkpoint of a longer run is not a
finished shorter one, so equal wall time is a run of its own). Scores: held-out bits per byte (the language's 200
held-out lines as passages of up to 800 bytes, as bench_languages.py) at a quarter, half and all of each run's
steps, and English held-out bits per byte at the end against the untrained original's.

    python benchmarks/bench_cli_train.py [--languages vi ru de] [--steps 100] [--batch-size 8] [--seed 0]
        [--lr-scheduler-type constant]

`--batch-size`, `--seed` and `--lr-scheduler-type` are passed on to `vocabshift train` (`--batch-size 4` is
bench_languages.py's batch). Writes benchmarks/results/cli_train.md and .json (runs of other languages or settings
are kept).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from bench_distill import Checkpoints
from bench_languages import setting_for
from turns import TakingTurns, Turns, train_in_turns

from smollm2_ru import machine_load
from vocabshift.cli import build_parser
from vocabshift.cli_train import trainer_for, training_arguments
from vocabshift.training import bits_per_byte
from vocabshift.training.evaluation import eval_mode

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["vi", "ru", "de"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr-scheduler-type", default=_default("lr_scheduler_type"),
                        help="passed on to `vocabshift train` (default: the command's)")
    options = parser.parse_args()
    torch.set_num_threads(2)
    path = RESULTS / "cli_train.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    flags = ["--batch-size", str(options.batch_size), "--seed", str(options.seed), "--lr-scheduler-type",
             options.lr_scheduler_type]
    for language in options.languages:
        label = (f"{language}, {options.batch_size} x 128 tokens a step, seed {options.seed}, "
                 f"{options.lr_scheduler_type} learning rate")
        results[label] = run_language(language, options.steps, flags)
        path.write_text(json.dumps(results, indent=1))
        (RESULTS / "cli_train.md").write_text(render(results), encoding="utf-8")


def _default(name: str) -> str:
    """The default of one of `vocabshift train`'s options."""
    return build_parser().parse_args(["train", "MODEL", "TEXTS", "OUTPUT"]).__dict__[name]


def run_language(language: str, steps: int, flags: list[str]) -> dict:
    """The two runs in turns, then next_token for as many seconds as auto took."""
    setting, load = setting_for(language), machine_load()
    model = setting["base"]
    tokenizer = model.extend_vocabulary(setting["new"], method="subword", source_texts=setting["english_train"],
                                        target_texts=setting["train"])
    print(f"{language}: next_token and auto in turns", flush=True)
    turns = Turns(["next_token", "auto"])
    runs = {name: prepare(model, tokenizer, setting, [name, steps, *flags], turns) for name in turns.order}
    train_in_turns(turns, {objective: run["trainer"] for objective, run in runs.items()})
    ratio = runs["auto"]["checkpoints"].train_seconds / runs["next_token"]["checkpoints"].train_seconds
    equal = round(steps * ratio)
    print(f"{language}: next_token for {equal} steps ({ratio:.3f}x)", flush=True)
    runs["longer"] = prepare(model, tokenizer, setting, ["next_token", equal, *flags], None)
    runs["longer"]["trainer"].train()
    return {"original": setting["original"], "ratio": ratio, "machine": [load, machine_load()], "flags": flags,
            "runs": [finish(run, setting) for run in runs.values()]}


def prepare(model, tokenizer, setting: dict, run: list, turns: Turns | None) -> dict:
    """The command's trainer for `--objective O --max-steps N FLAGS` (`run`: `[O, N, *FLAGS]`) on a copy of the
    extended model."""
    objective, steps, *flags = run
    argv = ["train", "MODEL", "TEXTS", "OUTPUT", "--objective", objective, "--max-steps", str(steps), *flags]
    args = build_parser().parse_args(argv)
    args.argv = argv
    copied, work = copy.deepcopy(model), tempfile.TemporaryDirectory()
    scoring = (copied, tokenizer, setting["held_out"], sorted({steps // 4, steps // 2, steps}))
    checkpoints = Checkpoints(*scoring) if turns is None else TakingTurns(turns, objective, *scoring)
    trainer = trainer_for(args, copied, tokenizer, list(setting["train"]), training_arguments(args, work.name))
    trainer.add_callback(checkpoints)
    return {"objective": objective, "steps": steps, "model": copied, "tokenizer": tokenizer, "trainer": trainer,
            "checkpoints": checkpoints, "work": work}


def finish(run: dict, setting: dict) -> dict:
    run["work"].cleanup()
    with eval_mode(run["model"]):
        english = bits_per_byte(run["model"], run["tokenizer"], setting["english"])
    checkpoints = run["checkpoints"]
    tokens = run["trainer"].state.num_input_tokens_seen
    return {"objective": run["objective"], "steps": run["steps"], "seconds": checkpoints.train_seconds,
            "curve": checkpoints.curve, "english": english, "tokens_per_step": tokens / run["steps"]}


def render(results: dict) -> str:
    lines = ["# `vocabshift train`: `--objective auto` against `next_token`", "",
             "Written by `python benchmarks/bench_cli_train.py` (see its docstring for the setting): the command's "
             "trainers and defaults, but for the batch and seed each section names (the default batch is 8 x 128 "
             "tokens). Leads are `next_token`'s held-out bits per byte minus `auto`'s: positive, `auto` is ahead.", ""]
    for language, result in results.items():
        ce, auto, longer = result["runs"]
        original = result["original"]
        lines += [f"## {language}", "", f"Machine: before {result['machine'][0]}; after {result['machine'][1]}.", "",
                  "| run | steps | held-out bits per byte (at 1/4, 1/2, all steps) | training seconds | tokens read a "
                  "step (`num_input_tokens_seen`) | English x original's |", "|---|---|---|---|---|---|",
                  f"| untrained original | - | {original['held_out']:.4f} | - | - | 1.0000x |"]
        for name, run in (("next_token", ce), ("auto", auto), ("next_token, equal wall time", longer)):
            curve = " / ".join(f"{bpb:.4f}" for _, bpb in run["curve"])
            lines.append(f"| {name} | {run['steps']} | {curve} | {run['seconds']:.0f} | {run['tokens_per_step']:.0f} "
                         f"| {run['english'] / original['english']:.4f}x |")
        leads = " / ".join(f"{c[1] - a[1]:+.4f}" for c, a in zip(ce["curve"], auto["curve"]))
        lines += ["", f"- `auto` took {result['ratio']:.3f}x `next_token`'s seconds (the two in turns).",
                  f"- Lead of `auto` at equal steps (1/4, 1/2, all): {leads} bits per byte.",
                  f"- Lead of `auto` at equal wall time (against `next_token` for {longer['steps']} steps): "
                  f"{longer['curve'][-1][1] - auto['curve'][-1][1]:+.4f} bits per byte.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
