"""What `EmbeddingOnlyCallback` keeps between its hooks, from `on_init_end` to `on_train_end`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ._optimizer import HeadRate
from .rows import TrainableRows
from .stage import BodyGate

__all__ = ["Run", "checkpoint_folder", "next_token"]


@dataclass
class Run:
    """What the callback keeps between hooks.

    Attributes:
        ids / rows: the trainable row ids (None: every row) and their split (`TrainableRows`).
        body / tuner: the body parameters a second stage trains, and its LoRA tuner (None without).
        gate / head: the second stage's gate and the untied head's learning-rate scaler (None when unused).
        new_ids: the record's new ids (for the row-norm logs), None without a record.
        logs: the last `loss` / `train_loss` logged, for the record.
        began: `on_train_begin` has run (row norms are logged from then on).
    """

    ids: torch.Tensor | None
    rows: TrainableRows
    body: list[torch.nn.Parameter]
    tuner: Any
    gate: BodyGate | None = None
    head: HeadRate | None = None
    new_ids: torch.Tensor | None = None
    logs: dict[str, float] = field(default_factory=dict)
    began: bool = False


def checkpoint_folder(args: TrainingArguments, state: TrainerState) -> Path:
    """Where the Trainer saves (and by default resumes) the checkpoint of the current step."""
    return Path(args.output_dir or ".", f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


def next_token() -> dict[str, Any]:
    """The objective of a plain Trainer's loss, as the record entry keeps it: a causal LM's next-token
    cross-entropy."""
    return {"name": "next_token"}
