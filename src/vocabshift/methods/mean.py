"""`mean`: every new row is the mean of the old rows (vocabulary averaging)."""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import register_method
from .base import InitContext, InitResult

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
    count = context.num_new
    rows = context.source_input.mean(dim=0).expand(count, -1).clone()
    output = context.source_output
    out_rows = None if output is None else output.mean(dim=0).expand(count, -1).clone()
    return InitResult(rows, out_rows)
