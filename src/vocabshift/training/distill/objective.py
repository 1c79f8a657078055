"""The distillation objective: what the teacher gives per batch, and the student's loss on it (its weights:
`weights.py`).

Plain functions over a `DistillationCollator` batch, shared by `DistillationTrainer`, the probe and custom loops:
`teacher_targets` runs the teacher (no gradients), `distillation_loss` the student.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..._typing import Model
from ...errors import InvalidArgumentError
from .losses import (
    at_chunk_ends,
    chunk_likelihood_loss,
    chunk_log_probs,
    first_piece_probs,
    followed_chunks,
    hidden_state_loss,
    next_piece_loss,
    next_token_loss,
    piece_tree_loss,
    teacher_gate,
    text_nll,
    token_log_probs,
)
from .pieces import PieceTree
from .teacher import Teacher
from .weights import DistillationWeights

__all__ = [
    "TeacherTargets",
    "distillation_loss",
    "teacher_part",
    "teacher_targets",
]


@dataclass(frozen=True)
class TeacherTargets:
    """What the student is compared with, per chunk (`None` when the weights do not use it): the teacher's hidden
    states after each chunk, its log probability of each chunk, its next-token log probabilities there, and the
    splits of the piece tree along each next chunk (`piece_tree_loss`: where, which node, the teacher's log
    probabilities of its child pieces), and with `adaptive_share` its loss on each whole sequence (`text_nll`)."""

    hidden: torch.Tensor | None = None
    chunk_logps: torch.Tensor | None = None
    next_logps: torch.Tensor | None = None
    tree_index: torch.Tensor | None = None
    tree_nodes: torch.Tensor | None = None
    tree_logps: torch.Tensor | None = None
    piece_logps: torch.Tensor | None = None
    text_nll: torch.Tensor | None = None


def teacher_targets(teacher: Teacher, batch: dict[str, torch.Tensor], weights: DistillationWeights, *,
                    tree: PieceTree | None = None, count: int | None = None) -> TeacherTargets:
    """Run the teacher on the teacher side of a `DistillationCollator` batch (no gradients).

    `tree` (see `piece_tree`) is needed for the `piece_tree` objective; `count` is how many of the batch's first
    sequences the teacher reads (a `TeacherSchedule` decides; default: all). Empty targets when it reads none.
    """
    if weights.piece_tree and tree is None:
        raise InvalidArgumentError("The piece_tree objective needs tree=piece_tree(record, rows); pass it, or set "
                                   "DistillationWeights(piece_tree=0).")
    if not weights.uses_teacher or count == 0:
        return TeacherTargets()
    batch = teacher_part(batch, count)
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
    last = out.hidden if weights.layer == -1 else out.last_hidden
    walk = _tree_walk(batch, tree) if weights.piece_tree and tree is not None else None
    if weights.next_piece or weights.gate or walk is not None:
        targets.update(_head_targets(teacher, last, ends if weights.next_piece or weights.gate else None, walk))
    if weights.gate:
        logps = targets["next_logps"] if weights.next_piece else targets.pop("next_logps")
        targets["piece_logps"] = logps.gather(-1, next_pieces(batch)[..., None]).squeeze(-1)
    if weights.adaptive_share:
        targets["text_nll"] = text_nll(teacher.logits, last, batch["teacher_input_ids"],
                                       batch["teacher_attention_mask"])
    return TeacherTargets(**targets)


def teacher_part(batch: dict[str, torch.Tensor], count: int | None) -> dict[str, torch.Tensor]:
    """The first `count` sequences (None: all), which the teacher reads, with the teacher side cut to their
    longest."""
    if count is None or count >= len(batch["input_ids"]):
        return batch
    part = {name: value[:count] for name, value in batch.items()}
    width = int(part["teacher_attention_mask"].sum(1).max())
    for name in ("teacher_input_ids", "teacher_attention_mask", "teacher_chunk_ids"):
        part[name] = part[name][:, :width]
    return part


def next_pieces(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """`(batch, chunks)`: the first old token of the chunk after each chunk (the last token's id after the last)."""
    ids = batch["teacher_input_ids"]
    return ids.gather(1, (batch["teacher_chunk_ends"] + 1).clamp(min=0, max=ids.shape[1] - 1))


def _tree_walk(batch: dict[str, torch.Tensor], tree: PieceTree) -> dict[str, torch.Tensor]:
    """Walk the tree along each next chunk's old pieces (and past it while tokens go on): every split (a node with
    children) with its node, the flat old position of the node's last piece, and the node's child pieces."""
    ids, ends = batch["teacher_input_ids"], batch["teacher_chunk_ends"]
    lengths = batch["teacher_attention_mask"].sum(1, keepdim=True)
    node = torch.where(followed_chunks(batch["chunk_mask"]), 0, -1)  # the root, where a chunk follows
    offsets = torch.arange(len(ids), device=ids.device)[:, None] * ids.shape[1]  # row starts in the flat batch
    nodes, positions = [], []
    for depth in range(1, tree.depth + 1):
        at = ends + depth
        inside = (node >= 0) & (at < lengths)
        if not inside.any():  # every walk has ended
            break
        at = torch.where(inside, at, 0)
        node = tree.child(torch.where(inside, node, -1), ids.gather(1, at))
        nodes.append(node)
        positions.append(at + offsets)
    stacked = torch.stack(nodes, -1) if nodes else node.new_full((*node.shape, 0), -1)
    splits = (stacked >= 0) & (tree.child_pieces[stacked.clamp(min=0), 1] >= 0)  # a node with children
    flat = torch.stack(positions, -1)[splits] if positions else node.new_zeros(0)
    return {"index": splits.nonzero(), "nodes": stacked[splits], "positions": flat,
            "pieces": tree.child_pieces[stacked[splits]]}


def _head_targets(teacher: Teacher, last: torch.Tensor, ends: torch.Tensor | None,
                  walk: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """The teacher's next-token log probabilities after each chunk (`ends`) and at the tree's splits (`walk`):
    one call of the head on the distinct positions both need."""
    rows = torch.arange(len(last), device=last.device)[:, None] * last.shape[1]
    wanted = [(rows + ends.clamp(min=0)).flatten()] if ends is not None else []
    wanted += [walk["positions"]] if walk is not None else []
    unique, inverse = torch.unique(torch.cat(wanted), return_inverse=True)
    scores = teacher.logits(last.flatten(0, 1)[unique])
    norms = scores.float().logsumexp(-1, keepdim=True)  # the tree needs a few log probabilities per position
    out = {}
    if ends is not None:
        at = inverse[: ends.numel()]
        out["next_logps"] = (scores[at].float() - norms[at]).view(*ends.shape, -1)
        inverse = inverse[ends.numel():]
    if walk is not None:
        out.update(tree_index=walk["index"], tree_nodes=walk["nodes"],
                   tree_logps=scores[inverse[:, None], walk["pieces"].clamp(min=0)].float() - norms[inverse])
    return out


def distillation_loss(
    model: Model, targets: TeacherTargets, batch: dict[str, torch.Tensor], weights: DistillationWeights, *,
    first_pieces: torch.Tensor | None = None, tree: PieceTree | None = None, count: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss of the student on one `DistillationCollator` batch, and each objective's value.

    `first_pieces` (see `first_pieces`) is needed for the `next_piece` objective and the gate, `tree` (see
    `piece_tree`) for `piece_tree`; `count` is the one `teacher_targets` had. Each teacher objective is its mean over
    the sequences the teacher read, times their count over `teacher_share` × the batch size when a count is given
    (a `TeacherSchedule`'s), so that over a stream it weighs as if the teacher read that share of every batch; when
    it read none, only `next_token` scores the batch. With the gate, the values also hold `teacher_wins` (the share
    of the judged chunks it won) and `teacher_lead` (the mean log probability it gave the next piece above the
    student's, nats); with `adaptive_share`, `teacher_text_lead` (the share of the student's loss on the whole text
    that the teacher's is below it, negative once the student models the text better).
    """
    gated = weights.gate and weights.uses_teacher
    needs_logits = (weights.chunk or weights.next_token or weights.next_piece or weights.piece_tree or gated
                    or targets.text_nll is not None)
    if weights.piece_tree and tree is None:
        raise InvalidArgumentError("distillation_loss: the piece_tree objective needs tree=piece_tree(record, rows); "
                                   "pass it, or set DistillationWeights(piece_tree=0).")
    if (weights.next_piece or gated) and first_pieces is None:
        raise InvalidArgumentError("distillation_loss: the next_piece objective and the gate need first_pieces="
                                   "first_pieces(record, rows); pass it, or set DistillationWeights(next_piece=0, "
                                   "gate=False).")
    size = len(batch["input_ids"])
    read = 0 if not weights.uses_teacher else size if count is None else min(count, size)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                output_hidden_states=weights.hidden > 0 and read > 0, logits_to_keep=0 if needs_logits else 1)
    parts: dict[str, torch.Tensor] = {}
    judged: dict[str, float] = {}
    if read:
        part = teacher_part(batch, read)
        parts, judged = _teacher_objectives(out, targets, part, weights, first_pieces, tree)
        if targets.text_nll is not None:
            judged["teacher_text_lead"] = _text_lead(out.logits[:read].detach(), part, targets.text_nll)
    scale = 1.0 if count is None else read / (weights.teacher_share * size)
    if weights.next_token:
        parts["next_token"] = next_token_loss(out.logits, batch["labels"])
    loss = sum(getattr(weights, name) * value * (1 if name == "next_token" else scale)
               for name, value in parts.items())
    return loss, {**{name: value.item() for name, value in parts.items()}, **judged}


def _text_lead(logits: torch.Tensor, part: dict[str, torch.Tensor], teacher: torch.Tensor) -> float:
    """How far the teacher's loss on the read sequences' whole text is below the student's, as a share of the
    student's (both sides hold the same text: the collator cuts them at one boundary)."""
    student = text_nll(lambda scores: scores, logits, part["input_ids"], part["attention_mask"])
    return ((student - teacher).sum() / student.sum().clamp(min=1e-30)).item()


def _teacher_objectives(out: Any, targets: TeacherTargets, part: dict[str, torch.Tensor],
                        weights: DistillationWeights, first_pieces: torch.Tensor | None,
                        tree: PieceTree | None) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Each teacher objective the weights use, on the sequences the teacher read (`part`, the first ones), and with
    the gate how the teacher fared on the chunks it judged (`teacher_wins`, `teacher_lead`)."""
    count, mask = len(part["input_ids"]), part["chunk_mask"]
    parts: dict[str, torch.Tensor] = {}
    if weights.next_piece or weights.piece_tree or weights.gate:
        logits = at_chunk_ends(out.logits[:count], part["chunk_ends"])
    if weights.next_piece or weights.gate:
        assert first_pieces is not None  # checked by distillation_loss
        # without next_piece, teacher_targets keeps only the next pieces' log probabilities: the gate reads the groups
        # of those pieces, and first_pieces numbers its groups up to its slot for tokens without one
        slots = targets.next_logps.shape[-1] if targets.next_logps is not None else int(
            max(first_pieces.max(), next_pieces(part).max()))
        grouped = first_piece_probs(logits, first_pieces, slots)
    gate: torch.Tensor | None = None
    judged: dict[str, float] = {}
    if weights.gate:
        assert targets.piece_logps is not None, "teacher_targets computed with other weights"
        gate, judged = _judge(grouped.detach(), targets.piece_logps, part)
    if weights.hidden:
        assert targets.hidden is not None, "teacher_targets computed with other weights"
        student = at_chunk_ends(out.hidden_states[weights.layer][:count], part["chunk_ends"])
        parts["hidden"] = hidden_state_loss(student, targets.hidden, mask, weights=gate)
    if weights.chunk:
        assert targets.chunk_logps is not None, "teacher_targets computed with other weights"
        logps = chunk_log_probs(token_log_probs(out.logits[:count], part["input_ids"]), part["chunk_ids"],
                                part["chunk_ends"].shape[1])
        # chunk k's likelihood is predicted after chunk k - 1, where the gate judged the teacher on its first piece
        judged_before = None if gate is None else F.pad(gate[:, :-1], (1, 0))
        parts["chunk"] = chunk_likelihood_loss(logps, targets.chunk_logps, mask, weights=judged_before)
    if weights.next_piece:
        assert targets.next_logps is not None
        parts["next_piece"] = next_piece_loss(grouped, targets.next_logps, mask, weights=gate)
    if weights.piece_tree:
        assert targets.tree_index is not None and targets.tree_nodes is not None and targets.tree_logps is not None
        assert tree is not None  # checked by distillation_loss
        parts["piece_tree"] = piece_tree_loss(logits, targets.tree_index, targets.tree_nodes, targets.tree_logps,
                                              tree, mask, weights=gate)
    return parts, judged


def _judge(grouped: torch.Tensor, teacher_logps: torch.Tensor,
           part: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """The gate (`teacher_gate`) of the chunks of `part`, the share of the judged ones the teacher won and its mean
    lead there (nats)."""
    student = grouped.gather(-1, next_pieces(part)[..., None]).squeeze(-1).clamp_min(1e-30).log()
    teacher = teacher_logps.float()
    gate = teacher_gate(student, teacher, part["chunk_mask"])
    judged = followed_chunks(part["chunk_mask"])
    if not judged.any():
        return gate, {}
    return gate, {"teacher_wins": gate[judged].mean().item(), "teacher_lead": (teacher - student)[judged].mean().item()}
