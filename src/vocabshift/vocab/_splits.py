"""SentencePiece's BPE convention in a tokenizer.json: a merge for every split of a piece into two pieces.

SentencePiece's BPE has no merge list: it joins any two adjacent pieces whose text is a piece, the piece of highest
score first. transformers converts such a model into a tokenizer.json with one merge for every split of every piece
into two pieces, in the order of the pieces (Llama-2's and Gemma-3's tokenizer.json are made so), which cuts text
exactly as SentencePiece does. A tokenizer trained by `tokenizers` has one merge per piece. Extending a converted
tokenizer keeps its convention (`add_every_split`), so that its tokenizer.model, llama.cpp's SentencePiece
tokenizer (both read scores, not merges) and the tokenizer.json cut text alike.
"""

from __future__ import annotations

import collections
from typing import Any

from ._splice import merge_pairs

__all__ = ["add_every_split", "has_every_split"]


def has_every_split(model: dict[str, Any]) -> bool:
    """Does the BPE model have a merge for every split of every piece into two pieces?"""
    vocab, merges = model["vocab"], set(merge_pairs(model))
    return all(split in merges for piece in vocab for split in _splits(piece, vocab))


def add_every_split(model: dict[str, Any], old_merges: int, first_new_id: int) -> None:
    """Rewrite the merges of an extended BPE model that had every split (its first `old_merges` merges) so that it
    has every split again, where SentencePiece would join them.

    A split of an old piece with a new part follows the old merges that build that piece; the new pieces follow the
    old merges in the order of their ids, each with all its splits. Splits go in the order of their parts' ids, as
    transformers orders them. Old merges keep their order, so text without new pieces is cut as before.
    """
    vocab = model["vocab"]
    old = merge_pairs(model)[:old_merges]
    last = {left + right: index for index, (left, right) in enumerate(old)}
    after: dict[int, list[tuple[str, str]]] = collections.defaultdict(list)
    new: list[tuple[str, str]] = []
    unplaced: list[tuple[str, str]] = []
    for piece, index in sorted(vocab.items(), key=lambda item: item[1]):
        splits = _splits(piece, vocab)
        if index >= first_new_id:
            new.extend(splits)
        elif piece in last:
            after[last[piece]].extend(s for s in splits if max(vocab[s[0]], vocab[s[1]]) >= first_new_id)
        else:  # an old piece no old merge built, which the new pieces can build
            unplaced.extend(splits)
    merges = []
    for index, pair in enumerate(old):
        merges += [pair, *after.get(index, [])]
    model["merges"] = [list(pair) for pair in merges + unplaced + new]


def _splits(piece: str, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Every split of `piece` into two pieces of `vocab`, in the order of their ids."""
    found = [(piece[:i], piece[i:]) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
    return sorted(found, key=lambda split: (vocab[split[0]], vocab[split[1]]))
