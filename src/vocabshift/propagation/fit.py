"""The LEP map W from base space to instruct space, fitted in float64 on base/instruct row pairs, blockwise.

`swap`: W = I. `overlap`: W = argmin ‖E_b[S] W − E_i[S]‖ over the tokens S that the adapted vocabulary shares with
the base one. `conversion`: the same pairs plus, for each new token, the mean of its decomposition's rows on both
sides (the decompositions stored in the ExtensionRecord, computed on canonical token forms, so byte-level
tokenizers are handled). The normal equations are accumulated over row blocks (memory O(hidden²)) and solved by
a complete orthogonal factorization (LAPACK gelsy; several times faster than the SVD-based gelsd at hidden 2048).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from huggingface_hub.utils import tqdm

from .checks import refuse_non_finite
from .shards import Matrix

__all__ = ["METHODS", "Fit", "FitPairs", "fit_map", "spread_runs"]

logger = logging.getLogger(__name__)

METHODS = ("swap", "overlap", "conversion")
_BLOCK_BYTES = 128 * 2**20
_SWAP_SAMPLE = 8192  # pairs on which `swap` measures the identity residual (a diagnostic; reading all costs seconds)


@dataclass(frozen=True)
class FitPairs:
    """The row pairs W is fitted on: old ids taken as they are, and groups of old ids averaged into one row."""

    single: torch.Tensor
    groups: Sequence[Sequence[int]] = ()

    @property
    def count(self) -> int:
        return len(self.single) + len(self.groups)


@dataclass(frozen=True)
class Fit:
    """A fitted map and how well it fits.

    Attributes:
        weight (`torch.Tensor | None`): the `(hidden, hidden)` float32 map; None for the identity (`swap`).
        rows (`int`): row pairs it was fitted on (for `swap`: measured on, at most 8,192 in 16 evenly spaced
            runs).
        residual (`float`): ‖E_b W − E_i‖ / ‖E_i‖ over those pairs.
        identity_residual (`float`): the same for W = I (how far the instruct rows moved from the base ones).
    """

    weight: torch.Tensor | None
    rows: int
    residual: float
    identity_residual: float

    def apply(self, rows: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        """`rows @ W` in float32, into `out` (at least as many rows); all-zero rows skip the product (the rows
        CPT left unchanged, when it trained only the new ones). For the identity, `rows` themselves."""
        if self.weight is None:
            return rows
        result = out[: len(rows)]
        changed = rows.any(dim=1)
        if bool(changed.all()):
            return torch.matmul(rows, self.weight, out=result)
        index = changed.nonzero().squeeze(1)
        result.zero_()[index] = rows[index] @ self.weight
        return result

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "residual": round(self.residual, 6),
                "identity_residual": round(self.identity_residual, 6)}


class _NormalEquations:
    """Running AᵀA, AᵀB, ‖B‖² and ‖A − B‖² in float64."""

    def __init__(self, hidden: int) -> None:
        self.gram = torch.zeros(hidden, hidden, dtype=torch.float64)
        self.cross = torch.zeros(hidden, hidden, dtype=torch.float64)
        self.target_norm = 0.0
        self.identity_error = 0.0
        self.work = [torch.empty(0, dtype=torch.float64) for _ in range(2)]  # reused float64 copies of the blocks

    def add_norms(self, a: torch.Tensor, b: torch.Tensor) -> None:
        """The norms alone, all that `swap` needs: row norms in the rows' dtype, summed in float64 (for float32 rows 3x
        faster than float64 throughout, relative error about 1e-9)."""
        self.target_norm += _squared_norm(b)
        self.identity_error += _squared_norm(a - b)

    def add(self, a: torch.Tensor, b: torch.Tensor) -> None:
        """The products and the norms, all in float64: the residual of a close fit is a small difference of these
        terms (‖B‖² − 2⟨W, AᵀB⟩ + ⟨W, AᵀA W⟩), which float32 norms would swamp."""
        a, b = (self._float64(rows, side) for side, rows in enumerate((a, b)))
        self.add_norms(a, b)
        matrix = a.numpy()  # NumPy runs `X.T @ X` as a symmetric rank-k update (syrk): half the products of a gemm
        self.gram += torch.from_numpy(matrix.T @ matrix)
        self.cross.addmm_(a.T, b)

    def _float64(self, rows: torch.Tensor, side: int) -> torch.Tensor:
        if rows.dtype == torch.float64:
            return rows
        if self.work[side].numel() < rows.numel():
            self.work[side] = torch.empty(rows.numel(), dtype=torch.float64)
        return self.work[side][: rows.numel()].view(rows.shape).copy_(rows)

    def solve(self) -> tuple[torch.Tensor, float, int]:
        """W (float64), ‖AW − B‖² computed from the accumulated products, and the rank of AᵀA."""
        result = torch.linalg.lstsq(self.gram, self.cross, driver="gelsy")
        weight = result.solution
        error = self.target_norm - 2 * float((weight * self.cross).sum()) + float((weight * (self.gram @ weight)).sum())
        return weight, max(error, 0.0), int(result.rank)


def spread_runs(ids: torch.Tensor, *, total: int | None = None, runs: int = 16) -> torch.Tensor:
    """At most `total` (default `_SWAP_SAMPLE`) entries of `ids` (along its first dimension): `runs` evenly spaced
    runs of consecutive entries (read in few calls, unlike a strided sample)."""
    total = _SWAP_SAMPLE if total is None else total
    if len(ids) <= total:
        return ids
    length = total // runs
    starts = torch.linspace(0, len(ids) - length, runs).long().tolist()
    return torch.cat([ids[start : start + length] for start in starts])


def _squared_norm(rows: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(rows, dim=1).double().square().sum())


def _step(hidden: int) -> int:
    """Rows per block: about 128 MB in float64 (larger blocks multiply faster)."""
    return max(1, _BLOCK_BYTES // (8 * hidden))


def _group_means(matrix: Matrix, groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Each group's mean row in float64: the distinct rows read once, summed by a sparse 0/1 product."""
    flat = torch.tensor([i for group in groups for i in group], dtype=torch.long)
    lengths = torch.tensor([len(group) for group in groups])
    unique, inverse = torch.unique(flat, return_inverse=True)
    owner = torch.repeat_interleave(torch.arange(len(groups)), lengths)
    members = torch.sparse_coo_tensor(torch.stack([owner, inverse]), torch.ones(len(flat), dtype=torch.float64),
                                      (len(groups), len(unique)), check_invariants=True)
    return torch.sparse.mm(members, matrix.gather(unique).double()) / lengths[:, None]


