"""How many of each batch's sequences the teacher of distillation reads, as training goes on.

The teacher's forward is most of what distillation adds to a step, and what it teaches is worth most while it
predicts the text better than the student. `TeacherSchedule` has it read `teacher_share` of the sequences a process
trains on, counted over the stream (the first ones of a batch: a quarter reads one sequence of each batch of 4, or
every fourth batch of one). With `adaptive_share` that share follows two running measures of the teacher on the
sequences it reads. Its lead on the next piece (`teacher_lead`: how much more log probability it gives the first old
piece of the next chunk than the student does) sets the share as a fraction of the largest that lead has been. Its
lead on the whole text (`teacher_text_lead`: how far its loss on the sequence is below the student's) decides whether
it still teaches at all: once the student models the text better (a language the original model is weak in, soon
after the start), the teacher reads only a sixty-fourth of the share, enough to keep both measured, so that the
student trains about as fast per second as with plain cross-entropy. The next-piece lead alone does not see this: the
teacher can still win most next pieces of a text the student already models better as a whole.
"""

from __future__ import annotations

import math

from ...errors import InvalidArgumentTypeError
from .weights import DistillationWeights

__all__ = ["TeacherSchedule"]

_SMOOTHING = 0.1  # weight of each teacher batch in the running mean of the lead (about the last 10 batches)
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
        self.text_lead: float | None = None

    @property
    def share(self) -> float:
        """The share of the sequences the teacher reads now."""
        share = self.weights.teacher_share
        if not self.weights.adaptive_share:
            return share
        if self.text_lead is not None and self.text_lead <= 0:  # the student models the text better
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
        return {"credit": self.credit, "lead": self.lead, "best_lead": self.best_lead, "text_lead": self.text_lead}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        self.credit = float(state["credit"] or 0.0)
        self.lead, self.best_lead, self.text_lead = state["lead"], state["best_lead"], state["text_lead"]

    def update(self, lead: float | None, text_lead: float | None = None) -> None:
        """Take the leads the teacher had on the sequences it just read (`distillation_loss`'s `teacher_lead` and
        `teacher_text_lead`; `None` where not measured)."""
        self.text_lead = _running(self.text_lead, text_lead)
        self.lead = _running(self.lead, lead)
        if self.lead is not None:
            self.best_lead = self.lead if self.best_lead is None else max(self.best_lead, self.lead)


def _running(mean: float | None, value: float | None) -> float | None:
    """The running mean `mean` moved toward `value` (kept as it is when `value` is missing)."""
    if value is None or math.isnan(value):
        return mean
    return value if mean is None else (1 - _SMOOTHING) * mean + _SMOOTHING * value


def _passed(credit: float) -> int:
    return math.ceil(credit - 1e-9)  # 0.3 * 10 is 3.0000000000000004
