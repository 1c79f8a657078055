"""Chunk alignment of two tokenizations of the same text, for distillation across tokenizers.

A chunk is a span of text at whose two ends both tokenizations have a token boundary: every character of the text
is in exactly one chunk, and each chunk is a run of whole tokens on each side. After the last token of a chunk,
student and teacher have read exactly the same text, so their hidden states there are comparable, and so is the
likelihood each side gives the chunk.

Boundaries come from the tokenizers' character offsets (which both map back through their normalizers to the raw
text), so they hold for byte-level BPE (a character cut into byte tokens has no boundary inside it), SentencePiece
(`▁` pieces, `<0xNN>` byte fallback), Unigram and WordPiece alike, and for added and special tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ChunkAlignment", "align_chunks", "token_boundaries"]


def token_boundaries(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where a tokenization can be cut: `(positions, last_tokens)`, both increasing.

    There is a boundary after token `i` when no later token starts before the text read so far ends (byte tokens of
    one character share its offsets, so the boundary comes after the last of them). A zero-width token joins the
    chunk before it.

    Args:
        offsets (`np.ndarray`): `(tokens, 2)` character offsets `[start, end)` of each token, in text order.

    Returns:
        the character position of each boundary and the index of the last token before it.
    """
    if len(offsets) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ends = np.maximum.accumulate(offsets[:, 1])
    later_starts = np.minimum.accumulate(offsets[::-1, 0])[::-1]
    next_start = np.append(later_starts[1:], np.iinfo(np.int64).max)
    last = np.flatnonzero(ends <= next_start)
    positions = ends[last]
    keep = np.append(positions[1:] != positions[:-1], True)  # one boundary per position: after its last token
    return positions[keep].astype(np.int64), last[keep].astype(np.int64)


@dataclass(frozen=True)
class ChunkAlignment:
    """The chunks two tokenizations of one text share.

    Attributes:
        student_ends / teacher_ends (`np.ndarray`): index of each chunk's last token on each side (increasing).
        student_chunks / teacher_chunks (`np.ndarray`): chunk index of every token on each side; tokens after the last
            shared boundary get `-1`.
    """

    student_ends: np.ndarray
    teacher_ends: np.ndarray
    student_chunks: np.ndarray
    teacher_chunks: np.ndarray

    def __len__(self) -> int:
        return len(self.student_ends)


def align_chunks(student_offsets: np.ndarray, teacher_offsets: np.ndarray) -> ChunkAlignment:
    """Chunks of two tokenizations (character offsets of each token) of the same text.

    Example:
        ```python
        >>> a = align_chunks(np.array([[0, 3], [3, 6]]), np.array([[0, 2], [2, 3], [3, 5], [5, 6]]))
        >>> a.student_ends.tolist(), a.teacher_ends.tolist(), a.teacher_chunks.tolist()
        ([0, 1], [1, 3], [0, 0, 1, 1])
        ```
    """
    s_positions, s_last = token_boundaries(np.asarray(student_offsets, dtype=np.int64).reshape(-1, 2))
    t_positions, t_last = token_boundaries(np.asarray(teacher_offsets, dtype=np.int64).reshape(-1, 2))
    _, s_index, t_index = np.intersect1d(s_positions, t_positions, assume_unique=True, return_indices=True)
    s_ends, t_ends = s_last[s_index], t_last[t_index]
    return ChunkAlignment(s_ends, t_ends, _chunk_of(s_ends, len(student_offsets)),
                          _chunk_of(t_ends, len(teacher_offsets)))


def _chunk_of(ends: np.ndarray, count: int) -> np.ndarray:
    """Chunk index of each of `count` tokens, given each chunk's last token; -1 after the last chunk."""
    chunks = np.searchsorted(ends, np.arange(count), side="left")
    chunks[chunks >= len(ends)] = -1
    return chunks.astype(np.int64)
