"""Training text packed into fixed-length token blocks (files are read by `corpus.read_texts`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .._typing import Tokenizer
from ..errors import InvalidArgumentError

__all__ = ["pack_blocks"]


def pack_blocks(tokenizer: Tokenizer, texts: Sequence[str], length: int) -> torch.Tensor:
    """`(blocks, length)` token ids on the CPU: the texts tokenized, joined by eos, cut into whole blocks (the rest
    dropped).

    Raises:
        `InvalidArgumentError`: the texts give less than one block.
    """
    separator = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    ids = [i for text_ids in encoded for i in (*text_ids, *separator)]
    usable = len(ids) // length
    if usable == 0:
        raise InvalidArgumentError(
            f"The training texts give {len(ids)} tokens, fewer than one block of context_length={length}: pass more "
            "text."
        )
    return torch.tensor(ids[: usable * length], device="cpu").view(usable, length)  # a dataset: batches move
