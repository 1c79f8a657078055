"""Train a target-language tokenizer in the same family as a model's tokenizer, ready for `mode="extend"`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ..errors import InvalidArgumentError
from .forms import backend_state, detect_family

__all__ = ["train_tokenizer"]


def train_tokenizer(texts: Iterable[str], *, like: Any, vocab_size: int, min_frequency: int = 2) -> Any:
    """Train a tokenizer on `texts` with the model kind, normalizer, pre-tokenizer and decoder of `like`.

    The result has no special tokens of its own: in extend mode the model keeps those of `like`.

    Args:
        texts (`Iterable[str]`): target-language text, one document or line per item.
        like: the model's fast tokenizer, whose pipeline the new tokenizer copies.
        vocab_size (`int`): size of the new vocabulary (base alphabet included).
        min_frequency (`int`, defaults to 2): minimum count of a merge or piece (BPE and WordPiece).

    Returns:
        `PreTrainedTokenizerFast`

    Example:
        ```python
        >>> ru = vocabshift.train_tokenizer(lines, like=tokenizer, vocab_size=16_000)
        ```
    """
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 2:
        raise InvalidArgumentError(f"vocab_size={vocab_size!r} is invalid: pass an int of at least 2.")
    state = backend_state(like)
    family, kind = detect_family(state), state["model"]["type"]
    old = like.backend_tokenizer
    model, trainer = _model_and_trainer(kind, family, state["model"], vocab_size, min_frequency)
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.decoder = old.normalizer, old.pre_tokenizer, old.decoder
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def _model_and_trainer(kind: str, family: str, old: dict[str, Any], size: int, min_frequency: int) -> tuple[Any, Any]:
    if kind == "WordPiece":
        prefix = old.get("continuing_subword_prefix") or "##"
        unk = old.get("unk_token") or "[UNK]"
        trainer = trainers.WordPieceTrainer(
            vocab_size=size, min_frequency=min_frequency, special_tokens=[unk], continuing_subword_prefix=prefix
        )
        return models.WordPiece(unk_token=unk, continuing_subword_prefix=prefix), trainer
    if kind == "Unigram":
        return models.Unigram(), trainers.UnigramTrainer(vocab_size=size, special_tokens=[], unk_token=None)
    alphabet = pre_tokenizers.ByteLevel.alphabet() if family == "bytelevel" else []
    trainer = trainers.BpeTrainer(
        vocab_size=size, min_frequency=min_frequency, initial_alphabet=alphabet, special_tokens=[]
    )
    model = models.BPE(byte_fallback=bool(old.get("byte_fallback")), ignore_merges=bool(old.get("ignore_merges")))
    return model, trainer
