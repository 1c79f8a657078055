"""`multivariate`: new rows drawn from N(mean, covariance) of the old rows (Hewitt 2021)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..registry import register_method
from .base import InitContext, InitResult, draw, per_side, precise

__all__ = ["MultivariateConfig", "init_multivariate"]

_BLOCK = 8192


@dataclass(frozen=True)
class MultivariateConfig:
    """`multivariate` has no options."""


@register_method(
    "multivariate",
    config_class=MultivariateConfig,
    pretty_name="Multivariate normal of old rows",
    paper_url="https://nlp.stanford.edu/~johnhew/vocab-expansion.html",
    summary="N(mean, covariance) of the old rows",
)
def init_multivariate(context: InitContext, config: MultivariateConfig) -> InitResult:
    """Draw each new row from N(mean, cov) of the old rows; input and output separately.

    Unlike transformers' `mean_resizing`, which scales the covariance by 1e-9 (so its rows are the mean), the
    covariance is used as is, so new rows have the spread and norms of real rows.
    """
    return per_side(context, lambda rows, generator: _sample(rows, context.num_new, generator))


def _sample(matrix: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    wide, device = precise(matrix.device), matrix.device
    mean = matrix.mean(dim=0, dtype=wide)
    covariance = torch.zeros(matrix.shape[1], matrix.shape[1], dtype=wide, device=device)
    for start in range(0, matrix.shape[0], _BLOCK):  # blockwise: never a float64 copy of the whole matrix
        centered = matrix[start : start + _BLOCK].to(wide) - mean
        covariance += centered.T @ centered
    covariance /= max(matrix.shape[0] - 1, 1)
    jitter = 1e-6 * covariance.diagonal().mean().clamp_min(1e-12)
    factor = torch.linalg.cholesky(covariance + jitter * torch.eye(len(mean), dtype=wide, device=device))
    noise = draw((count, matrix.shape[1]), generator, device, dtype=torch.float64)
    return (mean + noise @ factor.T).float()
