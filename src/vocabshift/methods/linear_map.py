"""A ridge-regression linear map between two embedding spaces, with the ridge chosen on held-out pairs.

SALT fits one on all anchors (helper rows -> model rows) and applies it to what each token's own anchors cannot
express. The held-out R² (1 - squared error / squared error of predicting the mean row) says whether the helper
predicts the model's rows at all: at or below 0 it does no better than the mean row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import precise

__all__ = ["LinearMap", "fit_linear_map"]

_HELD_OUT = 0.1
_MIN_PAIRS = 20  # at least 2 held out
_RIDGES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)  # relative to the mean eigenvalue of AᵀA


@dataclass(frozen=True)
class LinearMap:
    """`predict(x) = (x - source_mean) @ weight + target_mean`; `ridge` (relative) and `held_out_r2` as measured."""

    weight: torch.Tensor
    source_mean: torch.Tensor
    target_mean: torch.Tensor
    ridge: float
    held_out_r2: float

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.to(self.weight.dtype) - self.source_mean) @ self.weight + self.target_mean).to(x.dtype)


def fit_linear_map(source: torch.Tensor, target: torch.Tensor, *, seed: int) -> LinearMap:
    """Ridge map from `source` rows to `target` rows (paired), centred, in float64 where the device has it.

    The ridge is the one of `_RIDGES` with the smallest squared error on a random 10% of the pairs (drawn from
    `seed`); the map is then refitted on all pairs with it. With fewer than `_MIN_PAIRS` pairs nothing can be held
    out: the ridge is 1 and the R² is NaN (not measured).
    """
    wide = precise(source.device)
    x, y = source.to(wide), target.to(wide)
    if len(x) < _MIN_PAIRS:
        return LinearMap(*_solve(x, y, 1.0), ridge=1.0, held_out_r2=float("nan"))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed), device="cpu").to(x.device)
    held, kept = order[: int(len(x) * _HELD_OUT)], order[int(len(x) * _HELD_OUT) :]
    errors = {ridge: _held_error(x[kept], y[kept], x[held], y[held], ridge) for ridge in _RIDGES}
    ridge = min(errors, key=lambda r: errors[r])
    baseline = (y[held] - y[kept].mean(dim=0)).pow(2).sum().item()
    return LinearMap(*_solve(x, y, ridge), ridge=ridge, held_out_r2=1 - errors[ridge] / max(baseline, 1e-300))


def _held_error(x: torch.Tensor, y: torch.Tensor, x_held: torch.Tensor, y_held: torch.Tensor, ridge: float) -> float:
    weight, source_mean, target_mean = _solve(x, y, ridge)
    return ((x_held - source_mean) @ weight + target_mean - y_held).pow(2).sum().item()


def _solve(x: torch.Tensor, y: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Centred ridge regression: (XᵀX + λ I)⁻¹ Xᵀ Y, λ = ridge * mean eigenvalue of XᵀX (its trace / dim)."""
    source_mean, target_mean = x.mean(dim=0), y.mean(dim=0)
    xc = x - source_mean
    gram = xc.T @ xc
    shift = ridge * gram.diagonal().sum() / len(gram)
    eye = torch.eye(len(gram), dtype=gram.dtype, device=gram.device)
    weight = torch.linalg.solve(gram + shift.clamp_min(1e-300) * eye, xc.T @ (y - target_mean))
    return weight, source_mean, target_mean
