"""Turn what users pass as a tokenizer into a fast Hugging Face tokenizer, with clear errors."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub.errors import StrictDataclassError
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .._typing import Tokenizer as FastTokenizer
from ..arguments import check_repo_id, offline_miss, unexpanded_home
from ..errors import InvalidArgumentError, InvalidTokenizerError, TokenizerLoadError
from ..headers import broken_links, load_config
from .spm_proto import parse_model

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
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=value)
    elif isinstance(value, (str, os.PathLike)):
        tokenizer = _from_path(value, argument)
    elif not hasattr(value, "backend_tokenizer"):
        held = hasattr(getattr(value, "tokenizer", None), "backend_tokenizer")  # a processor (vision-language models)
        fix = ", which holds a tokenizer: pass its .tokenizer (processor.tokenizer)" if held else f"; pass {_ACCEPTED}"
        raise InvalidTokenizerError(f"{argument} is a {type(value).__name__}{fix}.")
    else:
        tokenizer = value
    _check_has_vocabulary(tokenizer, value, argument)
    return tokenizer


def _from_path(value: str | os.PathLike, argument: str) -> Any:
    path = Path(value)
    if not str(value):
        raise TokenizerLoadError(f"{argument} is an empty path; pass {_ACCEPTED}.")
    if not path.exists():
        try:
            check_repo_id(str(value), argument=argument)
        except InvalidArgumentError:
            raise TokenizerLoadError(f"{argument}={str(value)!r} does not exist{unexpanded_home(value)}, and it is "
                                     "not a Hub repo id either: check the path.") from None
    if path.is_dir() and (why := broken_links(path, f"{argument}={str(value)!r}")):  # else "no tokenizer.json"
        raise TokenizerLoadError(why)
    try:
        if path.is_file():
            return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(path)))
        tokenizer = AutoTokenizer.from_pretrained(str(value))
    except Exception as error:  # the loaders raise many types; the message is what users need
        if isinstance(error, StrictDataclassError) and path.is_dir():  # AutoTokenizer reads config.json too
            load_config(path)  # names config.json and its field
        if isinstance(error, OSError) and (offline := offline_miss(value)):
            raise TokenizerLoadError(f"Could not load {argument}={str(value)!r}: {offline}") from None
        missing = path.is_dir() and not Path(path, "tokenizer.json").is_file()
        if missing and _sentencepiece_without_protobuf(path):
            raise TokenizerLoadError(
                f"Could not load {argument}={str(value)!r}: it holds a SentencePiece tokenizer.model and no "
                "tokenizer.json, and transformers converts that file with the protobuf package, which is not "
                "installed: pip install protobuf sentencepiece (or put the model's tokenizer.json beside it)."
            ) from error
        raise TokenizerLoadError(
            f"Could not load {argument}={str(value)!r}{' (a folder without tokenizer.json)' if missing else ''}: "
            f"{type(error).__name__}: {' '.join(str(error).split()).rstrip('.')}. Check that it is {_ACCEPTED}, "
            "and that its files are complete."
        ) from error
    if not hasattr(tokenizer, "backend_tokenizer"):
        raise InvalidTokenizerError(f"{argument}={str(value)!r} loads as a slow tokenizer; pass {_ACCEPTED}.")
    if not isinstance(tokenizer.model_max_length, (int, float)):  # transformers compares it with each text's length
        raise TokenizerLoadError(f"{argument}={str(value)!r} has \"model_max_length\": "
                                 f"{tokenizer.model_max_length!r:.40} in its tokenizer_config.json, where a number of "
                                 "tokens belongs: it is edited by hand or corrupted; set a number (e.g. 8192) or "
                                 "remove the key.")
    return tokenizer


def _sentencepiece_without_protobuf(folder: Path) -> bool:
    """Does `folder` hold a SentencePiece tokenizer.model that transformers cannot convert for want of protobuf?
    (It then falls back to reading it as tiktoken, and its error asks for tiktoken.)"""
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        model = folder / "tokenizer.model"
        try:
            return model.is_file() and bool(parse_model(model.read_bytes()).pieces)
        except ValueError:
            return False
    return False


def _check_has_vocabulary(tokenizer: Any, value: Any, argument: str) -> None:
    """Refuse a tokenizer whose every token is an added (special) one: transformers builds such an empty tokenizer
    from a folder that lost its tokenizer.json, and it encodes any text to nothing."""
    backend = tokenizer.backend_tokenizer
    added = {token.content for token in backend.get_added_tokens_decoder().values()}
    if backend.get_vocab_size(with_added_tokens=False) > len(added):  # the common case, without building the vocab
        return
    if set(backend.get_vocab(with_added_tokens=False)) - added:
        return
    label = repr(str(value)) if isinstance(value, (str, os.PathLike)) else f"a {type(value).__name__}"
    raise TokenizerLoadError(
        f"{argument}={label} has no vocabulary: besides its {len(added)} added tokens "
        f"({', '.join(sorted(added)[:3])}{' ...' if len(added) > 3 else ''}) it holds no token, so it encodes any "
        "text to nothing or special tokens. transformers builds such a tokenizer from a folder without "
        "tokenizer.json (or the vocabulary files of its class): copy the tokenizer's files there, or save it again "
        "with tokenizer.save_pretrained(folder)."
    )


def fingerprint(tokenizer: FastTokenizer, *, below: int | None = None) -> str:
    """SHA-256 of a tokenizer's id -> token map (added tokens included); with `below`, of its ids below that only
    (a tokenizer that gained tokens after an extension, against the record of the tokenizer it grew from).

    Only what ties ids to embedding rows counts: transformers may rebuild a tokenizer's pipeline on reload (e.g. a
    Qwen2 folder always loads as `Qwen2Tokenizer`), which changes its serialization but not its vocabulary.
    """
    vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    pairs = sorted((index, token) for token, index in vocab.items() if below is None or index < below)
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()
