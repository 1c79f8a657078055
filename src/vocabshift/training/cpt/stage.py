"""The optional second stage of embedding-only training: the body joins training after a given step.

The body's parameters (all of them, or LoRA adapters injected with peft) are made trainable *before* the optimizer
is built, so that the optimizer, the LR schedule, DDP and checkpoints include them from the start; a `BodyGate`
keeps them out of every update until the step is reached. Stage 1 therefore computes (and discards) the gated
gradients: with LoRA that costs little, with the full body about one extra weight-gradient pass per step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ..._typing import Model
from ...arguments import check_count
from ...errors import InvalidArgumentError

__all__ = ["BodyGate", "SecondStage", "body_parameters", "inject_lora", "merge_an_earlier_lora", "merge_lora",
           "remove_an_earlier_gate"]

logger = logging.getLogger(__name__)
TUNER = "_vocabshift_lora"  # on the model: the LoRA tuner a second stage injected, until its adapters are merged
GATE = "_vocabshift_gate"  # on the model: the second stage's gate, until it is removed


@dataclass(frozen=True)
class SecondStage:
    """Unfreeze the transformer body after `after_step` optimizer steps of embedding-only training.

    Args:
        after_step (`int`): optimizer steps of embedding-only training before the body joins.
        lora (`peft.LoraConfig`, *optional*): train LoRA adapters on the body instead of the full body. The
            adapters are merged into the weights when training ends.

    Example:
        ```python
        >>> from peft import LoraConfig
        >>> stage = SecondStage(after_step=500, lora=LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
        >>> callback = EmbeddingOnlyCallback(rows="new", second_stage=stage)
        ```
    """

    after_step: int
    lora: Any = None

    def __post_init__(self) -> None:
        check_count(self.after_step, name="after_step", minimum=0, accepted="a non-negative int")
        from peft import LoraConfig

        if self.lora is not None and not isinstance(self.lora, LoraConfig):
            raise InvalidArgumentError(
                f"lora is a {type(self.lora).__name__}: pass a peft.LoraConfig, or None to unfreeze the full body."
            )

    def to_dict(self) -> dict[str, Any]:
        lora = None if self.lora is None else {"r": self.lora.r, "target_modules": _modules(self.lora)}
        return {"after_step": self.after_step, "mode": "full" if self.lora is None else "lora", "lora": lora}


def _modules(config: Any) -> Any:
    modules = config.target_modules
    return sorted(modules) if isinstance(modules, (set, list, tuple)) else modules


def inject_lora(model: Model, config: Any, *, seed: int) -> Any:
    """Inject LoRA adapters (peft) into `model` in place; their random init is drawn from `seed`.

    Returns:
        The peft tuner (keep it for `merge_lora`).

    Raises:
        `InvalidArgumentError`: the config's `target_modules` name no module of `model`, or the config would wrap the
            input embeddings or the output head (checked before anything is injected).
    """
    from peft.tuners.lora import LoraModel
    from peft.utils.error import NoMatchingPeftModuleError

    head = model.get_output_embeddings()
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear) and module is not head})
    _check_body_only(model, config, linear)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            tuner = model.__dict__[TUNER] = LoraModel(model, config, "default")
            return tuner
        except NoMatchingPeftModuleError:
            raise InvalidArgumentError(
                f"SecondStage's LoraConfig(target_modules={config.target_modules!r}) names no module of "
                f"{type(model).__name__}: pass names of its linear layers, e.g. {linear[:6]}."
            ) from None


def _check_body_only(model: Model, config: Any, linear: list[str]) -> None:
    """Refuse a config that would wrap the embeddings, which train as rows of their own: peft would inject into the
    user's model in place before the row split failed, and its unload does not give a tied model back as it was."""
    from peft.tuners.tuners_utils import check_target_module_exists

    embeddings = {id(model.get_input_embeddings()): "input embeddings",
                  id(model.get_output_embeddings()): "output head"}
    found: dict[str, str] = {}
    for name, module in model.named_modules():
        if id(module) in embeddings and check_target_module_exists(config, name):
            found[embeddings[id(module)]] = f"target_modules={config.target_modules!r}"
        elif id(module) in embeddings and any(name.endswith(key) for key in config.modules_to_save or ()):
            found[embeddings[id(module)]] = f"modules_to_save={config.modules_to_save!r}"
    if config.trainable_token_indices is not None:  # peft's trainable tokens wrap the input embeddings
        found.setdefault("input embeddings", f"trainable_token_indices={config.trainable_token_indices!r}")
    if found:
        raise InvalidArgumentError(
            f"SecondStage's LoraConfig would wrap {type(model).__name__}'s "
            f"{' and '.join(f'{what} ({option})' for what, option in found.items())}, which EmbeddingOnlyCallback "
            f"trains itself: leave the embeddings out of the config and target the body's linear layers, e.g. "
            f"target_modules={linear[:6]}."
        )


def merge_lora(tuner: Any) -> None:
    """Merge the adapters into the base weights and remove the LoRA layers (the model is plain again)."""
    model = tuner.merge_and_unload()
    model.__dict__.pop(TUNER, None)
    if hasattr(model, "peft_config"):
        del model.peft_config


def merge_an_earlier_lora(model: Model) -> None:
    """A Trainer whose second stage injected LoRA adapters, and that was not trained to its end, left them in the
    model (whose saved weights from_pretrained would then not read): merge them (what they learned stays)."""
    tuner = model.__dict__.get(TUNER)
    if tuner is not None:
        logger.warning("An earlier Trainer's SecondStage left its LoRA adapters in the model (built, or interrupted, "
                       "before training ended): merging them into the weights; do not train that Trainer any more.")
        merge_lora(tuner)


def body_parameters(model: Model, tuner: Any, embeddings: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """The parameters the second stage trains: LoRA adapters, or every non-embedding parameter."""
    if tuner is not None:
        return [p for name, p in model.named_parameters() if "lora_" in name]
    skip = {id(p) for p in embeddings}
    return [p for p in model.parameters() if id(p) not in skip]


class BodyGate:
    """Keeps trainable body parameters out of every update until `open()`.

    While closed, gradient hooks zero their gradients (so that gradient clipping ignores them) and
    `drop_gradients()` sets them to None before the optimizer step (so that torch optimizers skip them: no weight
    decay, no moments).
    """

    def __init__(self, model: Model, parameters: list[torch.nn.Parameter]) -> None:
        self.model, self.parameters = model, parameters
        self.is_open = False
        self._hooks = [p.register_hook(self._gate) for p in parameters]
        model.__dict__[GATE] = self  # found by `remove_an_earlier_gate` if this run never ends

    def _gate(self, grad: torch.Tensor) -> torch.Tensor:
        return grad if self.is_open else torch.zeros_like(grad)

    def open(self) -> None:
        self.is_open = True

    def drop_gradients(self) -> None:
        if not self.is_open:
            for parameter in self.parameters:
                parameter.grad = None

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if self.model.__dict__.get(GATE) is self:
            del self.model.__dict__[GATE]


def remove_an_earlier_gate(model: Model) -> None:
    """A Trainer interrupted before its second stage began left its gate on the body, closed: it would zero the
    body's gradients in every later run (a later second stage, a full fine-tuning). Remove it."""
    gate = model.__dict__.get(GATE)
    if gate is not None:
        gate.remove()
