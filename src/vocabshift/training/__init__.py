"""Training side: embedding-only CPT (plain functions + the thin Trainer callback), metrics, evaluate, probe."""

from .callback import EmbeddingOnlyCallback
from .distill_data import DistillationCollator, pack_texts
from .distill_objective import DistillationWeights, TeacherTargets, distillation_loss, teacher_targets
from .distillation import DistillationTrainer
from .evaluation import Evaluation, ModelScores, evaluate
from .freeze import (
    embedding_parameters,
    freeze_body,
    freeze_for_embedding_training,
    record_cpt,
    row_norms,
    trainable_row_ids,
)
from .metrics import bits_per_byte, token_nll
from .pieces import PieceTree, first_pieces, piece_tree
from .plots import plot_curves
from .probing import ProbeResult, probe
from .rows import TrainableRows
from .stage import SecondStage
from .teacher_schedule import TeacherSchedule

__all__ = [
    "DistillationCollator",
    "DistillationTrainer",
    "DistillationWeights",
    "EmbeddingOnlyCallback",
    "Evaluation",
    "ModelScores",
    "PieceTree",
    "ProbeResult",
    "SecondStage",
    "TeacherSchedule",
    "TeacherTargets",
    "TrainableRows",
    "bits_per_byte",
    "distillation_loss",
    "embedding_parameters",
    "evaluate",
    "first_pieces",
    "freeze_body",
    "freeze_for_embedding_training",
    "pack_texts",
    "piece_tree",
    "plot_curves",
    "probe",
    "record_cpt",
    "row_norms",
    "teacher_targets",
    "token_nll",
    "trainable_row_ids",
]
