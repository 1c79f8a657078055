"""Distillation across tokenizers: `DistillationTrainer` learns the new rows from the original model (the teacher)
reading the same text in the old tokenization; the collator, objective, teacher and schedule are plain pieces a
custom training loop can use."""

from .collator import DistillationCollator
from .objective import TeacherTargets, distillation_loss, teacher_targets
from .pieces import PieceTree, first_pieces, piece_tree
from .schedule import TeacherSchedule
from .teacher import Teacher
from .trainer import DistillationTrainer
from .weights import DistillationWeights

__all__ = [
    "DistillationCollator",
    "DistillationTrainer",
    "DistillationWeights",
    "PieceTree",
    "Teacher",
    "TeacherSchedule",
    "TeacherTargets",
    "distillation_loss",
    "first_pieces",
    "piece_tree",
    "teacher_targets",
]
