"""Train a target-language tokenizer in the same family as a model's tokenizer, ready for `mode="extend"`.

The new tokenizer keeps the normalizer, pre-tokenizer and decoder of `like`, so that both cut text the same way.
Training may need more: SentencePiece-style pipelines (Gemma, Llama-2) turn spaces into `▁` and leave word
splitting to the model, so the trainer is given a pre-tokenizer that cuts before each `▁` (its pieces then never
span words); a family that spells numbers digit by digit gets its digits isolated while training (WordPiece
learns its `##` digits instead); and with byte fallback the vocabulary holds the 256 `<0xNN>` pieces (and `like`'s
unk), so that no character is ever lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from huggingface_hub.utils import tqdm
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from .._typing import Tokenizer as FastTokenizer
from .._typing import TokenizerLike
from ..arguments import check_count, is_int
from ..corpus import text_lines
from ..errors import InvalidArgumentError, InvalidArgumentTypeError
from .forms import SPIECE, backend_state, detect_family
from .load import load_tokenizer

__all__ = ["train_tokenizer"]

logger = logging.getLogger(__name__)

_BYTE_PIECES = [f"<0x{byte:02X}>" for byte in range(256)]
_MAX_SIZE = 2**20
_SHORT = 0.95  # below this share of vocab_size the corpus ran out of pieces: worth a word to the user


def train_tokenizer(texts: Iterable[str], *, like: TokenizerLike, vocab_size: int, min_frequency: int = 2
                    ) -> FastTokenizer:
    """Train a tokenizer on `texts` with the model kind, normalizer, pre-tokenizer and decoder of `like`.

    The result has no special tokens of its own (in extend mode the model keeps those of `like`), but it keeps
    `like`'s word boundaries, digit convention, byte-fallback alphabet and unk token.

    Args:
        texts (`Iterable[str]`): target-language text, one document or line per item (not a path: read the file).
        like: the model's fast tokenizer (or its folder, tokenizer.json or repo id), whose pipeline is copied.
        vocab_size (`int`): size of the new vocabulary, alphabet and byte pieces included (at most 2**20).
        min_frequency (`int`, defaults to 2): minimum count of a merge or piece (BPE and WordPiece).

    Returns:
        `PreTrainedTokenizerFast`

    Raises:
        `CorpusError`: `texts` is a string or path, empty, or holds something other than strings.
        `InvalidArgumentError`: `vocab_size` is not an int above the alphabet `like`'s family needs and at most
            2**20 (`InvalidArgumentTypeError`: not an int at all).
        `InvalidTokenizerError`, `TokenizerLoadError`, `UnsupportedTokenizerError`: `like` is not a usable tokenizer.

    Example:
        ```python
        >>> ru = vocabshift.train_tokenizer(lines, like=tokenizer, vocab_size=16_000)
        ```
    """
    if not is_int(vocab_size):  # before the corpus is read; the size is checked against its alphabet below
        raise InvalidArgumentTypeError(f"vocab_size={vocab_size!r} is a {type(vocab_size).__name__}: pass an int, "
                                       "e.g. 16_000.")
    if vocab_size > _MAX_SIZE:  # the trainer reserves memory for every entry first: a huge one aborts the process
        raise InvalidArgumentError(f"vocab_size={vocab_size:,} is invalid: pass at most {_MAX_SIZE:,} (typical: "
                                   "8,000 to 32,000).")
    lines = text_lines(texts)
    like = load_tokenizer(like, argument="like")
    state = backend_state(like)
    family, model_state = detect_family(state), state["model"]
    reserved = _reserved(model_state, family)
    _check_size(vocab_size, len(reserved) + _alphabet(lines, family), min_frequency)
    old = like.backend_tokenizer
    model, trainer = _model_and_trainer(model_state, family, vocab_size - len(reserved), min_frequency)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.decoder = old.normalizer, old.decoder
    tokenizer.pre_tokenizer = _training_pre_tokenizer(old, family, like)
    tokenizer.train_from_iterator(tqdm(lines, desc="Training tokenizer", unit=" lines"), trainer=trainer)
    tokenizer.pre_tokenizer = old.pre_tokenizer
    if reserved:
        tokenizer = _with_reserved(tokenizer, reserved, model_state)
    trained = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    if len(trained) < _SHORT * vocab_size:
        logger.warning("train_tokenizer: vocab_size=%d was asked, the texts gave %d tokens (no more pieces occur "
                       "min_frequency=%d times together): more text, or a lower min_frequency, gives more.",
                       vocab_size, len(trained), min_frequency)
    return trained


def _reserved(model_state: dict[str, Any], family: str) -> list[str]:
    """Pieces the new vocabulary holds before the trained ones: `like`'s unk and, with byte fallback, the bytes."""
    if model_state["type"] == "WordPiece":
        return []
    unk = model_state.get("unk_token") if model_state["type"] == "BPE" else _unigram_unk(model_state)
    fallback = bool(model_state.get("byte_fallback")) and family == "sentencepiece"
    return ([unk] if unk else []) + (_BYTE_PIECES if fallback else [])