def _pair_blocks(base: Matrix, instruct: Matrix, pairs: FitPairs) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(base rows, instruct rows) blocks: single ids in float32, then group means in float64."""
    step = _step(base.hidden)
    buffers = [torch.empty(step * matrix.row_bytes, dtype=torch.uint8) for matrix in (base, instruct)]
    for start in range(0, len(pairs.single), step):
        ids = pairs.single[start : start + step]
        yield base.gather(ids, buffer=buffers[0]).float(), instruct.gather(ids, buffer=buffers[1]).float()
    for start in range(0, len(pairs.groups), step):
        groups = pairs.groups[start : start + step]
        yield _group_means(base, groups), _group_means(instruct, groups)


def fit_map(kind: str, base: Matrix, instruct: Matrix, pairs: FitPairs, *, side: str) -> Fit:
    """Fit W for one side (`"input"` embeddings or untied `"output"` head).

    Args:
        kind (`str`): the LEP kind, `"swap"`, `"overlap"` or `"conversion"`; `pairs` must hold that kind's pairs.
        base, instruct (`Matrix`): the side's matrices of the base and instruct models.
        pairs (`FitPairs`): the row pairs.
        side (`str`): for the progress bar.

    Returns:
        `Fit`
    """
    if kind == "swap":  # nothing to fit: the identity residual is measured on a sample of the pairs
        pairs = FitPairs(spread_runs(pairs.single))
    equations = _NormalEquations(base.hidden)
    total = sum(-(-count // _step(base.hidden)) for count in (len(pairs.single), len(pairs.groups)))
    for a, b in tqdm(_pair_blocks(base, instruct, pairs), desc=f"Fitting W ({side})", leave=False, total=total):
        (equations.add_norms if kind == "swap" else equations.add)(a, b)
    if not math.isfinite(equations.target_norm + equations.identity_error):  # NaN or inf in a pair's rows
        refuse_non_finite({"base": base, "instruct": instruct}, found=f"the fitted {side} map W")
    identity = (equations.identity_error / equations.target_norm) ** 0.5 if equations.target_norm else 0.0
    if kind == "swap":
        return Fit(None, pairs.count, identity, identity)
    weight, error, rank = equations.solve()
    if rank < base.hidden:
        logger.warning(
            "W (%s) is fitted on %d row pairs that span %d of the %d dimensions: it maps every row into that span and "
            "drops the rest, also of what CPT trained, however small its residual. method='swap' (W = I) keeps whole "
            "rows%s.", side, pairs.count, rank, base.hidden, "" if kind == "conversion" else
            "; method='conversion' adds the new tokens' decompositions to the pairs")
    return Fit(weight.float(), pairs.count, (error / equations.target_norm) ** 0.5, identity)
