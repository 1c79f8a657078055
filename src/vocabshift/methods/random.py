"""`random`: new rows drawn from a normal with the old rows' per-dimension mean and standard deviation."""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import register_method
from .base import InitContext, InitResult, per_dimension_normal

__all__ = ["RandomConfig", "init_random"]


@dataclass(frozen=True)
class RandomConfig:
    """`random` has no options."""


@register_method(
    "random",
    config_class=RandomConfig,
    pretty_name="Random normal",
    summary="N(mean, std) of the old rows, per dimension (the fallback of FOCUS and SALT)",
)
def init_random(context: InitContext, config: RandomConfig) -> InitResult:
    """Draw each new row from N(mean, std) of the old rows, per dimension; input and output separately."""
    count = context.num_new
    rows = per_dimension_normal(context.source_input, count, context.generator())
    output = context.source_output
    out_rows = None if output is None else per_dimension_normal(output, count, context.generator(offset=1))
    return InitResult(rows, out_rows)
