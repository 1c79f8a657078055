"""`DistillationWeights`: how much each distillation objective counts, and how much the teacher reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...arguments import check_flag, check_rate, is_int
from ...errors import InvalidArgumentError

__all__ = ["DistillationWeights"]

_OBJECTIVES = ("hidden", "chunk", "next_piece", "piece_tree", "next_token")


@dataclass(frozen=True)
class DistillationWeights:
    """Weights of the objectives (see `losses.py`) and the layer the hidden states come from.

    Attributes:
        hidden (`float`): hidden-state distance after each chunk (trains the input rows).
        chunk (`float`): chunk log-likelihood matching (trains the output rows, and the input rows).
        next_piece (`float`): the next-token distribution after each chunk, new tokens counted as their first old
            piece (trains the output rows, densely).
        piece_tree (`float`): along the next chunk's old pieces, how the tokens sharing each prefix split by their
            next piece (trains the output rows).
        next_token (`float`): plain next-token cross-entropy of the student.
        layer (`int`): index into `hidden_states` (-1: the last layer, after the final norm).
        teacher_share (`float`): the share of the sequences the teacher reads and its objectives score, counted
            over the stream of sequences a process trains on (`TeacherSchedule`): a quarter reads the first sequence
            of each batch of 4, or every fourth batch of one sequence (one per device and gradient accumulation,
            as for large models). `next_token` scores all of them, so a share below 1 needs it.
        gate (`bool`): count the teacher objectives only after chunks where the teacher gives the next piece a
            higher probability than the student does (`teacher_gate`).
        adaptive_share (`bool`): the teacher reads fewer sequences, and its objectives weigh less, as the student
            closes the teacher's lead on the next piece, and almost none once the student models the whole text
            better than the teacher (`TeacherSchedule`).
        source (`float`): the student's next-token loss on one sequence of source-language text every eighth loss
            (weighted 8 times), read at the output head only (`replay.py`): keeps new tokens from taking the
            source language's probability. Used by `DistillationTrainer`, which reads the source text only where
            the new tokens cut it differently.

    Why the default: `next_piece` + `piece_tree` + `next_token` + `hidden` is the combination that measured best per
    training step where the original model knows the language (README "Distillation"): `piece_tree` teaches the
    split inside each first-piece group that `next_piece` leaves to the one target, which matters most where first
    pieces are single letters (byte-level BPE); `hidden` trains how the rows read as inputs; `chunk` trails plain
    cross-entropy. But the teacher is the original model, and where the language is one it is weak in, the student
    soon predicts the text better than it: a teacher that keeps pulling then makes the student worse than plain
    cross-entropy. So the teacher counts only where it still knows better (`gate`), and reads less as its lead
    shrinks (`adaptive_share`), down to almost nothing once the student has caught up. The teacher reads the longer
    old tokenization, so reading every sequence costs more than the cross-entropy step itself; a quarter keeps most
    of the gain per step at a fraction of that cost (figures: README, benchmarks/bench_languages.py). `source` is on:
    where the new tokens share the source's script, the larger part of the source language's loss comes from new
    cuts of source words, which only the vocabulary avoids (`extend_vocabulary(target_texts=...)`), but the tokens
    kept for the target still take some of the source's next-token probability, which the replay gives back for a
    small share of a step; where they are of another script it reads nothing and costs nothing.
    """

    hidden: float = 1.0
    chunk: float = 0.0
    next_piece: float = 1.0
    piece_tree: float = 1.0
    next_token: float = 1.0
    layer: int = -1
    teacher_share: float = 0.25
    gate: bool = True
    adaptive_share: bool = True
    source: float = 1.0

    def __post_init__(self) -> None:
        for name in (*_OBJECTIVES, "source"):
            check_rate(getattr(self, name), name=name, positive=False)
        if not any(getattr(self, name) for name in _OBJECTIVES):
            raise InvalidArgumentError("Every weight is 0: give at least one objective a positive weight.")
        if not is_int(self.layer):
            raise InvalidArgumentError(f"layer={self.layer!r} is invalid: pass an index into hidden_states, e.g. -1.")
        share = self.teacher_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise InvalidArgumentError(f"teacher_share={share!r} is invalid: pass a share of the batch in (0, 1], "
                                       "e.g. 0.25 (the teacher reads a quarter of each batch's sequences).")
        for name in ("gate", "adaptive_share"):
            check_flag(getattr(self, name), name=name)
        if share < 1 and not self.next_token:
            raise InvalidArgumentError(f"teacher_share={share!r} needs next_token > 0: the sequences the teacher "
                                       "skips are scored by next_token alone. Set next_token=1, or teacher_share=1.")

    @classmethod
    def next_token_only(cls) -> DistillationWeights:
        """Plain next-token cross-entropy, every teacher objective and the replay off (the teacher never runs): the
        baseline."""
        return cls(hidden=0, chunk=0.0, next_piece=0, piece_tree=0, next_token=1, source=0.0)

    @property
    def uses_teacher(self) -> bool:
        return bool(self.hidden or self.chunk or self.next_piece or self.piece_tree)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
