"""The subcommands of `vocabshift` that score models: `evaluate` and `probe` (argument parsing only)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ._typing import Model
from .atomic import atomic_write_text
from .cli_common import arg, load_model, model_tokenizer, subcommand
from .cli_train import TEXTS
from .cli_types import CONTEXT, POSITIVE_INT, POSITIVE_RATE, SEED, given_path
from .corpus import read_texts
from .errors import InvalidArgumentError, MethodOptionError, RecordError
from .record import find_record, store_record
from .registry import build_config, get_method
from .training import evaluate, probe
from .training.probing import check_output_dir

__all__: list[str] = []


@subcommand(
    "evaluate",
    "Held-out tokens per word, bits per byte and loss on new vs old tokens of a model folder (and optionally of the "
    "original model with its own tokenizer); prints a Markdown table.",
    arg("model", help="model folder (with its tokenizer)"),
    arg("texts", help=f"held-out text: {TEXTS}"),
    arg("--original-model", type=given_path, help="the original model folder or Hub id, scored with its own tokenizer"),
    arg("--max-lines", type=POSITIVE_INT, help="score only the first N lines"),
    arg("--context-length", type=CONTEXT, default=512,
        help="tokens per scored window, prefix included (default: 512; at most the model's positions)"),
    arg("--batch-size", type=POSITIVE_INT, default=4, help="windows scored at once (default: 4)"),
    arg("--add-to-record", action="store_true", help="store the result in the folder's config.json record"),
)
def cmd_evaluate(args: argparse.Namespace) -> int:
    texts = read_texts(args.texts)[: args.max_lines]
    if args.add_to_record:
        _check_config_to_write(args.model)
    tokenizer, model = model_tokenizer(args.model), load_model(args.model)
    if args.add_to_record and find_record(model) is None:  # before the evaluation, not after it
        raise RecordError(f"--add-to-record: model={args.model!r} carries no vocabshift record to add the evaluation "
                          "to (config.json has no 'vocabshift' key): leave --add-to-record out for a model vocabshift "
                          "did not extend.")
    if args.original_model and Path(args.original_model).exists() and \
            Path(args.original_model).resolve() == Path(args.model).resolve():
        raise InvalidArgumentError(f"--original-model {args.original_model!r} is the model itself, so the comparison "
                                   "would show two equal rows: pass the model before adaptation (the record's "
                                   "source_model).")
    original = {}
    if args.original_model:
        original = {"original_tokenizer": model_tokenizer(args.original_model, argument="--original-model"),
                    "original_model": load_model(args.original_model, argument="--original-model")}
    result = evaluate(model, tokenizer, texts, context_length=args.context_length, batch_size=args.batch_size,
                      **original)
    print(result)
    if args.add_to_record:
        result.add_to_record(model)
        _rewrite_record(Path(args.model), model)
    return 0


def _check_config_to_write(model: str) -> None:
    """Before the evaluation, not after it: the config.json --add-to-record rewrites (a temporary sibling, renamed
    over it) is a local file of the folder's own, in a folder this user may write in."""
    config, said = Path(model) / "config.json", f"--add-to-record writes into the config.json of model={model!r}"
    if not config.is_file():
        raise InvalidArgumentError(f"{said}, which is no local folder: download it first, or leave --add-to-record "
                                   "out.")
    if config.is_symlink():  # a Hub cache snapshot's: shared
        raise InvalidArgumentError(
            f"{said}, a link to {os.path.realpath(config)!r} that other copies (a Hugging Face cache's snapshots) "
            "share and the cache checks by hash: evaluate a copy (hf download --local-dir, or save_pretrained), or "
            "leave --add-to-record out."
        )
    if not os.access(config.parent, os.W_OK | os.X_OK):
        raise InvalidArgumentError(f"{said}, a folder this user may not write in: make it writable (chmod u+w), "
                                   "evaluate a copy, or leave --add-to-record out.")


