"""What every initialization method receives and returns, and the tensor helpers they share.

A method is a pure function `(InitContext, config) -> InitResult`: it reads the model's current rows and the
alignment, and returns rows for the new tokens. It never touches the model; `extend.py` does all writing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..vocab.align import Alignment
from ..vocab.forms import TokenForm

__all__ = ["InitContext", "InitResult", "combine_rows", "median_norm", "per_dimension_normal", "per_side"]

_BLOCK = 8192


@dataclass(frozen=True)
class InitContext:
    """Read-only inputs of an initialization method.

    Attributes:
        source_input (`torch.Tensor`): the model's input rows of the source tokens, `(n_source, hidden)`, float32.
            Padding rows beyond the source tokenizer are not included. Do not modify it.
        source_output (`torch.Tensor | None`): the untied output (LM head) rows of the source tokens, or None when
            the head is tied to the input embeddings or the model has no head.
        alignment (`Alignment`): shared tokens, new token ids and their decompositions into source ids.
        source_tokenizer: the model's current tokenizer.
        target_tokenizer: the tokenizer the model will use (merged in extend mode, replaced in replace mode).
        seed (`int`): seed for every random draw, through `generator()`.
        tied (`bool`): the input rows also serve as the output head (tied embeddings).
        new_tokenizer: the target-language tokenizer as the user gave it (before merging in extend mode), whose
            ids index a helper model's rows and whose tokens cut a corpus for token-level word vectors; None when
            not known, then `target_tokenizer` stands in.
    """

    source_input: torch.Tensor
    source_output: torch.Tensor | None
    alignment: Alignment
    source_tokenizer: Any
    target_tokenizer: Any
    seed: int
    tied: bool = False
    new_tokenizer: Any = None

    @property
    def new_forms(self) -> list[TokenForm]:
        """Canonical forms of the tokens to initialize, in the order of `alignment.new_ids`."""
        return [self.alignment.target_forms[i] for i in self.alignment.new_ids]

    @property
    def num_new(self) -> int:
        return len(self.alignment.new_ids)

    def generator(self, offset: int = 0) -> torch.Generator:
        """A fresh CPU generator seeded from `seed` (+ `offset`, to draw input and output rows independently)."""
        return torch.Generator().manual_seed(self.seed + offset)


@dataclass(frozen=True)
class InitResult:
    """Rows for the new tokens, in the order of `alignment.new_ids`.

    Attributes:
        input_rows (`torch.Tensor`): `(n_new, hidden)` rows for the input embeddings.
        output_rows (`torch.Tensor | None`): `(n_new, hidden)` rows for an untied head; None when tied or headless.
        diagnostics (`dict`): JSON-serializable summary stored in the ExtensionRecord.
    """

    input_rows: torch.Tensor
    output_rows: torch.Tensor | None = None
    diagnostics: dict[str, Any] = field(default_factory=dict)


def per_side(context: InitContext, make: Callable[[torch.Tensor, torch.Generator], torch.Tensor]) -> InitResult:
    """Rows from `make(old_rows, generator)` for the input side and, when untied, the output side.

    The two sides draw from independent generators, both seeded from the context's seed.
    """
    rows = make(context.source_input, context.generator())
    output = context.source_output
    return InitResult(rows, None if output is None else make(output, context.generator(offset=1)))


def per_dimension_normal(matrix: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` rows drawn from N(mean, std) of `matrix`'s columns, independently per dimension."""
    std, mean = column_std_mean(matrix)
    noise = torch.randn(count, matrix.shape[1], generator=generator, dtype=torch.float32)
    return noise * std + mean


def column_std_mean(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column standard deviation (unbiased) and mean, as float32: blockwise sums of the rows minus the first
    block's mean (against cancellation) by matrix products, four times faster than `torch.std_mean(dim=0)`."""
    width, count = matrix.shape[1], matrix.shape[0]
    shift = matrix[:_BLOCK].float().mean(dim=0)
    total, squares = torch.zeros(width, dtype=torch.float64), torch.zeros(width, dtype=torch.float64)
    for start in range(0, count, _BLOCK):
        block = matrix[start : start + _BLOCK].float() - shift
        ones = torch.ones(1, len(block))
        total += (ones @ block)[0].double()
        squares += (ones @ block.square())[0].double()
    mean = total / count
    variance = (squares - count * mean.square()) / max(count - 1, 1)
    return variance.clamp_min(0).sqrt().float(), (mean + shift.double()).float()


def median_norm(matrix: torch.Tensor, rows: Sequence[int] | None = None) -> float:
    """Median L2 norm of `matrix`'s rows (or of the listed rows), computed blockwise."""
    index = torch.arange(matrix.shape[0]) if rows is None else torch.as_tensor(list(rows), dtype=torch.long)
    norms = [matrix[index[i : i + _BLOCK]].norm(dim=1) for i in range(0, len(index), _BLOCK)]
    return float(torch.cat(norms).median()) if norms else float("nan")


def combine_rows(matrix: torch.Tensor, pieces: Sequence[Sequence[int]], weights: Sequence[Sequence[float]]) -> torch.Tensor:
    """Row i = sum_j weights[i][j] * matrix[pieces[i][j]], as one sparse product (rows without pieces are zero)."""
    lengths = torch.tensor([len(p) for p in pieces], dtype=torch.long)
    rows = torch.repeat_interleave(torch.arange(len(pieces)), lengths)
    cols = torch.tensor([i for p in pieces for i in p], dtype=torch.long)
    values = torch.tensor([w for ws in weights for w in ws], dtype=torch.float32)
    shape = (len(pieces), matrix.shape[0])
    sparse = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=True)
    return torch.sparse.mm(sparse, matrix)
