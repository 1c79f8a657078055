"""Training text packed into sequences of `max_length` tokens: the one packing helper of both objectives.

Short lines waste most of a padded sequence; packing consecutive lines fills it. Distillation needs the text itself
(its collator tokenizes it with both tokenizers and cuts both sides at a boundary they share), so it gets whole lines
joined by newlines; plain next-token training needs token ids only, so it gets exact blocks cut anywhere in the
stream of the lines' tokens. Files are read by `corpus.read_texts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, overload

import torch

from .._typing import Tokenizer
from ..arguments import check_count, check_flag
from ..corpus import text_lines
from ..errors import InvalidArgumentError
from ..vocab.load import load_tokenizer

__all__ = ["join_texts", "pack_texts"]


@overload
def pack_texts(texts: Iterable[str], tokenizer: Tokenizer, *, max_length: int,
               blocks: Literal[False] = False) -> list[str]: ...


@overload
def pack_texts(texts: Iterable[str], tokenizer: Tokenizer, *, max_length: int,
               blocks: Literal[True]) -> torch.Tensor: ...


def pack_texts(texts: Iterable[str], tokenizer: Tokenizer, *, max_length: int,
               blocks: bool = False) -> list[str] | torch.Tensor:
    """Pack consecutive `texts` into training sequences of `max_length` tokens of `tokenizer`, in order.

    Args:
        texts (`Iterable[str]`): lines or documents, in reading order.
        tokenizer: the tokenizer the model reads them with (the one `extend_vocabulary` returned).
        max_length (`int`): tokens per sequence (with `blocks=False`, the collator's first token included).
        blocks (`bool`, defaults to `False`): `False` gives texts for `DistillationCollator`: consecutive texts
            joined by newlines while they fit, a text too long for one sequence cut at token starts into pieces
            that fit (the collator would read its first `max_length` tokens and drop the rest).
            `True` gives token ids for a plain `Trainer`: the texts' tokens joined by the eos token and cut into
            whole blocks of exactly `max_length` (the rest dropped).

    Returns:
        `list[str]`, or with `blocks=True` a `(blocks, max_length)` int64 tensor on the CPU (a dataset: the
        Trainer moves its batches).

    Raises:
        `InvalidArgumentError`: `blocks=True` and the texts give less than one block; `max_length` below 2.
        `InvalidArgumentTypeError`: `max_length` is not an int, `blocks` not a bool.
        `CorpusError`: `texts` is a string or path (it would be read as its characters), holds a non-string, or has
            no text at all.
        `InvalidTokenizerError`: `tokenizer` is not a fast tokenizer.

    Example:
        ```python
        >>> texts = [{"text": t} for t in pack_texts(lines, tokenizer, max_length=128)]  # DistillationTrainer
        >>> ids = pack_texts(lines, tokenizer, max_length=128, blocks=True)  # Trainer: input_ids = labels = a row
        ```
    """
    texts = text_lines(texts)
    tokenizer = load_tokenizer(tokenizer, argument="tokenizer")
    check_count(max_length, name="max_length", minimum=2)
    check_flag(blocks, name="blocks")
    if blocks:
        return _blocks(tokenizer(texts, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id, max_length)
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    pieces = [piece for text, ids, offsets in zip(texts, encoded["input_ids"], encoded["offset_mapping"])
              for piece in _pieces(text, ids, offsets, max(1, max_length - 2))]
    return _joined([text for text, _ in pieces], [ids for _, ids in pieces], max_length)


def join_texts(texts: list[str], tokenizer: Tokenizer, max_length: int) -> list[str]:
    """`pack_texts(blocks=False)` of checked lines and a loaded tokenizer, with long texts left whole: for text
    vocabshift reads as a sample (the source replay), where reading the start of a long line is what it wants."""
    return _joined(texts, tokenizer(texts, add_special_tokens=False)["input_ids"], max_length)


def _joined(texts: list[str], encoded: Sequence[Sequence[int]], max_length: int) -> list[str]:
    """Consecutive texts joined by newlines while their tokens (one more each for the newline) fit."""
    packed, current, used = list[str](), list[str](), 1  # the collator's first token
    for text, ids in zip(texts, encoded):
        if current and used + len(ids) + 1 > max_length:
            packed.append("\n".join(current))
            current, used = [], 1
        current.append(text)
        used += len(ids) + 1
    if current:
        packed.append("\n".join(current))
    return packed


def _pieces(text: str, ids: list[int], offsets: list[tuple[int, int]], size: int) -> list[tuple[str, list[int]]]:
    """`text` and its tokens, or for more than `size` tokens its pieces of `size` tokens each, cut where a token
    starts (a piece cut so may tokenize a little differently at its start; the collator cuts what does not fit)."""
    if len(ids) <= size:
        return [(text, ids)]
    starts = [0, *(offsets[index][0] for index in range(size, len(ids), size))]
    pieces = [(text[start:stop], ids[index * size:(index + 1) * size])
              for index, (start, stop) in enumerate(zip(starts, [*starts[1:], len(text)]))]
    return [(piece, piece_ids) for piece, piece_ids in pieces if piece.strip()]


def _blocks(encoded: Sequence[Sequence[int]], eos: int | None, length: int) -> torch.Tensor:
    """The texts' tokens, each text followed by eos (when the tokenizer has one), cut into whole blocks."""
    separator = [eos] if eos is not None else []
    ids = [i for text_ids in encoded for i in (*text_ids, *separator)]
    usable = len(ids) // length
    if usable == 0:
        raise InvalidArgumentError(
            f"The training texts give {len(ids)} tokens, fewer than one block of {length} (the context length): "
            "pass more text."
        )
    return torch.tensor(ids[: usable * length], device="cpu").view(usable, length)
