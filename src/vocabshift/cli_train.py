"""The `vocabshift train` subcommand (argument parsing only); `evaluate` and `probe` are in cli_evaluate.py."""

from __future__ import annotations

import argparse
from typing import Any, Literal

import torch
from huggingface_hub.utils import are_progress_bars_disabled
from transformers import Trainer, TrainingArguments

from ._disk import scratch_folder
from ._typing import Model, Tokenizer
from .arguments import check_apart, check_positions
from .atomic import atomic_folder
from .cli_common import arg, check_output, check_stdin_once, load_model, model_tokenizer, subcommand
from .cli_types import CONTEXT, NON_NEGATIVE_RATE, POSITIVE_INT, POSITIVE_RATE, SEED, SHARE, given_path, shard_size
from .corpus import read_texts
from .errors import InvalidArgumentError, RecordError, TokenizerLoadError, TokenizerMismatchError
from .record import find_record, get_record
from .save import save_tokenizer
from .training import DistillationTrainer, DistillationWeights, EmbeddingOnlyCallback, pack_texts
from .training.distill.teacher import changed_by_training
from .training.plots import plot_curves, require_matplotlib
from .vocab.load import fingerprint, load_tokenizer

__all__: list[str] = []

TEXTS = "UTF-8 text file (.txt, or compressed: .xz, .gz, .bz2; '-' reads standard input), one document per line"


# The flags only distillation reads, with their defaults: refused when a run trains with cross-entropy.
_DISTILLATION_FLAGS = {"teacher_tokenizer": None, "teacher_model": None,
                       "teacher_share": DistillationWeights().teacher_share, "teacher_dtype": "auto",
                       "source_weight": DistillationWeights().source, "source_texts": None}


@subcommand(
    "train",
    "Embedding-only continued pretraining of a folder saved after extend_vocabulary: only the embeddings (and the "
    "output head) train, the body stays frozen; the run is appended to the record and a loss curve saved.",
    arg("model", help="model folder saved after extend_vocabulary"),
    arg("texts", help=f"training text: {TEXTS}"),
    arg("output_dir", help="output folder (written atomically; an existing model folder there is replaced)"),
    arg("--rows", default="new", choices=("new", "all"), help="train only the new rows (default) or every row"),
    arg("--max-steps", type=POSITIVE_INT, default=100, help="optimizer steps (default: 100)"),
    arg("--batch-size", type=POSITIVE_INT, default=8, help="sequences per step (default: 8)"),
    arg("--context-length", type=CONTEXT, default=128, help="tokens per sequence (default: 128)"),
    arg("--learning-rate", type=POSITIVE_RATE, default=1e-3,
        help="AdamW learning rate (the peak where --lr-scheduler-type decays it; default: 1e-3)"),
    arg("--lr-scheduler-type", default="constant", choices=("constant", "linear", "cosine"),
        help="the learning rate over the run: constant (default; at 100 steps it ends lower in held-out bits per byte "
             "than linear, see docs/cli.md), or decaying to 0 over --max-steps (linear is the Trainer's default)"),
    arg("--weight-decay", type=NON_NEGATIVE_RATE, default=0.0, help="AdamW weight decay (default: 0)"),
    arg("--seed", type=SEED, default=0, help="seed of the data order and of dropout (default: 0)"),
    arg("--max-shard-size", type=shard_size,
        help="largest safetensors shard to write (e.g. 2GB; default: transformers' save_pretrained default)"),
    arg("--objective", default="auto", choices=("auto", "next_token", "distillation"),
        help="next_token: plain cross-entropy; distillation: learn from the original model on the same text "
             "(DistillationTrainer); auto (default): distillation where the model itself can be the teacher (extend "
             "mode, --rows new) or --teacher-model is given, next_token otherwise"),
    arg("--teacher-tokenizer", type=given_path,
        help="distillation: the original tokenizer (default: the record's source model)"),
    arg("--teacher-model", type=given_path,
        help="distillation of a replace-mode folder: the original model folder or Hub id"),
    arg("--teacher-share", type=SHARE, default=_DISTILLATION_FLAGS["teacher_share"],
        help="distillation: the most of the sequences the teacher reads; the trainer lowers it while the student "
             "passes the teacher (default: 0.25)"),
    arg("--teacher-dtype", choices=("auto", "model", "bfloat16", "float16"),
        default=_DISTILLATION_FLAGS["teacher_dtype"],
        help="distillation: the teacher's precision (autocast): auto (bfloat16 for a float32 model where the device "
             "computes it natively), model (the model's own), bfloat16 or float16"),
    arg("--source-weight", type=NON_NEGATIVE_RATE, default=_DISTILLATION_FLAGS["source_weight"],
        help="distillation: weight of the source-language text read at the output head (one sequence every eighth "
             "step), so that new tokens in the source's script keep off it; read only where they cut it differently "
             "(default: 1; 0: off)"),
    arg("--source-texts", type=given_path,
        help="distillation: lines of the model's main language for --source-weight (.txt, "
             ".xz, .gz, .bz2; default: the English lines shipped with vocabshift)"),
)
def cmd_train(args: argparse.Namespace) -> int:
    check_stdin_once(texts=args.texts, **{"--source-texts": args.source_texts})
    if args.objective == "next_token":  # before loading the model (auto is told from its record)
        _check_no_distillation_flags(args)
    check_output(args.output_dir, model=args.model, texts=args.texts, source_texts=args.source_texts,
                 teacher_model=args.teacher_model, teacher_tokenizer=args.teacher_tokenizer)
    texts = read_texts(args.texts)
    require_matplotlib()  # for the loss curve: fail now, not after training
    tokenizer = model_tokenizer(args.model)
    model = load_model(args.model)
    record = find_record(model)  # the original model's folder, which the teacher reads, is an input too
    if record is None and (args.rows == "new" or args.objective != "next_token"):
        raise RecordError(f"model={args.model!r} carries no vocabshift record (its config.json has no 'vocabshift' "
                          "key): train the folder vocabshift extend wrote, or pass --rows all --objective next_token "
                          "to train every row of a model without one.")
    check_apart(args.output_dir, name="output_dir", source_model=None if record is None else record.source_model)
    check_positions(model, args.context_length, name="--context-length", argument=repr(args.model))
    with scratch_folder() as work:
        trainer = trainer_for(args, model, tokenizer, texts, training_arguments(args, str(work)))
        trainer.train()
    if not trainer.is_world_process_zero():  # under torchrun or accelerate launch: the main process writes
        return 0
    curves = _loss_curves(trainer.state.log_history)
    with atomic_folder(args.output_dir) as folder:
        shards = {} if args.max_shard_size is None else {"max_shard_size": args.max_shard_size}
        model.save_pretrained(folder, **shards)
        save_tokenizer(tokenizer, folder, shown_as=args.output_dir)
        if curves:
            plot_curves(curves, folder / "cpt_loss.png", ylabel="loss", title=f"Embedding-only CPT, rows={args.rows}")
    print(f"{args.output_dir}: {args.max_steps} embedding-only steps, {_finals(curves, args.max_steps)}")
    return 0


