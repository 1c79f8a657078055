"""Named placeholder tokens for the embedding rows that no token uses.

A serving engine may sample any id below `config.vocab_size` (vLLM can, and its detokenizer fails on an id without
a token), so every row of a model vocabshift writes has a token: the rows `pad_to_multiple_of` adds, and padding rows
of the source model that no new token took, get special tokens that no text produces and that decoding with
`skip_special_tokens=True` leaves out.
"""

from __future__ import annotations

import itertools
from typing import Any

from tokenizers import AddedToken

__all__ = ["PLACEHOLDER", "add_placeholders"]

PLACEHOLDER = "<|vocabshift_unused_{}|>"


def add_placeholders(tokenizer: Any, rows: int) -> list[int]:
    """Append special placeholder tokens (`PLACEHOLDER`, numbered from 0, skipping names the vocabulary has) until
    `tokenizer` has `rows` tokens; returns their ids (none when it has as many already)."""
    count = rows - len(tokenizer)
    if count <= 0:
        return []
    taken = tokenizer.get_vocab()
    names = itertools.islice((n for n in map(PLACEHOLDER.format, itertools.count()) if n not in taken), count)
    tokens = [AddedToken(name, special=True, normalized=False) for name in names]
    tokenizer.add_tokens(tokens, special_tokens=True)
    return tokenizer.convert_tokens_to_ids([token.content for token in tokens])
