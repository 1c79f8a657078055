"""`random`: new rows drawn from a normal with the old rows' per-dimension mean and standard deviation."""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import register_method
from .base import InitContext, InitResult, per_dimension_normal, per_side

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
    return per_side(context, lambda rows, generator: per_dimension_normal(rows, context.num_new, generator))