def _finals(curves: dict[str, list[tuple[int, float]]], steps: int) -> str:
    """The last logged value of each curve, with its step where that is not the last (logs come every
    `logging_steps`)."""
    finals = [f"final {name} {value:.4f}" + ("" if step == steps else f" (logged at step {step})")
              for name, points in curves.items() for step, value in points[-1:]]
    return ", ".join(finals) or "no loss logged"


def _loss_curves(history: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """The logged training loss by step, and with distillation the student's next-token cross-entropy
    (`distill/next_token`, which compares with a cross-entropy run's loss; the objective adds the teacher's terms)."""
    curves = {name: [(entry["step"], entry[key]) for entry in history if key in entry]
              for name, key in (("loss", "loss"), ("next-token cross-entropy", "distill/next_token"))}
    return {name: points for name, points in curves.items() if points}


def training_arguments(args: argparse.Namespace, work: str) -> TrainingArguments:
    """The Trainer's arguments of a `vocabshift train` run (benchmarks/bench_cli_train.py trains with them too)."""
    # the Trainer's bar follows huggingface_hub's switch as vocabshift's do; pinned memory only for a GPU (torch warns
    # about it on a CPU, where the user of the command cannot turn it off); use_cpu where torch sees no accelerator, so
    # that a launcher's processes (torchrun, accelerate launch) train as one DDP run over gloo, not each alone
    return TrainingArguments(work, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
                             learning_rate=args.learning_rate, lr_scheduler_type=args.lr_scheduler_type,
                             weight_decay=args.weight_decay, seed=args.seed, logging_steps=max(1, args.max_steps // 20),
                             save_strategy="no", report_to=[], disable_tqdm=are_progress_bars_disabled(),
                             dataloader_pin_memory=torch.cuda.is_available(),
                             use_cpu=torch.accelerator.current_accelerator() is None)


def trainer_for(args: argparse.Namespace, model: Model, tokenizer: Tokenizer, texts: list[str], options: Any) -> Any:
    callbacks = [EmbeddingOnlyCallback(rows=args.rows, command=["vocabshift", *args.argv])]  # as it was run
    if _objective(args, model) == "next_token":
        _check_no_distillation_flags(args)
        blocks = pack_texts(texts, tokenizer, max_length=args.context_length, blocks=True)
        dataset = [{"input_ids": block, "labels": block} for block in blocks]
        return Trainer(model=model, args=options, train_dataset=dataset, callbacks=callbacks)
    teacher = _teacher_tokenizer(args, get_record(model))
    teacher_model = load_model(args.teacher_model, argument="--teacher-model") if args.teacher_model else None
    source = read_texts(args.source_texts, name="--source-texts") if args.source_texts else None
    packed = [{"text": text} for text in pack_texts(texts, tokenizer, max_length=args.context_length)]
    return DistillationTrainer(model=model, args=options, train_dataset=packed, processing_class=tokenizer,
                               teacher_tokenizer=teacher, teacher_model=teacher_model, max_length=args.context_length,
                               teacher_dtype=_teacher_dtype(args.teacher_dtype), source_texts=source,
                               weights=DistillationWeights(teacher_share=args.teacher_share, source=args.source_weight),
                               callbacks=callbacks)


def _teacher_tokenizer(args: argparse.Namespace, record: Any) -> Tokenizer:
    """--teacher-tokenizer, else the record's source model: the tokenizer the model was extended from."""
    if not (args.teacher_tokenizer or record.source_model):
        raise InvalidArgumentError(
            f"The record of {args.model!r} names no source model (it was built in memory, not loaded from a folder "
            "or the Hub), so the original tokenizer the teacher reads is unknown: pass --teacher-tokenizer (the "
            "tokenizer the model was extended from), or --objective next_token."
        )
    given = f"--teacher-tokenizer {args.teacher_tokenizer!r}" if args.teacher_tokenizer else \
        f"the record's source_model {record.source_model!r} (where extend read the model)"
    try:
        teacher = load_tokenizer(args.teacher_tokenizer or record.source_model, argument="--teacher-tokenizer")
    except TokenizerLoadError as error:
        if args.teacher_tokenizer:
            raise
        raise TokenizerLoadError(f"The teacher reads the tokenizer the model was extended from, {given}, which "
                                 f"cannot be loaded from here ({error.__cause__ or error}): pass --teacher-tokenizer "
                                 "(that tokenizer's folder or Hub id; a relative path is read from the current "
                                 "folder), or --objective next_token.") from None
    if fingerprint(teacher) != record.source_tokenizer_sha256:
        raise TokenizerMismatchError(f"{given} is not the tokenizer the model was extended from (another fingerprint "
                                     "than the record's): pass that tokenizer with --teacher-tokenizer.")
    return teacher


def _check_no_distillation_flags(args: argparse.Namespace) -> None:
    """Refuse the flags only distillation reads when the run trains with cross-entropy: they would do nothing."""
    given = [f"--{name.replace('_', '-')}" for name, default in _DISTILLATION_FLAGS.items()
             if getattr(args, name) != default]
    if given:
        why = "--objective next_token" if args.objective == "next_token" else (
            "which --objective auto picks where the model itself is no teacher: replace mode, --rows all, or an "
            "earlier run trained its old rows or body")
        raise InvalidArgumentError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to distillation "
                                   f"only, and this run trains with cross-entropy ({why}): leave "
                                   f"{'it' if len(given) == 1 else 'them'} out, or pass --objective distillation.")


def _objective(args: argparse.Namespace, model: Model) -> str:
    """`--objective`, with `auto` resolved: distillation where a teacher is at hand without loading anything but
    the original tokenizer (the model itself, fed the old ids, when only new rows train in extend mode), or where
    `--teacher-model` gives one; cross-entropy otherwise (also where an earlier run trained old rows or the body,
    so that the model is no longer the original). docs/distill.md, "Which objective when", has the measurements."""
    if args.objective != "auto":
        return str(args.objective)
    record = get_record(model)
    own_teacher = args.rows == "new" and record.mode == "extend" and changed_by_training(record) is None
    return "distillation" if own_teacher or args.teacher_model else "next_token"


def _teacher_dtype(name: str) -> torch.dtype | Literal["auto"] | None:
    """`--teacher-dtype` as `DistillationTrainer` takes it."""
    if name == "auto":
        return "auto"
    return None if name == "model" else getattr(torch, name)