def _rewrite_record(folder: Path, model: Model) -> None:
    """Replace the record in `folder/config.json` by the model's (through a temporary file and a rename)."""
    path = folder / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    store_record(data, model)
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@subcommand(
    "probe",
    "Rank initialization methods: for each, extend the model, train N embedding-only steps on the same data with "
    "the same seed, and compare held-out bits per byte; writes probe.md and probe.png.",
    arg("model", help="the model folder or Hub id before extend_vocabulary"),
    arg("new_tokenizer", help="target-language tokenizer: folder, tokenizer.json or Hub id"),
    arg("texts", help=f"target-language text: {TEXTS}"),
    arg("--methods", nargs="+", required=True,
        help="method names (see `vocabshift methods`); one that needs an option (word vectors, a helper model) is "
             "probed from Python, vocabshift.probe(..., method_options=...)"),
    arg("--objectives", nargs="+", default=["next_token"], choices=("next_token", "distillation"),
        help="training objectives to compare on the same batches (default: next_token)"),
    arg("--held-out", type=POSITIVE_INT, default=200, help="last N lines of TEXTS held out for scoring (default: 200)"),
    arg("--steps", type=POSITIVE_INT, default=50, help="embedding-only steps per method (default: 50)"),
    arg("--eval-every", type=POSITIVE_INT, default=10, help="score every N steps (default: 10)"),
    arg("--mode", default="extend", choices=("extend", "replace"), help="as for extend (default: extend)"),
    arg("--batch-size", type=POSITIVE_INT, default=8, help="sequences per step (default: 8)"),
    arg("--context-length", type=CONTEXT, default=128, help="tokens per sequence (default: 128)"),
    arg("--learning-rate", type=POSITIVE_RATE, default=1e-3, help="AdamW learning rate (default: 1e-3)"),
    arg("--seed", type=SEED, default=0, help="seed (default: 0)"),
    arg("--output-dir", default="probe", help="where to write probe.md and probe.png (default: ./probe)"),
)
def cmd_probe(args: argparse.Namespace) -> int:
    check_output_dir(args.output_dir, model=args.model, new_tokenizer=args.new_tokenizer)  # before loading
    for flag, values in (("--methods", args.methods), ("--objectives", args.objectives or [])):
        if repeated := sorted({value for value in values if values.count(value) > 1}):
            raise InvalidArgumentError(f"{flag} names {', '.join(repeated)} more than once: name each once.")
    for method in args.methods:
        _check_probe_method(method)
    texts = read_texts(args.texts)
    if args.held_out >= len(texts):  # --held-out is >= 1 (argparse)
        fix = f"pass --held-out {max(1, len(texts) // 5)}, or more text" if len(texts) > 1 else "pass more text"
        raise InvalidArgumentError(f"--held-out {args.held_out} leaves no line to train on: texts={args.texts!r} has "
                                   f"{len(texts):,} non-blank lines, and probe scores the last {args.held_out} and "
                                   f"trains on the lines before them; {fix}.")
    source = model_tokenizer(args.model)
    result = probe(load_model(args.model), args.new_tokenizer, texts[: -args.held_out], texts[-args.held_out :],
                   methods=args.methods, objectives=args.objectives, steps=args.steps, eval_every=args.eval_every,
                   mode=args.mode, source_tokenizer=source, batch_size=args.batch_size,
                   context_length=args.context_length, learning_rate=args.learning_rate, seed=args.seed,
                   output_dir=args.output_dir)
    print(result)
    return 0


def _check_probe_method(name: str) -> None:
    """Before the model is loaded: `name` is a method, and one that runs without options (the command passes none).

    Raises:
        `UnknownMethodError`: listing the methods. `MethodOptionError`: a method that needs an option (focus, salt).
    """
    try:
        build_config(get_method(name), {})
    except MethodOptionError as error:
        raise MethodOptionError(f"--methods {name} cannot run in vocabshift probe, which passes no method options: "
                                f"{error} Probe it from Python, vocabshift.probe(..., method_options={{{name!r}: "
                                "{...}}), or leave it out of --methods.") from None
