"""Training, in rooms: `cpt/` (embedding-only continued pretraining: the thin `EmbeddingOnlyCallback` over plain
functions), `distill/` (`DistillationTrainer`: the new rows learn from the original model), and here what measures
them or drives both (`evaluate`, `probe`, `bits_per_byte`, plots) and `pack_texts`, which packs text for either.

This list is what a training script needs; the plain functions of custom training loops are exported by the rooms
(`vocabshift.training.cpt`, `vocabshift.training.distill`).
"""

from .cpt import EmbeddingOnlyCallback, SecondStage, TrainableRows, freeze_for_embedding_training
from .distill import DistillationCollator, DistillationTrainer, DistillationWeights, TeacherSchedule
from .evaluation import Evaluation, ModelScores, evaluate
from .metrics import bits_per_byte
from .probing import ProbeResult, probe
from .texts import pack_texts

__all__ = [
    "DistillationCollator",
    "DistillationTrainer",
    "DistillationWeights",
    "EmbeddingOnlyCallback",
    "Evaluation",
    "ModelScores",
    "ProbeResult",
    "SecondStage",
    "TeacherSchedule",
    "TrainableRows",
    "bits_per_byte",
    "evaluate",
    "freeze_for_embedding_training",
    "pack_texts",
    "probe",
]
