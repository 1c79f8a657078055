"""`mean`: every new row is the mean of the old rows (vocabulary averaging)."""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import register_method
from .base import InitContext, InitResult, per_side

__all__ = ["MeanConfig", "init_mean"]


@dataclass(frozen=True)
class MeanConfig:
    """`mean` has no options."""


@register_method(
    "mean",
    config_class=MeanConfig,
    pretty_name="Mean of old rows",
    paper_url="https://nlp.stanford.edu/~johnhew/vocab-expansion.html",
    summary="every new row is the mean of the old rows",
)
def init_mean(context: InitContext, config: MeanConfig) -> InitResult:
    """Set every new row to the mean of the old rows; input and output separately."""
    return per_side(context, lambda rows, _: rows.mean(dim=0).expand(context.num_new, -1).clone())
