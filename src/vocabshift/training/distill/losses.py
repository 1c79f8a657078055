"""Losses that learn new embedding rows from the original model on the same text in the old tokenization.

Five objectives over the chunks of `_chunks.py` (chunk 0 is the shared first token: never scored itself, though
`next_piece_loss` scores the prediction made after it):

- `hidden_state_loss`: the student's hidden state after the last token of each chunk against the teacher's after
  the last token of the same chunk (both have read the same text there). Trains the input rows.
- `chunk_likelihood_loss`: the log probability the student gives each chunk (the sum over its tokens) against the
  teacher's. Trains the output rows (and the input rows through the context). Matching it makes the student's
  likelihood of the text, and so its bits per byte, the teacher's.
- `next_piece_loss`: after each chunk, the teacher's distribution over its next (old) token against the student's
  over its next token, each new token counted as the first old piece of its decomposition. Dense: every chunk end
  tells every new row how much probability its group of continuations should get. Trains the output rows.
- `piece_tree_loss`: after each chunk, along the next chunk's old pieces, how the student's tokens that share each
  prefix of them split by their next piece, against the teacher's distribution over that piece one old position
  further (`pieces.py`). `next_piece` fixes each first piece's share; this fixes the split inside it, which plain
  cross-entropy teaches only through the one target. Trains the output rows.
- `next_token_loss`: plain cross-entropy of the student's next token, as in ordinary training.

All are plain functions of model outputs and the collator's chunk maps, for custom training loops. Each is a mean
over sequences of a mean over the sequence's chunks (or tokens), so that every sequence weighs the same: with equal
per-device batch sizes, DDP's average of per-process losses and gradient accumulation's average of per-batch losses
then equal the loss of the whole batch on one process.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .pieces import PieceTree

__all__ = [
    "at_chunk_ends",
    "chunk_likelihood_loss",
    "chunk_log_probs",
    "first_piece_probs",
    "followed_chunks",
    "hidden_state_loss",
    "next_piece_loss",
    "next_token_loss",
    "piece_tree_loss",
    "teacher_gate",
    "text_nll",
    "token_log_probs",
]


def token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """`(batch, length)` log probability of each token given the ones before it (0 for the first token)."""
    shifted = logits[:, :-1].float()
    chosen = shifted.gather(-1, input_ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(shifted, dim=-1)
    return F.pad(chosen, (1, 0))


def chunk_log_probs(token_logps: torch.Tensor, chunk_ids: torch.Tensor, num_chunks: int) -> torch.Tensor:
    """`(batch, num_chunks)` log probability of each chunk: the sum over its tokens (padding, -1, is dropped)."""
    slots = torch.where(chunk_ids >= 0, chunk_ids, num_chunks)
    sums = token_logps.new_zeros(token_logps.shape[0], num_chunks + 1)
    return sums.scatter_add(1, slots, token_logps)[:, :num_chunks]


def _scored(chunk_mask: torch.Tensor) -> torch.Tensor:
    """Chunks that count: every real chunk but the first (the shared first token, identical on both sides)."""
    scored = chunk_mask.clone()
    scored[:, 0] = False
    return scored


def _sequence_mean(values: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over sequences (rows with something to score) of each row's mean over its masked entries, each entry
    times its weight when `weights` are given (the count stays every masked entry)."""
    counts = mask.sum(1)
    per_row = (values * (mask if weights is None else mask * weights)).sum(1) / counts.clamp(min=1)
    rows = counts > 0
    return per_row[rows].mean() if rows.any() else values.sum() * 0


