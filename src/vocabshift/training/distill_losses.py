"""Losses that learn new embedding rows from the original model on the same text in the old tokenization.

Three objectives over the chunks of `chunks.py` (chunk 0 is the shared first token and never scored):

- `hidden_state_loss`: the student's hidden state after the last token of each chunk against the teacher's after
  the last token of the same chunk (both have read the same text there). Trains the input rows.
- `chunk_likelihood_loss`: the log probability the student gives each chunk (the sum over its tokens) against the
  teacher's. Trains the output rows (and the input rows through the context). Matching it makes the student's
  likelihood of the text, and so its bits per byte, the teacher's.
- `next_token_loss`: plain cross-entropy of the student's next token, as in ordinary training.

All are plain functions of model outputs and the collator's chunk maps, for custom training loops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["chunk_likelihood_loss", "chunk_log_probs", "hidden_state_loss", "next_token_loss", "token_log_probs"]


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


def chunk_likelihood_loss(
    student_logps: torch.Tensor, teacher_logps: torch.Tensor, chunk_mask: torch.Tensor
) -> torch.Tensor:
    """Mean absolute difference of student and teacher chunk log probabilities (nats per chunk).

    A distance in log space keeps a full gradient for unlikely chunks, where most of the bits of a text are; a
    distance between probabilities (ALM's binary cross-entropy) nearly vanishes there.
    """
    scored = _scored(chunk_mask)
    return (student_logps - teacher_logps).abs()[scored].sum() / scored.sum().clamp(min=1)


def hidden_state_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    student_ends: torch.Tensor,
    teacher_ends: torch.Tensor,
    chunk_mask: torch.Tensor,
) -> torch.Tensor:
    """Squared distance of the hidden states after each chunk, relative to the teacher states' mean squared norm."""
    scored = _scored(chunk_mask)
    index = lambda ends, width: ends.clamp(min=0)[..., None].expand(-1, -1, width)  # noqa: E731
    student = student_hidden.float().gather(1, index(student_ends, student_hidden.shape[-1]))[scored]
    teacher = teacher_hidden.float().gather(1, index(teacher_ends, teacher_hidden.shape[-1]))[scored]
    if teacher.numel() == 0:
        return student_hidden.sum() * 0
    return (student - teacher).pow(2).sum(-1).mean() / teacher.pow(2).sum(-1).mean().clamp(min=1e-12)


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each next token (labels -100 are ignored), mean over tokens."""
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
