"""What `EmbeddingOnlyCallback` checks of the Trainer's optimizer, and the untied head's own learning rate."""

from __future__ import annotations

from typing import Any

import torch

from ..._typing import Model
from ...errors import TrainingSetupError

__all__ = ["PREBUILT", "HeadRate", "check_linear_in_lr", "check_optimizer", "head_rate", "peak_rate"]


class HeadRate:
    """Gives the untied head's trainable rows their own learning rate by scaling each step's update by `ratio`."""

    def __init__(self, head: torch.nn.Parameter, ratio: float) -> None:
        self.head, self.ratio = head, ratio
        self._before: torch.Tensor | None = None

    def save(self) -> None:
        self._before = self.head.detach().clone()

    @torch.no_grad()
    def apply(self) -> None:
        assert self._before is not None, "save() runs before each optimizer step"
        self.head.copy_(self._before + (self.head - self._before) * self.ratio)


def check_linear_in_lr(optimizer: Any) -> None:
    """head_learning_rate scales the head's update: exact only where the update is proportional to the rate."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the optimizer
    if not isinstance(inner, (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)):
        raise TrainingSetupError(
            f"head_learning_rate works with SGD, Adam and AdamW (updates proportional to the learning rate), not "
            f"{type(inner).__name__}: use optim='adamw_torch' (or 'sgd'), or drop head_learning_rate."
        )


def peak_rate(optimizer: Any, parameter: torch.nn.Parameter, default: float) -> float:
    """The peak learning rate the schedule scales for `parameter`: its group's `initial_lr` (the scheduler sets it),
    else `lr`. That is `args.learning_rate` (`default`, also without an optimizer) unless the Trainer was given
    `optimizer_cls_and_kwargs`, whose `lr` (or the optimizer's own default) it takes instead."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the optimizer
    groups = [] if inner is None else [g for g in inner.param_groups if any(p is parameter for p in g["params"])]
    return float(groups[0].get("initial_lr", groups[0]["lr"])) if groups else default


def head_rate(optimizer: Any, head: torch.nn.Parameter, head_learning_rate: float, default: float) -> HeadRate:
    """The head's update scaled by `head_learning_rate` over the rate the optimizer gives it (`peak_rate`).

    Raises:
        `TrainingSetupError`: an optimizer whose update is not proportional to its rate, or whose rate is 0.
    """
    check_linear_in_lr(optimizer)
    rate = peak_rate(optimizer, head, default)
    if rate <= 0:
        raise TrainingSetupError(f"head_learning_rate scales the head's update by head_learning_rate / the optimizer's "
                                 f"learning rate, which is {rate:g}: give the optimizer a positive learning rate, or "
                                 "drop head_learning_rate.")
    return HeadRate(head, head_learning_rate / rate)


PREBUILT = (
    "The Trainer was given an optimizer (optimizers=...), but EmbeddingOnlyCallback(rows={rows!r}) trains rows that "
    "it splits off into new parameters when the Trainer is built, which an optimizer built before cannot hold. Drop "
    "optimizers=... and choose the optimizer with TrainingArguments(optim=...) or "
    "Trainer(optimizer_cls_and_kwargs=(cls, kwargs))."
)


def check_optimizer(optimizer: Any, model: Model, trainable: list[torch.nn.Parameter]) -> None:
    """The optimizer holds exactly the parameters that train (the Trainer builds it over those that require grad)."""
    if optimizer is None:
        return
    names = {id(p): name for name, p in model.named_parameters()}
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    stray = [i for i in held if i not in {id(p) for p in trainable}]
    if stray:
        raise TrainingSetupError(
            f"The Trainer's optimizer holds {len(stray)} parameters that embedding-only training freezes (e.g. "
            f"{names.get(stray[0], 'an unnamed one')!r}): it was built before EmbeddingOnlyCallback could "
            "freeze the body. Let the Trainer build it (drop optimizers=...)."
        )
    missing = [p for p in trainable if id(p) not in held]
    if missing:
        raise TrainingSetupError(
            f"The Trainer's optimizer does not hold {names.get(id(missing[0]), 'a parameter')!r}, which "
            "EmbeddingOnlyCallback trains: let the Trainer build the optimizer (drop optimizers=...)."
        )
