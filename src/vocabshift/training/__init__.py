"""Training side: embedding-only CPT (plain functions + the thin Trainer callback), metrics, evaluate, probe."""

from .callback import EmbeddingOnlyCallback
from .freeze import (
    RowGuard,
    embedding_parameters,
    freeze_body,
    freeze_for_embedding_training,
    record_cpt,
    row_norms,
    trainable_row_ids,
)
from .metrics import bits_per_byte, token_nll
from .stage import SecondStage

__all__ = [
    "EmbeddingOnlyCallback",
    "RowGuard",
    "SecondStage",
    "bits_per_byte",
    "embedding_parameters",
    "freeze_body",
    "freeze_for_embedding_training",
    "record_cpt",
    "row_norms",
    "token_nll",
    "trainable_row_ids",
]
