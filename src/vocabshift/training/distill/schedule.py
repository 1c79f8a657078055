"""How many of each batch's sequences the teacher of distillation reads, as training goes on.

The teacher's forward is most of what distillation adds to a step, and what it teaches is worth most while it
predicts the text better than the student. `TeacherSchedule` has it read `teacher_share` of the sequences a process
trains on, counted over the stream (the first ones of a batch: a quarter reads one sequence of each batch of 4, or
every fourth batch of one). With `adaptive_share` that share follows two measures of the teacher. Its lead on the next
piece (`teacher_lead`: how much more log probability it gives the first old piece of the next chunk than the student
does, a running mean over the sequences it reads) sets the share as a fraction of the largest that lead has been. Its
lead on the whole text decides whether it still teaches at all: once the student models the text better (a language
the original model is weak in, soon after the start), the teacher reads only a sixty-fourth of the share, enough to
keep both measured, so that the student trains about as fast per second as with plain cross-entropy. The next-piece
lead alone does not see this: the teacher can still win most next pieces of a text the student already models better
as a whole.

The text lead is `1 - teacher_rate / student_rate`, each a loss per token of the teacher's cut of the text. The
teacher is frozen, so its rate is one number, estimated from every reading at once: the reading's paired ratio (the
teacher's loss over the student's on the same text) times the student's rate then. The student's rate moves, and is
measured on every batch at no cost (its loss is computed anyway). A running mean of the paired leads themselves lags
behind a student that improves fast: where the student passes the teacher within a few steps, it kept the teacher
reading for about ten more readings (benchmarks/results/teacher_phase.md).
"""

from __future__ import annotations

import math

from ...errors import InvalidArgumentError, InvalidArgumentTypeError
from .weights import DistillationWeights

__all__ = ["TeacherSchedule"]

_SMOOTHING = 0.1  # weight of each teacher batch in the running mean of the next-piece lead (about the last 10)
_RATE_SMOOTHING = 0.2  # weight of each batch in the running mean of the student's loss rate (about the last 5)
_FLOOR = 1 / 16  # the lowest share while the teacher still models the text better
_CAUGHT_UP = 1 / 64  # the share once the student models the text better: enough to see the teacher lead again


class TeacherSchedule:
    """Decides how many of each batch's first sequences the teacher reads (one schedule per training process).

    Args:
        weights (`DistillationWeights`): its `teacher_share` and `adaptive_share`.

    Raises:
        `InvalidArgumentTypeError`: `weights` is not a `DistillationWeights`.

    Example:
        ```python
        >>> schedule = TeacherSchedule(DistillationWeights(teacher_share=0.25, adaptive_share=False))
        >>> [schedule.count(1) for _ in range(5)]
        [1, 0, 0, 0, 1]
        ```
    """

    def __init__(self, weights: DistillationWeights) -> None:
        if not isinstance(weights, DistillationWeights):
            raise InvalidArgumentTypeError(f"weights is a {type(weights).__name__}: pass a DistillationWeights, e.g. "
                                           "DistillationWeights() for the default objective.")
        self.weights = weights
        self.credit = 0.0  # sequences the teacher should have read so far (share × sequences, summed)
        self.lead: float | None = None
        self.best_lead: float | None = None
        self.student_rate: float | None = None  # running mean of the student's loss per teacher token
        self.teacher_rate: float | None = None  # mean over the readings of the teacher's loss per teacher token
        self.readings = 0

    @property
    def text_lead(self) -> float | None:
        """How far the teacher's loss on the text is below the student's, as a share of the student's (None before
        the teacher has read)."""
        if self.teacher_rate is None or self.student_rate is None or self.student_rate <= 0:
            return None
        return 1 - self.teacher_rate / self.student_rate

    @property
    def share(self) -> float:
        """The share of the sequences the teacher reads now."""
        share = self.weights.teacher_share
        if not self.weights.adaptive_share:
            return share
        text_lead = self.text_lead
        if text_lead is not None and text_lead <= 0:  # the student models the text better
            return share * _CAUGHT_UP
        if self.lead is None or self.best_lead is None or self.best_lead <= 0:
            return share
        return share * min(1.0, max(_FLOOR, self.lead / self.best_lead))

    def count(self, batch_size: int) -> int:
        """How many of the next batch's first sequences the teacher reads: the whole numbers its credit passes."""
        if not self.weights.uses_teacher:
            return 0
        before, self.credit = self.credit, self.credit + self.share * batch_size
        return _passed(self.credit) - _passed(before)

    def state_dict(self) -> dict[str, float | None]:
        """What a checkpoint keeps, so that a resumed run schedules the teacher as the uninterrupted one does."""
        return {"credit": self.credit, "lead": self.lead, "best_lead": self.best_lead,
                "student_rate": self.student_rate, "teacher_rate": self.teacher_rate, "readings": self.readings}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        """Restore `state_dict()`'s (one saved before the rates were kept has the teacher measure them again)."""
        self.credit = float(state["credit"] or 0.0)
        self.lead, self.best_lead = state["lead"], state["best_lead"]
        self.student_rate, self.teacher_rate = state.get("student_rate"), state.get("teacher_rate")
        self.readings = int(state.get("readings") or 0)

    def update(self, lead: float | None, text_lead: float | None = None, student_rate: float | None = None) -> None:
        """Take what `distillation_loss` measured on the batch just trained: the teacher's `teacher_lead` and
        `teacher_text_lead` on the sequences it read, and the student's `student_rate` on the whole batch (`None`
        where not measured).

        Raises:
            `InvalidArgumentError`: a `text_lead` without the `student_rate` of the same batch.
        """
        if text_lead is not None and not math.isnan(text_lead) and student_rate is None:
            raise InvalidArgumentError("TeacherSchedule.update: text_lead needs the batch's student_rate too (both "
                                       "are in distillation_loss's values with adaptive_share): pass it.")
        self.student_rate = _running(self.student_rate, student_rate, _RATE_SMOOTHING)
        if text_lead is not None and not math.isnan(text_lead) and self.student_rate is not None:
            self.readings += 1
            estimate = (1 - text_lead) * self.student_rate  # the teacher's loss per teacher token, as of this batch
            known = self.teacher_rate if self.teacher_rate is not None else estimate
            self.teacher_rate = known + (estimate - known) / self.readings
        self.lead = _running(self.lead, lead, _SMOOTHING)
        if self.lead is not None:
            self.best_lead = self.lead if self.best_lead is None else max(self.best_lead, self.lead)


def _running(mean: float | None, value: float | None, weight: float) -> float | None:
    """The running mean `mean` moved `weight` of the way toward `value` (kept as it is when `value` is missing)."""
    if value is None or math.isnan(value):
        return mean
    return value if mean is None else (1 - weight) * mean + weight * value


def _passed(credit: float) -> int:
    return math.ceil(credit - 1e-9)  # 0.3 * 10 is 3.0000000000000004
