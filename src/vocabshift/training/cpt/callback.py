"""`EmbeddingOnlyCallback`: embedding-only continued pretraining inside an ordinary `transformers.Trainer`.

A thin adapter over `freeze.py`, `rows.py` and `stage.py`. The Trainer builds its optimizer (and wraps the model for
DDP or FSDP) after `on_init_end` and before `on_train_begin`, so the callback freezes and splits off the trainable
rows in `on_init_end`: pass it in `Trainer(callbacks=[...])`, not through `trainer.add_callback` later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..._typing import Model
from ...arguments import check_rate
from ...errors import InvalidArgumentError, TrainingDivergedError, TrainingSetupError
from ...record import add_cpt_entry, new_ids_of
from ._backends import refuse_backend
from ._finite import check_finite
from ._optimizer import PREBUILT, check_optimizer, head_rate, peak_rate
from ._resume import (
    check_optimizer_state,
    install_resume_check,
    remove_resume_check,
    setup_of,
    write_marker,
)
from ._run import (
    Run,
    check_not_serving_another,
    check_once,
    check_ready,
    checkpoint_folder,
    next_token,
    record_entry,
    trained_nothing,
    undo_an_earlier_run,
    warn_of_a_zero_loss,
    warn_of_unseen_rows,
)
from .freeze import (
    check_not_an_adapter,
    check_rows,
    freeze_body,
    requires_grad_of,
    restore_requires_grad,
    row_norms,
    trainable_row_ids,
)
from .rows import embedding_parameters, split_rows
from .stage import BodyGate, SecondStage, body_parameters, inject_lora, merge_lora

__all__ = ["EmbeddingOnlyCallback"]

logger = logging.getLogger(__name__)
_PREFIX = "vocabshift/"


class EmbeddingOnlyCallback(TrainerCallback):
    """Train only the input embeddings and the output head (tied or untied), optionally only the new rows.

    With `rows="new"` the rows `extend_vocabulary` added are the only ones that change: they train as parameters of
    their own (float32 master weights for a half-precision model) while the embedding matrices are frozen, so the
    optimizer holds state for them only and the other rows stay bit-identical whatever the weight decay. Checkpoints
    are plain models (the rows are folded in when saving), and the rows are folded back for good when training
    ends. Every logging step adds the mean norm of new and old rows to the logs
    (`vocabshift/embed_new_row_norm`, ...; they reach the console, `trainer.state.log_history` and callbacks listed
    after this one, not the reporting integrations, which run first). When training ends, the run (steps, tokens
    seen, final loss, learning rates, rows, the objective, the command) is appended to the model's ExtensionRecord
    (`record.cpt`), which is saved in `config.json`: this callback is the one writer of that entry. To count tokens
    seen it sets `args.include_num_input_tokens_seen="all"` (padding included) when it is "no"; set it to
    "non_padding" yourself to leave padding out.

    Distributed: one process and DDP (`accelerate launch`, `torchrun`), with gradient accumulation, tested. Under
    FSDP2 and DeepSpeed ZeRO-1/2 the rows are ordinary parameters (not tested through the Trainer, which needs GPUs
    for them); `head_learning_rate` and `second_stage` are refused there, and so are split rows under FSDP1 and
    ZeRO-3 (which flatten or partition the matrices).

    Args:
        rows (`str` or `list[int]`, defaults to `"new"`): `"new"` (the record's new ids), `"all"` (every row), or
            explicit row ids (a list, a range, a 1-D integer tensor or array).
        head_learning_rate (`float`, *optional*): peak learning rate of an untied output head (the optimizer's own
            rate, the Trainer's `learning_rate` or the `lr` of `optimizer_cls_and_kwargs`, drives the input
            embeddings); it follows the same schedule. Implemented by scaling the
            head's update after each step, which is exact for SGD, Adam and AdamW (their update is proportional to
            the learning rate).
        second_stage (`SecondStage`, *optional*): after `second_stage.after_step` steps, the body (or LoRA
            adapters on it) joins training. LoRA adapters are merged into the weights at the end of training.
        command (`Sequence[str]`, *optional*): the command line that ran the training, as its words (`sys.argv`;
            `vocabshift train` passes its own), kept in the record entry as the extend command is.

    Raises:
        `InvalidArgumentError`: bad arguments, rows out of range (when the Trainer is built).
        `RecordError`: `rows="new"` on a model without an ExtensionRecord.
        `UnsupportedModelError`: a peft model (its adapters would not train, and its checkpoints would not hold the
            trained rows): train the model itself, and LoRA adapters through `second_stage`.
        `TrainingSetupError`: the Trainer's optimizer was built before the callback could split the rows
            (`optimizers=(...)`, or the callback added after the Trainer was built), an unsupported DeepSpeed/FSDP
            setup, or a resume from a checkpoint saved with other trainable rows (each checkpoint records its rows
            in `vocabshift_training.json`; checked before the first step).
        `TrainingDivergedError`: a step left a trained value NaN or infinite (checked after every step, before it
            is logged or saved).

    Example:
        ```python
        >>> tokenizer = model.extend_vocabulary(ru_tokenizer, method="subword")
        >>> args = TrainingArguments("out", learning_rate=1e-3, weight_decay=0.1, max_steps=1000)
        >>> trainer = Trainer(model=model, args=args, train_dataset=dataset,
        ...                   callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
        >>> trainer.train()
        >>> vocabshift.get_record(model).cpt[-1]["steps"]
        1000
        ```
    """

    def __init__(
        self,
        rows: str | Sequence[int] = "new",
        *,
        head_learning_rate: float | None = None,
        second_stage: SecondStage | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        rows = check_rows(rows)
        if head_learning_rate is not None:
            head_learning_rate = check_rate(head_learning_rate, name="head_learning_rate")
        if second_stage is not None and not isinstance(second_stage, SecondStage):
            raise InvalidArgumentError(f"second_stage is a {type(second_stage).__name__}: pass a SecondStage.")
        if command is not None and (isinstance(command, str) or not isinstance(command, Sequence)
                                    or not all(isinstance(word, str) for word in command)):
            raise InvalidArgumentError(f"command={command!r} is invalid: pass the words of the command as a list of "
                                       "strings (e.g. sys.argv), or None.")
        self.rows = rows
        self.head_learning_rate = head_learning_rate
        self.second_stage = second_stage
        self.command = None if command is None else list(command)
        self._objective: Callable[[], dict[str, Any]] | None = None
        self._model: Model | None = None
        self._run: Run | None = None

    @property
    def trainable_ids(self) -> torch.Tensor | None:
        """The embedding rows that train (sorted ids on the embeddings' device), None when every row trains.

        Known once the Trainer is built (`on_init_end`); every other row stays bit-identical.
        """
        return self._started().ids

    def _started(self) -> Run:
        if self._run is None:
            raise TrainingSetupError(
                "EmbeddingOnlyCallback.trainable_ids is known once the Trainer is built: pass the callback in "
                "Trainer(..., callbacks=[...]) and read it afterwards."
            )
        return self._run

    def on_init_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: Model | None = None, optimizer: torch.optim.Optimizer | None = None,
                    **kwargs: Any) -> None:
        """Freeze the body and split off the rows that train, before the Trainer builds its optimizer."""
        refuse_backend(self)
        check_not_an_adapter(model)
        check_not_serving_another(self._model, self._run, model)
        undo_an_earlier_run(model)
        ids = trainable_row_ids(model, self.rows)
        embeddings = embedding_parameters(model)
        if self.head_learning_rate is not None and len(embeddings) < 2:
            raise InvalidArgumentError(
                f"head_learning_rate needs an untied output head, but {type(model).__name__}'s head is tied to its "
                "input embeddings (or absent): drop head_learning_rate."
            )
        if optimizer is not None and ids is not None:
            raise TrainingSetupError(PREBUILT.format(rows=self.rows))
        flags, stage = requires_grad_of(model), self.second_stage
        tuner = inject_lora(model, stage.lora, seed=args.seed) if stage is not None and stage.lora else None
        body = body_parameters(model, tuner, embeddings) if stage is not None else []
        freeze_body(model, keep=body)
        self._model, self._objective = model, None  # a trainer of another loss describes it once built
        run = self._run = Run(ids=ids, rows=split_rows(model, ids), body=body, tuner=tuner, requires_grad=flags)
        install_resume_check(run.rows.model, self.training_setup())
        check_optimizer(optimizer, model, self._trainable())
        if args.include_num_input_tokens_seen == "no":
            args.include_num_input_tokens_seen = "all"

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Model | None = None, optimizer: torch.optim.Optimizer | None = None,
                       **kwargs: Any) -> None:
        """Check the optimizer again, then install the body gate and the head-rate scaler."""
        run = check_ready(self._model, self._run, model)
        check_once(run, state)
        check_optimizer(optimizer, model, self._trainable())
        if state.global_step > 0:  # resumed: the loaded optimizer state must be this run's
            check_optimizer_state(optimizer, self.training_setup())
        run.resumed_from = state.global_step
        if run.gate is not None:  # a train() of this Trainer that was interrupted: its gate, closed, would go on
            run.gate.remove()  # zeroing the body's gradients after this run's gate opens
        run.gate = BodyGate(run.rows.model, run.body) if self.second_stage is not None else None
        if self.second_stage is not None and self.second_stage.after_step >= state.max_steps:
            logger.warning(f"SecondStage(after_step={self.second_stage.after_step}) is not before max_steps="
                           f"{state.max_steps}: the body never trains in this run; lower after_step or train longer.")
        self._maybe_open_gate(state)
        run.learning_rate = peak_rate(optimizer, run.rows.parameters[0], args.learning_rate)
        head = self.head_learning_rate
        run.head = None if head is None else head_rate(optimizer, run.rows.parameters[1], head, args.learning_rate)
        run.new_ids = new_ids_of(model, embedding_parameters(model)[0].device)
        run.began = True

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              **kwargs: Any) -> None:
        run = self._started()
        if run.gate is not None:
            run.gate.drop_gradients()
        if run.head is not None:
            run.head.save()

    def on_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                          **kwargs: Any) -> None:
        run = self._started()
        if run.head is not None:
            run.head.apply()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        """Stop a diverged run (`TrainingDivergedError`, the rows folded back) before it is logged or saved."""
        try:
            check_finite(self._trainable(), args, state.global_step)
        except TrainingDivergedError:
            self._close()
            raise
        warn_of_unseen_rows(self._started(), self.rows, state)
        self._maybe_open_gate(state)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        """Write which rows train next to the checkpoint's optimizer state (checked when resuming)."""
        folder = checkpoint_folder(args, state)
        if state.is_world_process_zero and folder.is_dir():
            write_marker(folder, self.training_setup())

    def training_setup(self) -> dict[str, Any]:
        """What this run trains (`resume.setup_of`), as checkpoints record it."""
        return setup_of(self.rows, self._started().ids, self._trainable())

    def describe_objective(self, describe: Callable[[], dict[str, Any]]) -> None:
        """Have the trainer that computes the loss say what it is, for the record entry this callback writes
        (`objective`; `describe` is called when training ends). Without it the entry says a plain Trainer's loss, a
        causal LM's next-token cross-entropy (with the Trainer's `label_smoothing_factor`); `DistillationTrainer`
        calls this when it is built."""
        self._objective = describe

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, model: Model | None = None, **kwargs: Any) -> None:
        """Add row-norm figures to training logs; remember the last loss for the record."""
        if logs is None or self._model is None or self._run is None:
            return
        run = self._run
        run.logs.update({k: logs[k] for k in ("loss", "train_loss") if k in logs})
        if "loss" in logs:
            run.loss_step = state.global_step
            warn_of_a_zero_loss(run, logs["loss"], state)
        if "loss" in logs and run.began:
            figures = {_PREFIX + k: v for k, v in row_norms(self._model, run.new_ids).items()}
            logs.update(figures)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(figures)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     model: Model | None = None, **kwargs: Any) -> None:
        """Fold the trained rows back, remove hooks, merge LoRA adapters, give each parameter its `requires_grad`
        back, append the run to the record (not a run of no step: it trained nothing)."""
        self._close()
        if trained_nothing(state):
            return
        if not add_cpt_entry(self._model, self._entry(args, state)):
            logger.info("The model carries no vocabshift record: the CPT history is not stored.")

    def _close(self) -> None:
        run = self._started()
        remove_resume_check(run.rows.model)
        run.rows.fold()
        run.closed = True
        if run.gate is not None:
            run.gate.remove()
        if run.tuner is not None:
            merge_lora(run.tuner)
            run.tuner = None
        restore_requires_grad(run.rows.model, run.requires_grad)  # a later Trainer trains what it did before

    def _trainable(self) -> list[torch.nn.Parameter]:
        run = self._started()
        return [*run.rows.parameters, *run.body]

    def _maybe_open_gate(self, state: TrainerState) -> None:
        gate = self._run.gate if self._run is not None else None
        if gate is not None and self.second_stage is not None and state.global_step >= self.second_stage.after_step:
            gate.open()

    def _entry(self, args: TrainingArguments, state: TrainerState) -> dict[str, Any]:
        return record_entry(self._started(), self._model, args, state, rows=self.rows,
                            head_learning_rate=self.head_learning_rate, second_stage=self.second_stage,
                            objective=next_token(args) if self._objective is None else self._objective(),
                            command=self.command)
