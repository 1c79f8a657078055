"""Training side: embedding-only CPT (plain functions + the thin Trainer callback), metrics, evaluate, probe."""

from .cpt import (
    EmbeddingOnlyCallback,
    SecondStage,
    TrainableRows,
    embedding_parameters,
    freeze_body,
    freeze_for_embedding_training,
    record_cpt,
    row_norms,
    trainable_row_ids,
)
from .distill import (
    DistillationCollator,
    DistillationTrainer,
    DistillationWeights,
    PieceTree,
    TeacherSchedule,
    TeacherTargets,
    distillation_loss,
    first_pieces,
    piece_tree,
    teacher_targets,
)
from .evaluation import Evaluation, ModelScores, evaluate
from .metrics import bits_per_byte, token_nll
from .plots import plot_curves
from .probing import ProbeResult, probe
from .texts import pack_texts

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
