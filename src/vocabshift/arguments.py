"""Checks of plain arguments that several public functions take: counts, rates, lists of texts.

Each returns the value it checked and raises `InvalidArgumentTypeError` for a wrong type (a bool is not a count)
and `InvalidArgumentError` for a value out of range, naming the argument, the value and what is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["check_count", "check_rate", "check_texts", "is_int"]


def is_int(value: Any) -> bool:
    """An int that is not a bool (`True` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(value: Any, *, name: str, minimum: int = 1) -> int:
    """An int of at least `minimum` (1: a positive count; 0: a non-negative one, e.g. a seed)."""
    if not is_int(value):
        raise InvalidArgumentTypeError(f"{name}={value!r} is a {type(value).__name__}: pass an int >= {minimum}.")
    if value < minimum:
        raise InvalidArgumentError(f"{name}={value!r} is invalid: pass an int >= {minimum}.")
    return value


def check_rate(value: Any, *, name: str, positive: bool = True) -> float:
    """A finite real number, > 0 (`positive`, e.g. a learning rate) or >= 0 (e.g. a weight decay)."""
    accepted = "a finite number " + ("> 0" if positive else ">= 0")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentTypeError(f"{name}={value!r} is a {type(value).__name__}: pass {accepted}.")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InvalidArgumentError(f"{name}={value!r} is invalid: pass {accepted}.")
    return float(value)


def check_texts(value: Any, *, name: str) -> Sequence[str]:
    """A non-empty list (or tuple) of non-blank strings, one document or line each."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgumentTypeError(f"{name} is a {type(value).__name__}: pass a non-empty list of strings, one "
                                       "line or document each.")
    if not value:
        raise InvalidArgumentError(f"{name} is empty: pass a non-empty list of strings, one line or document each.")
    for index, text in enumerate(value):
        if not isinstance(text, str):
            raise InvalidArgumentTypeError(f"{name}[{index}] is a {type(text).__name__}: pass a non-empty list of "
                                           "strings, one line or document each.")
        if not text.strip():
            raise InvalidArgumentError(f"{name}[{index}] is {'empty' if not text else 'blank'}: drop empty lines "
                                       f"from {name}.")
    return value
