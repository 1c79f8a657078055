"""`EmbeddingOnlyCallback`: embedding-only continued pretraining inside an ordinary `transformers.Trainer`.

A thin adapter over `freeze.py` and `stage.py`. The Trainer builds its optimizer (and wraps the model for DDP)
after `on_init_end` and before `on_train_begin`, so the callback freezes in `on_init_end`: pass it in
`Trainer(callbacks=[...])`, not through `trainer.add_callback` later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from transformers import TrainerCallback

from ..errors import InvalidArgumentError, TrainingSetupError
from ..record import CONFIG_KEY, get_record
from .freeze import (
    ROW_CHOICES,
    RowGuard,
    embedding_parameters,
    freeze_body,
    record_cpt,
    row_norms,
    trainable_row_ids,
)
from .stage import BodyGate, SecondStage, body_parameters, inject_lora, merge_lora

__all__ = ["EmbeddingOnlyCallback"]

logger = logging.getLogger(__name__)
_PREFIX = "vocabshift/"


class EmbeddingOnlyCallback(TrainerCallback):
    """Train only the input embeddings and the output head (tied or untied), optionally only the new rows.

    With `rows="new"` the rows `extend_vocabulary` added are the only ones that change: the others stay
    bit-identical even with AdamW weight decay and momentum (their gradients are masked and their values restored
    after every optimizer step). Every logging step adds the mean norm of new and old rows to the logs
    (`vocabshift/embed_new_row_norm`, ...; they reach the console, `trainer.state.log_history` and callbacks listed
    after this one, not the reporting integrations, which run first). When training ends, the run (steps, tokens
    seen, final loss, learning rates, rows) is appended to the model's ExtensionRecord (`record.cpt`), which is
    saved in `config.json`. To count tokens seen it sets `args.include_num_input_tokens_seen="all"` (padding
    included) when it is "no"; set it to "non_padding" yourself to leave padding out.

    Distributed: works on one process and with DDP (`accelerate launch`, `torchrun`), with gradient accumulation.
    Under DeepSpeed the optimizer steps inside `backward()` and under FSDP2 gradient hooks never fire, so old rows
    would drift: the callback refuses both unless `rows="all"` without `head_learning_rate` or `second_stage`
    (plain freezing, which both handle). For new rows only under ZeRO-3/FSDP, use peft's `TrainableTokensConfig`.

    Args:
        rows (`str` or `list[int]`, defaults to `"new"`): `"new"` (the record's new ids), `"all"` (every row), or
            explicit row ids.
        head_learning_rate (`float`, *optional*): peak learning rate of an untied output head (the Trainer's
            `learning_rate` drives the input embeddings); it follows the same schedule. Implemented by scaling the
            head's update after each step, which is exact for SGD, Adam and AdamW (their update is proportional to
            the learning rate).
        second_stage (`SecondStage`, *optional*): after `second_stage.after_step` steps, the body (or LoRA
            adapters on it) joins training. LoRA adapters are merged into the weights at the end of training.

    Raises:
        `InvalidArgumentError`: bad arguments, rows out of range (when the Trainer is built).
        `RecordError`: `rows="new"` on a model without an ExtensionRecord.
        `TrainingSetupError`: the Trainer's optimizer was built before the callback could freeze the body
            (`optimizers=(...)` built over all parameters, or the callback added after the Trainer was built), or
            an unsupported DeepSpeed/FSDP setup.

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
    ) -> None:
        if isinstance(rows, str) and rows not in ROW_CHOICES:
            raise InvalidArgumentError(f"rows={rows!r} is invalid: pass 'new', 'all' or a list of row ids.")
        if head_learning_rate is not None and not (isinstance(head_learning_rate, float) and head_learning_rate > 0):
            raise InvalidArgumentError(f"head_learning_rate={head_learning_rate!r} is invalid: pass a positive float.")
        if second_stage is not None and not isinstance(second_stage, SecondStage):
            raise InvalidArgumentError(f"second_stage is a {type(second_stage).__name__}: pass a SecondStage.")
        self.rows = rows
        self.head_learning_rate = head_learning_rate
        self.second_stage = second_stage
        self._model: Any = None
        self._state: dict[str, Any] = {}

    def on_init_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        """Freeze the body (before the Trainer builds its optimizer) and check any optimizer given to the Trainer."""
        _refuse_backend(args, self)
        ids = trainable_row_ids(model, self.rows)
        embeddings = embedding_parameters(model)
        if self.head_learning_rate is not None and len(embeddings) < 2:
            raise InvalidArgumentError(
                f"head_learning_rate needs an untied output head, but {type(model).__name__}'s head is tied to its "
                "input embeddings (or absent): drop head_learning_rate."
            )
        stage = self.second_stage
        tuner = inject_lora(model, stage.lora, seed=args.seed) if stage is not None and stage.lora else None
        body = body_parameters(model, tuner, embeddings) if stage is not None else []
        freeze_body(model, keep=body)
        self._model = model
        self._state = {"ids": ids, "embeddings": embeddings, "body": body, "tuner": tuner, "logs": {}}
        _check_optimizer(optimizer, model, [*embeddings, *body])
        if args.include_num_input_tokens_seen == "no":
            args.include_num_input_tokens_seen = "all"

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        """Check the optimizer again, then install the row guard, the body gate and the head-rate scaler."""
        if self._model is None or model is not self._model:
            raise TrainingSetupError(
                "EmbeddingOnlyCallback did not see this model when the Trainer was built (it was added with "
                "trainer.add_callback, or to another Trainer), so the optimizer was built before it could freeze the "
                "body. Pass it in Trainer(..., callbacks=[EmbeddingOnlyCallback(...)])."
            )
        s = self._state
        _check_optimizer(optimizer, model, [*s["embeddings"], *s["body"]])
        s["guard"] = RowGuard(s["embeddings"], s["ids"])
        s["gate"] = BodyGate(s["body"]) if self.second_stage is not None else None
        self._maybe_open_gate(state)
        s["head"] = None
        if self.head_learning_rate is not None:
            _check_linear_in_lr(optimizer)
            ratio = self.head_learning_rate / args.learning_rate
            s["head"] = _HeadRate(s["embeddings"][1], s["ids"], ratio)
        s["new_ids"] = _new_ids(model)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._state.get("gate") is not None:
            self._state["gate"].drop_gradients()
        if self._state.get("head") is not None:
            self._state["head"].save()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._state.get("head") is not None:
            self._state["head"].apply()
        self._state["guard"].restore()

    def on_step_end(self, args, state, control, **kwargs):
        self._maybe_open_gate(state)

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        """Add row-norm figures to training logs; remember the last loss for the record."""
        if logs is None or self._model is None:
            return
        self._state["logs"].update({k: logs[k] for k in ("loss", "train_loss") if k in logs})
        if "loss" in logs and "new_ids" in self._state:
            figures = {_PREFIX + k: v for k, v in row_norms(self._model, self._state["new_ids"]).items()}
            logs.update(figures)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(figures)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        """Remove hooks, merge LoRA adapters, append the run to the record."""
        s = self._state
        for part in ("guard", "gate"):
            if s.get(part) is not None:
                s[part].remove()
        if s.get("tuner") is not None:
            merge_lora(s["tuner"])
            s["tuner"] = None
        if not record_cpt(self._model, self._entry(args, state)):
            logger.info("The model carries no vocabshift record: the CPT history is not stored.")

    def _maybe_open_gate(self, state) -> None:
        gate = self._state.get("gate")
        if gate is not None and state.global_step >= self.second_stage.after_step:
            gate.open()

    def _entry(self, args, state) -> dict[str, Any]:
        ids = self._state["ids"]
        rows = self._state["embeddings"][0].shape[0]
        return {
            "rows": self.rows if isinstance(self.rows, str) else "custom",
            "trainable_rows": rows if ids is None else len(ids),
            "steps": state.global_step,
            "tokens_seen": state.num_input_tokens_seen,
            "final_loss": self._state["logs"].get("loss"),
            "train_loss": self._state["logs"].get("train_loss"),
            "learning_rate": args.learning_rate,
            "head_learning_rate": self.head_learning_rate,
            "weight_decay": args.weight_decay,
            "lr_scheduler": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
            "total_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
            "world_size": args.world_size,
            "second_stage": None if self.second_stage is None else self.second_stage.to_dict(),
            "row_norms": row_norms(self._model, self._state.get("new_ids")),
        }


