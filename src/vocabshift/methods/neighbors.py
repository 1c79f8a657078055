"""Blockwise nearest neighbours in a vector space, shared by the word-vector methods.

Similarities are computed for a block of queries at a time, so memory is O(block x keys), never
n_queries x n_keys. `sparsemax_neighbors` is exact: sparsemax's support is always the top k* entries, and the k*
found among the top N (in float64) equals the one over all keys whenever k* < N, which is checked (N doubles
otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from huggingface_hub.utils import tqdm

from .base import precise

__all__ = ["MIN_TEMPERATURE", "SparseWeights", "normalize", "sparsemax", "sparsemax_neighbors", "summarize",
           "topk_neighbors"]

_BLOCK_ELEMENTS = 1 << 23  # similarities held at once (64 MB of float64)
# Candidates per row before widening: above the usual FOCUS support (median 14, p90 about 22 with token-level
# fastText); topk of 24 costs less than half of topk of 64 on CPU (0.08 vs 0.19 s for 13k x 1.5k scores).
_START_CANDIDATES = 24
# The smallest similarity temperature the methods accept: similarities divided by it stay finite in float32 (MPS's
# widest type). Near it every new token already takes its most similar key's row alone.
MIN_TEMPERATURE = 1e-30


@dataclass(frozen=True)
class SparseWeights:
    """Row i of a sparse `(count, n_keys)` weight matrix: `values[rows == i]` at key indices `cols[rows == i]`;
    `capped` counts the rows cut to `max_support` by `sparsemax_neighbors`."""

    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    count: int
    capped: int = 0

    def support_sizes(self) -> torch.Tensor:
        return torch.bincount(self.rows, minlength=self.count)

    def apply(self, matrix: torch.Tensor, key_rows: torch.Tensor) -> torch.Tensor:
        """`(count, hidden)` rows: row i = sum_j values_ij * matrix[key_rows[j]] (no copy of `matrix`)."""
        index = torch.stack([self.rows, key_rows[self.cols]]).to(matrix.device)
        sparse = torch.sparse_coo_tensor(index, self.values.to(matrix), (self.count, matrix.shape[0]),
                                         check_invariants=True, device=matrix.device)
        return torch.sparse.mm(sparse.coalesce(), matrix)


def normalize(vectors: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm (zero rows stay zero); float64 stays float64, anything else becomes float32."""
    vectors = vectors if vectors.dtype == torch.float64 else vectors.float()
    return vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-12)


def sparsemax(scores: torch.Tensor) -> torch.Tensor:
    """Sparsemax (Martins & Astudillo, 2016) of each row of `scores`."""
    wide = precise(scores.device)
    scores = scores.to(wide)
    ordered = scores.sort(dim=1, descending=True).values
    _, tau = _support(ordered - ordered[:, :1])
    return (scores - ordered[:, :1] - tau[:, None]).clamp_min(0).to(scores.dtype)


def _support(ordered: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Support size k* and threshold tau of sparsemax for rows sorted in descending order, each starting at 0
    (sparsemax is shift-invariant, and a shifted row keeps the 1 in `1 + k * z_k > sum` when scores are large)."""
    cumulative = ordered.cumsum(dim=1)
    ranks = torch.arange(1, ordered.shape[1] + 1, dtype=ordered.dtype, device=ordered.device)
    size = (1 + ranks * ordered > cumulative).sum(dim=1)  # the k satisfying it are exactly 1..k*
    tau = (cumulative.gather(1, (size - 1)[:, None]).squeeze(1) - 1) / size
    return size, tau


def _blocks(count: int, keys: int, desc: str) -> Sequence[tuple[int, int]]:
    """Query blocks of at most `_BLOCK_ELEMENTS` similarities, with a progress bar."""
    step = max(1, min(count, _BLOCK_ELEMENTS // max(keys, 1)))
    return tqdm([(start, min(start + step, count)) for start in range(0, count, step)], desc=desc, leave=False)


def sparsemax_neighbors(
    queries: torch.Tensor,
    keys: torch.Tensor,
    *,
    temperature: float = 1.0,
    max_support: int | None = None,
    desc: str = "Sparsemax neighbours",
) -> SparseWeights:
    """Sparsemax over the cosine similarities (divided by `temperature`) of each query to all keys.

    Equal to the dense float64 computation while holding one block of similarities at a time: a block's
    similarities are computed in float64 (cheaper than ranking in float32 and rescoring the candidates, whose
    gathers cost more than the product), and the candidate count doubles for rows whose support reaches the last
    candidate. With `max_support`, a row whose support is larger keeps its `max_support` most similar keys (exactly
    those of the dense computation) with their values in the sparsemax over the candidates ranked so far, which then
    sum to less than 1 (renormalize them, or refit them as SALT's least squares does), and is counted in `capped`.
    """
    wide, device = precise(queries.device), queries.device
    queries, keys = normalize(queries.to(wide)) / temperature, normalize(keys.to(wide))
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    capped = 0
    for start, stop in _blocks(len(queries), len(keys), desc):
        scores = queries[start:stop] @ keys.T
        pending, candidates = torch.arange(start, stop, device=device), min(_START_CANDIDATES, len(keys))
        while len(pending):
            exact, index = scores.topk(candidates, dim=1)
            exact = exact - exact[:, :1]
            size, tau = _support(exact)
            done = (size < candidates) | (candidates == len(keys))
            if max_support is not None and candidates > max_support:
                cut = size > max_support
                done, size, capped = done | cut, torch.where(cut, max_support, size), capped + int(cut.sum())
            keep = torch.arange(candidates, device=device)[None, :] < size[done, None]
            rows = pending[done][:, None].expand_as(keep)
            parts.append((rows[keep], index[done][keep], (exact[done] - tau[done, None])[keep]))
            pending, scores, candidates = pending[~done], scores[~done], min(2 * candidates, len(keys))
    if not parts:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return SparseWeights(empty, empty, torch.zeros(0, dtype=wide, device=device), len(queries))
    rows, cols, values = (torch.cat(part) for part in zip(*parts))
    return SparseWeights(rows, cols, values, len(queries), capped)


def topk_neighbors(
    queries: torch.Tensor, keys: torch.Tensor, k: int, *, desc: str = "Nearest neighbours"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine similarities `(n_queries, k)` and key indices of each query's `k` most similar keys, blockwise."""
    queries, keys = normalize(queries), normalize(keys)
    k = min(k, len(keys))
    values, indices = [], []
    for start, stop in _blocks(len(queries), len(keys), desc):
        top, index = (queries[start:stop] @ keys.T).topk(k, dim=1)
        values.append(top)
        indices.append(index)
    if not values:
        return torch.zeros(0, k, device=queries.device), torch.zeros(0, k, dtype=torch.long, device=queries.device)
    return torch.cat(values), torch.cat(indices)


def summarize(values: torch.Tensor) -> dict[str, float]:
    """min / 10th percentile / median / 90th percentile / max / mean of `values`, for diagnostics."""
    values = values.detach().to(precise(values.device)).flatten()
    values = values[torch.isfinite(values)]
    if not len(values):
        return {}
    levels = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=values.dtype, device=values.device)
    quantiles = torch.quantile(values, levels).tolist()
    names = ("min", "p10", "median", "p90", "max")
    return {**{n: round(q, 6) for n, q in zip(names, quantiles)}, "mean": round(float(values.mean()), 6)}
