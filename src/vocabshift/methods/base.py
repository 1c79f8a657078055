"""What every initialization method receives and returns, and the tensor helpers they share.

A method is a pure function `(InitContext, config) -> InitResult`: it reads the model's current rows and the
alignment, and returns rows for the new tokens. It never touches the model; `extend.py` does all writing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from .._typing import Tokenizer
from ..errors import MethodOptionTypeError
from ..vocab.align import Alignment
from ..vocab.forms import TokenForm

__all__ = ["InitContext", "InitMethod", "InitResult", "combine_rows", "draw", "median_norm", "per_dimension_normal",
           "per_side", "precise", "resolved", "side_rows", "with_fallback"]

T = TypeVar("T")

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
            ids index a helper model's rows; its tokens' forms are `alignment.new_tokenizer_forms`. None when not
            known, then `target_tokenizer` stands in.
    """

    source_input: torch.Tensor
    source_output: torch.Tensor | None
    alignment: Alignment
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer
    seed: int
    tied: bool = False
    new_tokenizer: Tokenizer | None = None

    @property
    def new_forms(self) -> list[TokenForm]:
        """Canonical forms of the tokens to initialize, in the order of `alignment.new_ids`."""
        return [self.alignment.target_forms[i] for i in self.alignment.new_ids]

    @property
    def matrices(self) -> list[torch.Tensor]:
        """The old rows of each side: the input rows and, when the head is untied, the output rows."""
        return [self.source_input] + ([] if self.source_output is None else [self.source_output])

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

    @classmethod
    def from_sides(cls, rows: Sequence[torch.Tensor], diagnostics: dict[str, Any] | None = None) -> InitResult:
        """A result from the rows of each side, in the order of `InitContext.matrices`."""
        return cls(rows[0], rows[1] if len(rows) > 1 else None, diagnostics or {})


class InitMethod(Protocol):
    """What `register_method` registers: a pure function from the context and the method's config to rows."""

    def __call__(self, context: InitContext, config: Any, /) -> InitResult: ...


def side_rows(context: InitContext, make: Callable[[torch.Tensor, torch.Generator], T]) -> list[T]:
    """`make(old_rows, generator)` for each of `context.matrices` (input, then an untied output).

    The sides draw from independent generators, seeded from the context's seed (offsets 0 and 1).
    """
    return [make(matrix, context.generator(offset)) for offset, matrix in enumerate(context.matrices)]


def per_side(context: InitContext, make: Callable[[torch.Tensor, torch.Generator], torch.Tensor]) -> InitResult:
    """An `InitResult` of `side_rows(context, make)`."""
    return InitResult.from_sides(side_rows(context, make))


def with_fallback(matrix: torch.Tensor, found: torch.Tensor, rows: torch.Tensor, generator: torch.Generator
                  ) -> torch.Tensor:
    """`(len(found), hidden)` rows: `rows` where `found`, N(mean, std) of `matrix`'s columns elsewhere."""
    out = torch.empty(len(found), rows.shape[1], device=matrix.device)
    out[found] = rows
    out[~found] = per_dimension_normal(matrix, int((~found).sum()), generator)
    return out


def resolved(value: Any, expected: type[T], *, option: str, method: str) -> T:
    """`value` once it is what `vocabshift.inputs.resolve_inputs` makes of option `option` (loaded vectors, a
    helper matrix): methods read no file and train nothing themselves.

    Raises:
        `MethodOptionTypeError`: `value` is still a path, a corpus or a model (the method was called directly).
    """
    if not isinstance(value, expected):
        raise MethodOptionTypeError(
            f"Method {method!r} got {option} as a {type(value).__name__}, not a {expected.__name__}: call it "
            "through extend_vocabulary, or resolve its options first with vocabshift.inputs.resolve_inputs(config, "
            "new_tokenizer) (which loads files, trains word vectors and reads the helper's matrix)."
        )
    return value


def per_dimension_normal(matrix: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` rows drawn from N(mean, std) of `matrix`'s columns, independently per dimension."""
    std, mean = column_std_mean(matrix)
    return draw((count, matrix.shape[1]), generator, matrix.device) * std + mean


def column_std_mean(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column standard deviation (unbiased) and mean, as float32: blockwise sums of the rows minus the first
    block's mean (against cancellation) by matrix products, which is faster than `torch.std_mean(dim=0)`."""
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


def combine_rows(matrix: torch.Tensor, pieces: Sequence[Sequence[int]], weights: Sequence[Sequence[float]]
                 ) -> torch.Tensor:
    """Row i = sum_j weights[i][j] * matrix[pieces[i][j]], as one sparse product (rows without pieces are zero)."""
    device = matrix.device
    lengths = torch.tensor([len(p) for p in pieces], dtype=torch.long, device=device)
    rows = torch.repeat_interleave(torch.arange(len(pieces), device=device), lengths)
    cols = torch.tensor([i for p in pieces for i in p], dtype=torch.long, device=device)
    values = torch.tensor([w for ws in weights for w in ws], dtype=torch.float32, device=device)
    shape = (len(pieces), matrix.shape[0])
    sparse = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=True, device=device)
    return torch.sparse.mm(sparse, matrix)
