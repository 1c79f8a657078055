"""The distillation objective: its weights, what the teacher gives per batch, and the student's loss on it.

Plain functions over a `DistillationCollator` batch, shared by `DistillationTrainer`, the probe and custom loops:
`teacher_targets` runs the teacher (no gradients), `distillation_loss` the student.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from ..errors import InvalidArgumentError
from ..record import ExtensionRecord, unpack_ids
from .distill_losses import (
    at_chunk_ends,
    chunk_likelihood_loss,
    chunk_log_probs,
    hidden_state_loss,
    next_piece_loss,
    next_token_loss,
    token_log_probs,
)
from .teacher import Teacher

__all__ = ["DistillationWeights", "TeacherTargets", "distillation_loss", "first_pieces", "teacher_targets"]

_OBJECTIVES = ("hidden", "chunk", "next_piece", "next_token")


@dataclass(frozen=True)
class DistillationWeights:
    """Weights of the objectives (see `distill_losses.py`) and the layer the hidden states come from.

    Attributes:
        hidden (`float`): hidden-state distance after each chunk (trains the input rows).
        chunk (`float`): chunk log-likelihood matching (trains the output rows, and the input rows).
        next_piece (`float`): the next-token distribution after each chunk, new tokens counted as their first old
            piece (trains the output rows, densely).
        next_token (`float`): plain next-token cross-entropy of the student.
        layer (`int`): index into `hidden_states` (-1: the last layer, after the final norm).

    The default, `next_piece` + `next_token`, is the combination that measured best per training step
    (benchmarks/results/distill_*.md, README "Distillation"): `hidden` alone barely lowers held-out bits per byte,
    and `chunk` trails plain cross-entropy. Per second of training it depends on the language: a step costs about
    twice a cross-entropy step (the teacher reads the longer old tokenization), which the gain outweighed on German
    but not on Russian, so compare both with `probe` before a long run.
    """

    hidden: float = 0.0
    chunk: float = 0.0
    next_piece: float = 1.0
    next_token: float = 1.0
    layer: int = -1

    def __post_init__(self) -> None:
        for name in _OBJECTIVES:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidArgumentError(f"{name}={value!r} is invalid: pass a non-negative weight.")
        if not any(getattr(self, name) for name in _OBJECTIVES):
            raise InvalidArgumentError("Every weight is 0: give at least one objective a positive weight.")
        if isinstance(self.layer, bool) or not isinstance(self.layer, int):
            raise InvalidArgumentError(f"layer={self.layer!r} is invalid: pass an index into hidden_states, e.g. -1.")

    @property
    def uses_teacher(self) -> bool:
        return bool(self.hidden or self.chunk or self.next_piece)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TeacherTargets:
    """What the student is compared with, per chunk (`None` when the weights do not use it): the teacher's hidden
    states after each chunk, its log probability of each chunk, and its next-token log probabilities there."""

    hidden: torch.Tensor | None = None
    chunk_logps: torch.Tensor | None = None
    next_logps: torch.Tensor | None = None


def teacher_targets(teacher: Teacher, batch: dict[str, torch.Tensor], weights: DistillationWeights) -> TeacherTargets:
    """Run the teacher on the teacher side of a `DistillationCollator` batch (no gradients)."""
    if not weights.uses_teacher:
        return TeacherTargets()
    out = teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=weights.layer,
                  logits=weights.chunk > 0)
    ends = batch["teacher_chunk_ends"]
    targets = {}
    if weights.hidden:
        targets["hidden"] = at_chunk_ends(out.hidden, ends)
    if weights.chunk:
        assert out.logits is not None  # asked for with logits=True
        targets["chunk_logps"] = chunk_log_probs(token_log_probs(out.logits, batch["teacher_input_ids"]),
                                                 batch["teacher_chunk_ids"], batch["chunk_ends"].shape[1])
    if weights.next_piece:
        last = out.hidden if weights.layer == -1 else out.last_hidden
        targets["next_logps"] = teacher.logits(at_chunk_ends(last, ends)).float().log_softmax(-1)
    return TeacherTargets(**targets)


def distillation_loss(
    model: Any, targets: TeacherTargets, batch: dict[str, torch.Tensor], weights: DistillationWeights, *,
    first_pieces: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss of the student on one `DistillationCollator` batch, and each objective's value.

    `first_pieces` (see `first_pieces`) is needed for the `next_piece` objective.
    """
    needs_logits = weights.chunk > 0 or weights.next_token > 0 or weights.next_piece > 0  # else one position only
    if weights.next_piece and first_pieces is None:
        raise InvalidArgumentError("distillation_loss: the next_piece objective needs first_pieces=first_pieces("
                                   "record, rows); pass it, or set DistillationWeights(next_piece=0).")
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                output_hidden_states=weights.hidden > 0, logits_to_keep=0 if needs_logits else 1)
    parts: dict[str, torch.Tensor] = {}
    if weights.hidden:
        assert targets.hidden is not None, "teacher_targets computed with other weights"
        student = at_chunk_ends(out.hidden_states[weights.layer], batch["chunk_ends"])
        parts["hidden"] = hidden_state_loss(student, targets.hidden, batch["chunk_mask"])
    if weights.chunk:
        assert targets.chunk_logps is not None, "teacher_targets computed with other weights"
        logps = chunk_log_probs(token_log_probs(out.logits, batch["input_ids"]), batch["chunk_ids"],
                                batch["chunk_ends"].shape[1])
        parts["chunk"] = chunk_likelihood_loss(logps, targets.chunk_logps, batch["chunk_mask"])
    if weights.next_piece:
        assert targets.next_logps is not None and first_pieces is not None, "targets computed with other weights"
        logits = at_chunk_ends(out.logits, batch["chunk_ends"])
        parts["next_piece"] = next_piece_loss(logits, targets.next_logps, first_pieces, batch["chunk_mask"])
    if weights.next_token:
        parts["next_token"] = next_token_loss(out.logits, batch["labels"])
    loss = sum(getattr(weights, name) * value for name, value in parts.items())
    return loss, {name: value.item() for name, value in parts.items()}


def first_pieces(record: ExtensionRecord, rows: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """For every row of the extended model, the old id whose probability it counts for in `next_piece_loss`: the
    old token it copies (extend mode: itself), the first piece of a new token's decomposition, or
    `record.old_vocab_size` (no old token: padding rows, tokens the old tokenizer cannot write)."""
    table = np.full(rows, record.old_vocab_size, dtype=np.int64)
    pairs = np.asarray(record.shared_pairs(), dtype=np.int64).reshape(-1, 2)
    table[pairs[:, 0]] = pairs[:, 1]
    lengths = np.asarray(unpack_ids(record.decompositions["lengths"]), dtype=np.int64)
    flat = np.asarray(unpack_ids(record.decompositions["ids"]), dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    new_ids = np.asarray(record.new_ids, dtype=np.int64)
    table[new_ids[lengths > 0]] = flat[starts[lengths > 0]]
    return torch.from_numpy(table).to(device)
