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

__all__ = ["InitContext", "InitResult", "combine_rows", "draw", "median_norm", "per_dimension_normal", "per_side",
           "precise"]

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

    @property
    def device(self) -> torch.device:
        """Where the model's rows live: methods compute there (only seeded draws run on the CPU, see `draw`)."""
        return self.source_input.device

    def generator(self, offset: int = 0) -> torch.Generator:
        """A fresh CPU generator seeded from `seed` (+ `offset`, to draw input and output rows independently)."""
        return torch.Generator().manual_seed(self.seed + offset)


def draw(shape: tuple[int, ...], generator: torch.Generator, device: torch.device, *,
         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal noise from a seeded CPU generator (the same numbers on every device), moved to `device`
    (float64 becomes float32 on MPS)."""
    noise = torch.randn(shape, generator=generator, dtype=dtype, device=generator.device)
    return noise.to(device=device, dtype=precise(device) if dtype == torch.float64 else dtype)


def precise(device: torch.device) -> torch.dtype:
    """float64 for sums that need it, float32 on MPS (which has no float64)."""
    return torch.float32 if device.type == "mps" else torch.float64


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
    return draw((count, matrix.shape[1]), generator, matrix.device) * std + mean


def column_std_mean(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column standard deviation (unbiased) and mean, as float32: blockwise sums of the rows minus the first
    block's mean (against cancellation) by matrix products, four times faster than `torch.std_mean(dim=0)`."""
    width, count, device = matrix.shape[1], matrix.shape[0], matrix.device
    shift = matrix[:_BLOCK].float().mean(dim=0)
    wide = precise(device)
    total, squares = (torch.zeros(width, dtype=wide, device=device) for _ in range(2))
    for start in range(0, count, _BLOCK):
        block = matrix[start : start + _BLOCK].float() - shift
        ones = torch.ones(1, len(block), device=device)
        total += (ones @ block)[0].to(wide)
        squares += (ones @ block.square())[0].to(wide)
    mean = total / count
    variance = (squares - count * mean.square()) / max(count - 1, 1)
    return variance.clamp_min(0).sqrt().float(), (mean + shift.to(wide)).float()


def median_norm(matrix: torch.Tensor, rows: Sequence[int] | None = None) -> float:
    """Median L2 norm of `matrix`'s rows (or of the listed rows), computed blockwise."""
    device = matrix.device
    index = torch.arange(matrix.shape[0], device=device) if rows is None else torch.tensor(
        list(rows), dtype=torch.long, device=device)
    norms = [matrix[index[i : i + _BLOCK]].norm(dim=1) for i in range(0, len(index), _BLOCK)]
    return float(torch.cat(norms).median()) if norms else float("nan")


def combine_rows(matrix: torch.Tensor, pieces: Sequence[Sequence[int]], weights: Sequence[Sequence[float]]) -> torch.Tensor:
    """Row i = sum_j weights[i][j] * matrix[pieces[i][j]], as one sparse product (rows without pieces are zero)."""
    device = matrix.device
    lengths = torch.tensor([len(p) for p in pieces], dtype=torch.long, device=device)
    rows = torch.repeat_interleave(torch.arange(len(pieces), device=device), lengths)
    cols = torch.tensor([i for p in pieces for i in p], dtype=torch.long, device=device)
    values = torch.tensor([w for ws in weights for w in ws], dtype=torch.float32, device=device)
    shape = (len(pieces), matrix.shape[0])
    sparse = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=True, device=device)
    return torch.sparse.mm(sparse, matrix)