def chunk_likelihood_loss(
    student_logps: torch.Tensor, teacher_logps: torch.Tensor, chunk_mask: torch.Tensor, *,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean absolute difference of student and teacher chunk log probabilities (nats per chunk).

    A distance in log space keeps a full gradient for unlikely chunks, where most of the bits of a text are; a
    distance between probabilities (ALM's binary cross-entropy) nearly vanishes there.
    """
    return _sequence_mean((student_logps - teacher_logps).abs(), _scored(chunk_mask), weights)


def at_chunk_ends(hidden: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """`(batch, chunks, hidden)`: the hidden state after the last token of each chunk (padding chunks: position 0)."""
    return hidden.gather(1, ends.clamp(min=0)[..., None].expand(-1, -1, hidden.shape[-1]))


def hidden_state_loss(student: torch.Tensor, teacher: torch.Tensor, chunk_mask: torch.Tensor, *,
                      weights: torch.Tensor | None = None) -> torch.Tensor:
    """Squared distance of the hidden states after each chunk (`at_chunk_ends` of both sides), relative to the
    squared norm of the teacher's."""
    student, teacher = student.float(), teacher.float()
    relative = (student - teacher).pow(2).sum(-1) / teacher.pow(2).sum(-1).clamp(min=1e-12)
    return _sequence_mean(relative, _scored(chunk_mask), weights)


def first_piece_probs(student_logits: torch.Tensor, first_pieces: torch.Tensor, old_vocab_size: int) -> torch.Tensor:
    """`(batch, chunks, old vocabulary + 1)`: the student's next-token probabilities (`at_chunk_ends` of the logits),
    each token's counted for the old id in `first_pieces` (itself for an old token, the first piece of its
    decomposition for a new one; the last slot, `old_vocab_size`, for tokens without one)."""
    probs = student_logits.float().softmax(-1)
    slots = first_pieces.to(probs.device).expand(*probs.shape[:2], -1)
    return probs.new_zeros(*probs.shape[:2], old_vocab_size + 1).scatter_add(2, slots, probs)


def next_piece_loss(grouped: torch.Tensor, teacher_logps: torch.Tensor, chunk_mask: torch.Tensor, *,
                    weights: torch.Tensor | None = None) -> torch.Tensor:
    """KL(teacher || student) of the next-token distributions after each chunk, the student's grouped by first
    piece (`first_piece_probs`) and the teacher's over the old vocabulary (`(batch, chunks, old vocabulary)`, log
    probabilities)."""
    teacher = teacher_logps.float()
    kl = (teacher.exp() * (teacher - grouped[..., :-1].clamp_min(1e-30).log())).sum(-1)
    return _sequence_mean(kl, chunk_mask, weights)


def teacher_gate(student_piece_logps: torch.Tensor, teacher_piece_logps: torch.Tensor,
                 chunk_mask: torch.Tensor) -> torch.Tensor:
    """`(batch, chunks)`: 1.0 after each chunk where the teacher gives the next chunk's first old piece a higher log
    probability than the student does (its tokens counted for their first pieces, `first_piece_probs`); 0.0 where
    the student does better, and after the last chunk (nothing to judge).

    Both predict the same event there, from the same text, so this says where the teacher still knows better.
    """
    return ((teacher_piece_logps > student_piece_logps) & followed_chunks(chunk_mask)).float()


def followed_chunks(chunk_mask: torch.Tensor) -> torch.Tensor:
    """`(batch, chunks)`: the real chunks that another real chunk follows (the ones whose next chunk can be read)."""
    return F.pad(chunk_mask[:, 1:], (0, 1), value=False)


def piece_tree_loss(student_logits: torch.Tensor, index: torch.Tensor, nodes: torch.Tensor,
                    teacher_slot_logps: torch.Tensor, tree: PieceTree, chunk_mask: torch.Tensor, *,
                    weights: torch.Tensor | None = None) -> torch.Tensor:
    """KL(teacher || student) of how each node of the piece tree along the next chunk's pieces splits, summed over
    the depths after each chunk.

    Args:
        student_logits (`(batch, chunks, new vocabulary)`): at the chunk ends.
        index (`(n, 3)`): batch row, chunk and depth - 1 of each split; nodes (`(n,)`): its node of `tree`.
        teacher_slot_logps (`(n, slots)`): the teacher's log probability of each child piece (slot 0, "stops
            here", takes what the children leave when a token stops there).
        chunk_mask: the collator's; chunks followed by another count (with 0 where nothing splits).
    """
    has_next = followed_chunks(chunk_mask)
    if not len(nodes):
        return _sequence_mean(student_logits.sum(-1) * 0, has_next)
    row, chunk, depth = index[:, 0], index[:, 1], index[:, 2] + 1  # index[:, 2] holds depth - 1
    start, size = tree.start[nodes], tree.size[nodes]
    columns = torch.arange(int(size.max()), device=nodes.device)
    padding = columns >= size[:, None]
    positions = (start[:, None] + columns).clamp(max=len(tree.order) - 1)
    logits = student_logits[row[:, None], chunk[:, None], tree.order[positions]].float()
    logits = logits.masked_fill(padding, torch.finfo(logits.dtype).min)
    slots = tree.slots[positions, depth[:, None]].masked_fill(padding, 0)
    student = torch.zeros_like(teacher_slot_logps, dtype=torch.float32).scatter_add(1, slots, logits.softmax(-1))
    teacher = teacher_slot_logps.float().exp().masked_fill(tree.child_pieces[nodes] < 0, 0.0)
    rest = (1 - teacher.sum(-1)).clamp(min=0) * tree.has_stop[nodes]
    teacher = torch.cat([rest[:, None], teacher[:, 1:]], -1)
    teacher = teacher / teacher.sum(-1, keepdim=True).clamp(min=1e-30)
    kl = (torch.xlogy(teacher, teacher) - teacher * student.clamp(min=1e-30).log()).sum(-1)
    per_chunk = kl.new_zeros(has_next.shape).index_put((row, chunk), kl, accumulate=True)
    return _sequence_mean(per_chunk, has_next, weights)


def text_nll(logits_of: Callable[[torch.Tensor], torch.Tensor], states: torch.Tensor, ids: torch.Tensor,
             mask: torch.Tensor, *, rows: int = 1024) -> torch.Tensor:
    """`(batch,)`: each sequence's negative log likelihood of its tokens after the first (nats, summed), from the
    states at the positions before them (`logits_of` turns states into logits; pass logits with the identity).
    `rows` positions at a time: the logits of a long batch over a large vocabulary are never all in memory."""
    sequence, position = (mask[:, 1:] > 0).nonzero(as_tuple=True)
    total = torch.zeros(len(ids), dtype=torch.float32, device=ids.device)
    for start in range(0, len(sequence), rows):
        at, where = sequence[start: start + rows], position[start: start + rows]
        nll = F.cross_entropy(logits_of(states[at, where]).float(), ids[at, where + 1], reduction="none")
        total.index_add_(0, at, nll)
    return total


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each next token (labels -100 are ignored): mean over sequences of the mean over tokens.

    The labels move one position left, not the logits: slicing the logits would copy them (and their gradient), which
    over a large vocabulary costs a noticeable part of an embedding-only step. Flat rows, as (batch, classes, length)
    would read transposed logits: slower."""
    targets = F.pad(labels[:, 1:], (0, 1), value=-100)  # the last position predicts nothing
    losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none", ignore_index=-100)
    return _sequence_mean(losses.view_as(targets), targets != -100)
