"""Embedding-only continued pretraining: the thin `EmbeddingOnlyCallback` over plain functions (freeze the body,
split off the rows that train, fold them back), the optional second stage, resume checks."""

from .callback import EmbeddingOnlyCallback
from .freeze import freeze_body, freeze_for_embedding_training, row_norms, trainable_row_ids
from .rows import TrainableRows, embedding_parameters
from .stage import SecondStage

__all__ = [
    "EmbeddingOnlyCallback",
    "SecondStage",
    "TrainableRows",
    "embedding_parameters",
    "freeze_body",
    "freeze_for_embedding_training",
    "row_norms",
    "trainable_row_ids",
]
