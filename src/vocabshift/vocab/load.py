"""Turn what users pass as a tokenizer into a fast Hugging Face tokenizer, with clear errors."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .._typing import Tokenizer as FastTokenizer
from ..arguments import check_repo_id
from ..errors import InvalidArgumentError, InvalidTokenizerError, TokenizerLoadError

__all__ = ["fingerprint", "load_tokenizer"]

_ACCEPTED = (
    "a fast tokenizer (AutoTokenizer.from_pretrained(...)), a tokenizers.Tokenizer, a tokenizer.json file, "
    "a folder saved with save_pretrained, or a Hub repo id"
)


def load_tokenizer(value: Any, *, argument: str) -> FastTokenizer:
    """A fast tokenizer from `value`.

    Args:
        value: a fast tokenizer, a `tokenizers.Tokenizer`, a path to a `tokenizer.json` or a tokenizer folder, or
            a Hub repo id.
        argument (`str`): the caller's argument name, for error messages.

    Raises:
        `InvalidTokenizerError`: for any other type (slow Python tokenizers included).
        `TokenizerLoadError`: if files are missing or corrupted.
    """
    if isinstance(value, Tokenizer):
        return PreTrainedTokenizerFast(tokenizer_object=value)
    if isinstance(value, (str, os.PathLike)):
        return _from_path(value, argument)
    if not hasattr(value, "backend_tokenizer"):
        raise InvalidTokenizerError(f"{argument} is a {type(value).__name__}; pass {_ACCEPTED}.")
    return value


def _from_path(value: str | os.PathLike, argument: str) -> Any:
    path = Path(value)
    if not str(value):
        raise TokenizerLoadError(f"{argument} is an empty path; pass {_ACCEPTED}.")
    if not path.exists():
        try:
            check_repo_id(str(value), argument=argument)
        except InvalidArgumentError:
            raise TokenizerLoadError(f"{argument}={str(value)!r} does not exist, and it is not a Hub repo id either: "
                                     "check the path.") from None
    try:
        if path.is_file():
            return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(path)))
        tokenizer = AutoTokenizer.from_pretrained(str(value))
    except Exception as error:  # the loaders raise many types; the message is what users need
        raise TokenizerLoadError(
            f"Could not load {argument}={str(value)!r}: {type(error).__name__}: {error}. "
            f"Check that it is {_ACCEPTED}, and that its files are complete."
        ) from error
    if not hasattr(tokenizer, "backend_tokenizer"):
        raise InvalidTokenizerError(f"{argument}={str(value)!r} loads as a slow tokenizer; pass {_ACCEPTED}.")
    return tokenizer


def fingerprint(tokenizer: FastTokenizer) -> str:
    """SHA-256 of a tokenizer's id -> token map (added tokens included).

    Only what ties ids to embedding rows counts: transformers may rebuild a tokenizer's pipeline on reload (e.g. a
    Qwen2 folder always loads as `Qwen2Tokenizer`), which changes its serialization but not its vocabulary.
    """
    vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    pairs = sorted((index, token) for token, index in vocab.items())
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()
