"""Argument types of the `vocabshift` command: a value that cannot be right whatever the files say (a count of 0,
a negative rate, a malformed repo id) is an argparse error (usage, exit code 2) before anything is loaded.

Checks that need the files (a folder without config.json, a text file with too few lines) are the library's typed
errors, which `vocabshift` prints as `error: ...` with exit code 1.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from .arguments import check_repo_id, check_shard_size
from .errors import InvalidArgumentError
from .hub.push import check_revision

__all__ = ["CONTEXT", "NON_NEGATIVE_RATE", "POSITIVE_INT", "POSITIVE_RATE", "SEED", "SHARE", "branch",
           "given_path", "repo_id", "shard_size"]


def _number(kind: type, accepted: str, valid: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse type: `kind(text)` if it is finite and `valid`, else a usage error saying what is accepted."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not valid(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {accepted}")
        return value

    parse.__name__ = accepted  # argparse names the type by it in its own messages
    return parse


POSITIVE_INT = _number(int, "an integer >= 1", lambda value: value >= 1)
SEED = _number(int, "an integer in [0, 2**32)", lambda value: 0 <= value < 2**32)  # arguments.check_seed
CONTEXT = _number(int, "an integer >= 2 (a token to predict from, and one to predict)", lambda value: value >= 2)
POSITIVE_RATE = _number(float, "a finite number > 0", lambda value: value > 0)
NON_NEGATIVE_RATE = _number(float, "a finite number >= 0", lambda value: value >= 0)
SHARE = _number(float, "a share in (0, 1], e.g. 0.25", lambda value: 0 < value <= 1)


def _library(check: Callable[..., str]) -> Callable[[str], str]:
    """An argparse type from a library check: its typed error becomes a usage error with the same message."""

    def parse(text: str) -> str:
        try:
            return check(text)
        except InvalidArgumentError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = check.__name__
    return parse


repo_id = _library(check_repo_id)
branch = _library(check_revision)


def shard_size(text: str) -> str | int:
    """A shard size as `save_pretrained` takes it: a number with a unit (`2GB`, `500MB`) or a count of bytes."""
    try:
        return check_shard_size(int(text) if text.strip().isdigit() else text, name="max_shard_size")
    except InvalidArgumentError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def given_path(text: str) -> str:
    """A path (or Hub id) of an optional flag: an empty one (an unset shell variable, `--source-texts "$EN"`) is
    refused, where the command would read it as the flag left out and use the default without a word."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path: pass a path, or leave the flag out for its "
                                         "default")
    return text