class _HeadRate:
    """Gives the untied head's trainable rows their own learning rate by scaling each step's update by `ratio`."""

    def __init__(self, head: torch.nn.Parameter, rows: torch.Tensor | None, ratio: float) -> None:
        self.head, self.ratio = head, ratio
        self.rows = torch.arange(head.shape[0], device=head.device) if rows is None else rows.to(head.device)
        self._before: torch.Tensor | None = None

    def save(self) -> None:
        self._before = self.head.detach()[self.rows].clone()

    @torch.no_grad()
    def apply(self) -> None:
        after = self.head[self.rows]
        self.head.index_copy_(0, self.rows, self._before + (after - self._before) * self.ratio)


def _new_ids(model: Any) -> torch.Tensor | None:
    if not isinstance(getattr(model.config, CONFIG_KEY, None), dict):
        return None
    return torch.tensor(get_record(model).new_ids, dtype=torch.long)


def _check_linear_in_lr(optimizer: Any) -> None:
    """head_learning_rate scales the head's update: exact only where the update is proportional to the rate."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the optimizer
    if not isinstance(inner, (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)):
        raise TrainingSetupError(
            f"head_learning_rate works with SGD, Adam and AdamW (updates proportional to the learning rate), not "
            f"{type(inner).__name__}: use optim='adamw_torch' (or 'sgd'), or drop head_learning_rate."
        )


def _check_optimizer(optimizer: Any, model: Any, trainable: list[torch.nn.Parameter]) -> None:
    if optimizer is None:
        return
    allowed = {id(p) for p in trainable}
    names = {id(p): name for name, p in model.named_parameters()}
    stray = [p for group in optimizer.param_groups for p in group["params"] if id(p) not in allowed]
    if stray:
        raise TrainingSetupError(
            f"The Trainer's optimizer holds {len(stray)} parameters that embedding-only training freezes (e.g. "
            f"{names.get(id(stray[0]), 'an unnamed one')!r}): it was built before EmbeddingOnlyCallback could "
            "freeze the body. Let the Trainer build it (drop optimizers=...), or build it over "
            "vocabshift.training.freeze_for_embedding_training(model).parameters."
        )


def _refuse_backend(args: Any, callback: EmbeddingOnlyCallback) -> None:
    """DeepSpeed steps inside backward() and FSDP2 skips tensor hooks: only plain freezing is safe there."""
    backend = _sharding_backend()
    plain = callback.rows == "all" and callback.head_learning_rate is None and callback.second_stage is None
    if backend is not None and not plain:
        raise TrainingSetupError(
            f"EmbeddingOnlyCallback cannot keep rows fixed (or gate the body) under {backend}: the optimizer step "
            "bypasses its gradient masks. Use rows='all' without head_learning_rate/second_stage, or train the "
            "new rows with peft's TrainableTokensConfig(token_indices=vocabshift.get_record(model).new_ids)."
        )


def _sharding_backend() -> str | None:
    """"DeepSpeed", "FSDP" or None, read where the Trainer decides it: the plugins in accelerate's state.

    (Neither `args.fsdp` nor ACCELERATE_USE_FSDP is enough: on a machine without GPUs the Trainer runs DDP with both.)
    """
    from accelerate.state import AcceleratorState

    state = AcceleratorState._shared_state
    if state.get("deepspeed_plugins"):
        return "DeepSpeed"
    if state.get("fsdp_plugin") is not None:
        return "FSDP"
    return None
