"""Training text: read a corpus file, pack it into fixed-length token blocks."""

from __future__ import annotations

import lzma
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import InvalidArgumentError

__all__ = ["pack_blocks", "read_texts"]


def read_texts(path: str | os.PathLike) -> list[str]:
    """The non-empty lines of a UTF-8 text file (`.txt`, or xz-compressed `.xz`), one document per line.

    Raises:
        `InvalidArgumentError`: the file is missing, not UTF-8, or holds no text.
    """
    path = Path(path)
    opener = lzma.open if path.suffix == ".xz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            lines = [line.rstrip("\n") for line in handle if line.strip()]
    except FileNotFoundError:
        raise InvalidArgumentError(f"Text file {str(path)!r} does not exist: pass a UTF-8 .txt or .txt.xz file.") from None
    except (UnicodeDecodeError, lzma.LZMAError) as error:
        raise InvalidArgumentError(
            f"Text file {str(path)!r} is not UTF-8 text ({error}): convert it, e.g. iconv -t UTF-8, or decompress it."
        ) from None
    if not lines:
        raise InvalidArgumentError(f"Text file {str(path)!r} holds no text: pass one document per line.")
    return lines


def pack_blocks(tokenizer: Any, texts: Sequence[str], length: int) -> torch.Tensor:
    """`(blocks, length)` token ids on the CPU: the texts tokenized, joined by eos, cut into whole blocks (the rest
    dropped).

    Raises:
        `InvalidArgumentError`: the texts give less than one block.
    """
    separator = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids = [i for encoded in tokenizer(list(texts), add_special_tokens=False)["input_ids"] for i in (*encoded, *separator)]
    usable = len(ids) // length
    if usable == 0:
        raise InvalidArgumentError(
            f"The training texts give {len(ids)} tokens, fewer than one block of context_length={length}: pass more "
            "text."
        )
    return torch.tensor(ids[: usable * length], device="cpu").view(usable, length)  # a dataset: batches move
