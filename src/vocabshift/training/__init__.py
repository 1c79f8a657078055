"""Training side: metrics (and, later, the embedding-only callback, probe and evaluate)."""

from .metrics import bits_per_byte

__all__ = ["bits_per_byte"]
