"""Initialization methods; importing this package registers every built-in method."""

from . import focus, hyperofa, mean, multivariate, ofa, random, salt, subword
from .base import InitContext, InitResult

__all__ = [
    "InitContext",
    "InitResult",
    "focus",
    "hyperofa",
    "mean",
    "multivariate",
    "ofa",
    "random",
    "salt",
    "subword",
]
