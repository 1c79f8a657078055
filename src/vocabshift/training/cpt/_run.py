"""What `EmbeddingOnlyCallback` keeps between its hooks, from `on_init_end` to `on_train_end`, and the checks and
warnings on it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..._typing import Model
from ...errors import TrainingSetupError
from ._optimizer import HeadRate
from .freeze import row_norms
from .rows import TrainableRows, embedding_parameters, fold_an_earlier_split
from .stage import BodyGate, merge_an_earlier_lora, remove_an_earlier_gate

__all__ = ["Run", "best_loaded", "check_not_serving_another", "check_once", "check_ready", "checkpoint_folder",
           "next_token", "record_entry", "trained_nothing", "undo_an_earlier_run", "warn_of_a_zero_loss",
           "warn_of_unseen_rows"]

logger = logging.getLogger(__name__)
LOOKUP_STEPS = 10  # the steps whose batches must hold a new token somewhere


@dataclass
class Run:
    """What the callback keeps between hooks.

    Attributes:
        ids / rows: the trainable row ids (None: every row) and their split (`TrainableRows`).
        body / tuner: the body parameters a second stage trains, and its LoRA tuner (None without).
        gate / head: the second stage's gate and the untied head's learning-rate scaler (None when unused).
        new_ids: the record's new ids (for the row-norm logs), None without a record.
        logs: the last `loss` / `train_loss` logged, for the record.
        loss_step: the step the last `loss` was logged at (the Trainer logs every `logging_steps`, not at the last
            step), for the record.
        began: `on_train_begin` has run (row norms are logged from then on).
        state: the `TrainerState` of the `train()` that began last (`check_once`).
        closed: the run ended (trained, or diverged): its model is plain, its body trainable again.
        warned_zero_loss: the warning that the loss is exactly 0 was given.
        checked_lookups: whether the first steps' batches held a trainable row's id was checked.
        learning_rate: the optimizer's peak rate of the input rows (`peak_rate`), for the record.
        resumed_from: the step the run resumed from (0 when it started), for the record: the Trainer's
            `train_loss` is the mean over the steps after it.
        requires_grad: each parameter's `requires_grad` before the body was frozen, given back when training ends.
    """

    ids: torch.Tensor | None
    rows: TrainableRows
    body: list[torch.nn.Parameter]
    tuner: Any
    gate: BodyGate | None = None
    head: HeadRate | None = None
    new_ids: torch.Tensor | None = None
    logs: dict[str, float] = field(default_factory=dict)
    loss_step: int | None = None
    began: bool = False
    state: Any = None
    closed: bool = False
    warned_zero_loss: bool = False
    checked_lookups: bool = False
    learning_rate: float | None = None
    resumed_from: int = 0
    requires_grad: dict[str, bool] = field(default_factory=dict)


def checkpoint_folder(args: TrainingArguments, state: TrainerState) -> Path:
    """Where the Trainer saves (and by default resumes) the checkpoint of the current step."""
    return Path(args.output_dir or ".", f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


def next_token(args: TrainingArguments) -> dict[str, Any]:
    """The objective of a plain Trainer's loss, as the record entry keeps it: a causal LM's next-token
    cross-entropy, smoothed where `label_smoothing_factor` is set (its losses then read higher than a plain
    cross-entropy's)."""
    smoothing = args.label_smoothing_factor
    return {"name": "next_token", **({"label_smoothing": smoothing} if smoothing else {})}


def best_loaded(args: TrainingArguments, state: TrainerState) -> dict[str, Any]:
    """Where `load_best_model_at_end` put the weights back, for the record entry (whose `steps` and `final_loss` are
    the run's last step's): the checkpoint's step and its metric, named as the Trainer reads it from the evaluation
    (`eval_loss` for `metric_for_best_model="loss"`, not the training loss); empty when the last step's weights
    stay."""
    if not args.load_best_model_at_end or state.best_model_checkpoint is None:
        return {}
    metric = args.metric_for_best_model or "loss"
    metric = metric if metric.startswith("eval_") else f"eval_{metric}"
    return {"loaded_best": {"step": state.best_global_step, "metric": metric, "value": state.best_metric}}


def warn_of_a_zero_loss(run: Run, loss: float, state: TrainerState) -> None:
    """A cross-entropy of exactly 0 means no token had a label: nothing trains (once per run, by the main process)."""
    if loss == 0.0 and not run.warned_zero_loss and state.is_world_process_zero:
        run.warned_zero_loss = True
        logger.warning(f"The training loss is exactly 0 at step {state.global_step}: no token of these batches has a "
                       "label to predict (labels all -100, or none given), so the rows get no gradient and nothing "
                       "trains. Give each example labels (labels = input_ids for causal LM training).")


def trained_nothing(state: TrainerState) -> bool:
    """A run that ended after 0 steps trained nothing: say so (its record entry would read as a run, loss 0.0)."""
    if state.global_step > 0:
        return False
    if state.is_world_process_zero:  # every process ends after 0 steps: say it once
        logger.warning("Training ended after 0 steps (max_steps=0, or num_train_epochs=0): nothing trained, and the "
                       "record has no entry for this run. Set max_steps (or num_train_epochs) above 0.")
    return True


def warn_of_unseen_rows(run: Run, rows: Any, state: TrainerState) -> None:
    """After the first `LOOKUP_STEPS` steps (one read of a device counter): warn when their batches held no id of the
    new rows, as with text tokenized by the original tokenizer (whose ids all precede the new ones)."""
    if run.ids is None or run.checked_lookups or state.global_step < min(LOOKUP_STEPS, state.max_steps):
        return
    run.checked_lookups = True
    seen = run.rows.take_lookups()  # the hook stops counting, whatever the rows
    if rows == "new" and seen == 0 and state.is_world_process_zero:
        logger.warning(
            f"The batches of the first {state.global_step} steps hold none of the new tokens (ids "
            f"{int(run.ids[0])} to {int(run.ids[-1])}), so their rows train only to be less likely: the text was "
            "tokenized with the original tokenizer, or is not in the new tokenizer's language. Tokenize it with the "
            "tokenizer extend_vocabulary returned."
        )


def record_entry(run: Run, model: Any, args: TrainingArguments, state: TrainerState, *, rows: Any,
                 head_learning_rate: float | None, second_stage: Any, objective: dict[str, Any],
                 command: list[str] | None) -> dict[str, Any]:
    """The run as the record's CPT entry keeps it (`EmbeddingOnlyCallback`'s arguments, the Trainer's state)."""
    matrix_rows = embedding_parameters(model)[0].shape[0]
    return {
        "rows": rows if isinstance(rows, str) else "custom",
        "trainable_rows": matrix_rows if run.ids is None else len(run.ids),
        "steps": state.global_step,
        "tokens_seen": state.num_input_tokens_seen,
        "final_loss": run.logs.get("loss"),
        "final_loss_step": run.loss_step,
        "train_loss": run.logs.get("train_loss"),
        "learning_rate": run.learning_rate if run.learning_rate is not None else args.learning_rate,
        "head_learning_rate": head_learning_rate,
        "weight_decay": args.weight_decay,
        "lr_scheduler": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
        "total_batch_size": _batch_size(args, state) * args.gradient_accumulation_steps * args.world_size,
        "world_size": args.world_size,
        "second_stage": None if second_stage is None else second_stage.to_dict(),
        "row_norms": row_norms(model, run.new_ids),
        "objective": objective,
        **({"resumed_from_step": run.resumed_from} if run.resumed_from else {}),
        **best_loaded(args, state),
        **({} if command is None else {"command": list(command)}),
    }


def _batch_size(args: TrainingArguments, state: TrainerState) -> int:
    """The batch each process trained on: the Trainer's (`auto_find_batch_size` lowers it after running out of
    memory), else the arguments'."""
    return state.train_batch_size or args.per_device_train_batch_size


def check_not_serving_another(seen: Model | None, run: Run | None, model: Model) -> None:
    """One callback serves one Trainer at a time: refuse a second Trainer of another model while the first's rows
    (`seen`'s) are split (taking it over would leave them split, and that Trainer unable to train)."""
    if run is not None and seen is not model and run.rows.is_split:
        raise TrainingSetupError(
            f"This EmbeddingOnlyCallback already serves a Trainer of another {type(seen).__name__}, whose rows it "
            "split and has not folded back (that Trainer has not trained): give each Trainer its own "
            "EmbeddingOnlyCallback(...)."
        )


def check_ready(seen: Model | None, run: Run | None, model: Model | None) -> Run:
    """The run that `on_init_end` set up, once the Trainer that begins training trains the model it saw (`seen`)
    with its rows still split (`TrainingSetupError` otherwise)."""
    if seen is None or run is None:
        raise TrainingSetupError(
            "EmbeddingOnlyCallback did not see this model when the Trainer was built (it was added with "
            "trainer.add_callback), so the optimizer was built before it could freeze the body. Pass it in "
            "Trainer(..., callbacks=[EmbeddingOnlyCallback(...)])."
        )
    if model is not seen:
        raise TrainingSetupError(
            "EmbeddingOnlyCallback froze another model than the one this Trainer trains: the Trainer has a "
            "model_init, which builds a new model in train() after the callback froze the first (not supported: "
            "pass Trainer(model=...)), or the callback was given to a later Trainer (give each its own)."
        )
    if run.closed or (run.ids is not None and not run.rows.is_split):
        raise TrainingSetupError(
            "This Trainer has trained once, a later Trainer took the model over, or its callbacks hold a second "
            "EmbeddingOnlyCallback, and EmbeddingOnlyCallback folded its rows back: build a new Trainer with one "
            "new callback to train again."
        )
    return run


def check_once(run: Run, state: TrainerState) -> None:
    """Refuse a second `on_train_begin` in one `train()` (the Trainer's state is new in each): the same callback is
    in the Trainer's callbacks twice, and each event would run twice."""
    if run.state is state:
        raise TrainingSetupError(
            "This EmbeddingOnlyCallback is in the Trainer's callbacks twice (callbacks=[callback, callback], or "
            "trainer.add_callback(callback) with the callback the Trainer was built with): each step would scale "
            "the head's update twice and the record would get the run twice. Pass it once, in Trainer(callbacks=[...])."
        )
    run.state = state


def undo_an_earlier_run(model: Model) -> None:
    """What a Trainer built on `model` and not trained to its end left in it (built and abandoned, or interrupted):
    its split rows folded back and its LoRA adapters merged (what they learned stays), its closed gate removed."""
    fold_an_earlier_split(model)
    merge_an_earlier_lora(model)
    remove_an_earlier_gate(model)