def _unigram_unk(model_state: dict[str, Any]) -> str | None:
    unk_id = model_state.get("unk_id")
    return None if unk_id is None else model_state["vocab"][unk_id][0]


def _alphabet(lines: list[str], family: str) -> int:
    """Entries the trainer gives single characters: the 256 bytes (byte-level), else the corpus's characters."""
    if family == "bytelevel":
        return 256
    return len(set().union(*map(set, lines)) | {SPIECE})


def _check_size(vocab_size: int, alphabet: int, min_frequency: Any) -> None:
    if vocab_size <= alphabet:
        raise InvalidArgumentError(
            f"vocab_size={vocab_size!r} is invalid: the tokenizer's alphabet (bytes or the corpus's characters, "
            f"byte-fallback pieces, unk) takes {alphabet} entries, so pass an int above {alphabet} (typical: 8,000 "
            "to 32,000)."
        )
    check_count(min_frequency, name="min_frequency", accepted="a positive int (default 2)")


def _model_and_trainer(old: dict[str, Any], family: str, size: int, min_frequency: int) -> tuple[Any, Any]:
    kind = old["type"]
    if kind == "WordPiece":
        prefix = old.get("continuing_subword_prefix") or "##"
        unk = old.get("unk_token") or "[UNK]"
        pieces = trainers.WordPieceTrainer(vocab_size=size, min_frequency=min_frequency, special_tokens=[unk],
                                           continuing_subword_prefix=prefix, show_progress=False)
        return models.WordPiece(unk_token=unk, continuing_subword_prefix=prefix), pieces
    if kind == "Unigram":
        return models.Unigram(), trainers.UnigramTrainer(vocab_size=size, special_tokens=[], unk_token=None,
                                                         show_progress=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet() if family == "bytelevel" else []
    trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=min_frequency, initial_alphabet=alphabet,
                                  special_tokens=[], show_progress=False)
    return models.BPE(ignore_merges=bool(old.get("ignore_merges"))), trainer


def _training_pre_tokenizer(old: Any, family: str, like: Any) -> Any:
    """`like`'s pre-tokenizer, a cut before each `▁` where it leaves words whole, and digit isolation where `like`
    spells numbers digit by digit: first, on the text itself, for byte-level (its characters such as '²' stand for
    bytes); after it for SentencePiece, whose Metaspace would give each isolated digit a `▁` of its own. Not for
    WordPiece, which spells a number with `##` digits: isolated, no `##` digit is learnt, and numbers become unk."""
    isolate = family != "wordpiece" and not _has_multi_digit_tokens(like)
    digits = [pre_tokenizers.Digits(individual_digits=True)] if isolate else []
    parts: list[Any] = [] if family == "sentencepiece" else digits
    if old.pre_tokenizer is not None:
        parts.append(old.pre_tokenizer)
    parts += digits if family == "sentencepiece" else []
    if family == "sentencepiece" and not _splits_words(old):
        parts.append(pre_tokenizers.Split(SPIECE, behavior="merged_with_next"))
    return pre_tokenizers.Sequence(parts) if parts else None


def _splits_words(old: Any) -> bool:
    """Does `like`'s normalizer + pre-tokenizer cut 'ab cd' into more than one piece?"""
    text = old.normalizer.normalize_str("ab cd") if old.normalizer is not None else "ab cd"
    return old.pre_tokenizer is not None and len(old.pre_tokenizer.pre_tokenize_str(text)) > 1


def _has_multi_digit_tokens(like: Any) -> bool:
    """Does `like`'s vocabulary hold numbers of two or more digits (Llama-3 does; Gemma and Llama-2 spell them)?"""
    return any(len(text) > 1 and text.isascii() and text.isdigit()
               for text in (token.lstrip(SPIECE + "\u0120 ") for token in like.get_vocab()))


def _with_reserved(tokenizer: Tokenizer, reserved: list[str], old: dict[str, Any]) -> Tokenizer:
    """The trained tokenizer with `reserved` pieces first in its vocabulary, byte fallback and unk as in `old`."""
    state = json.loads(tokenizer.to_str())
    model = state["model"]
    if model["type"] == "Unigram":
        trained = [entry for entry in model["vocab"] if entry[0] not in reserved]
        floor = min((score for _, score in trained), default=0.0)
        model["vocab"] = [[piece, floor - 1.0] for piece in reserved] + trained
        model["unk_id"] = 0 if old.get("unk_id") is not None else None
    else:
        trained = [piece for piece, _ in sorted(model["vocab"].items(), key=lambda item: item[1])
                   if piece not in reserved]
        model["vocab"] = {piece: index for index, piece in enumerate([*reserved, *trained])}
        model["unk_token"], model["fuse_unk"] = old.get("unk_token"), bool(old.get("fuse_unk"))
    model["byte_fallback"] = bool(old.get("byte_fallback"))
    return Tokenizer.from_str(json.dumps(state))
