"""Initialization methods; importing this package registers every built-in method."""

from . import mean, multivariate, random, subword
from .base import InitContext, InitResult

__all__ = ["InitContext", "InitResult", "mean", "multivariate", "random", "subword"]
