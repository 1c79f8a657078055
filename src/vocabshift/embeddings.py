"""The model's embedding matrices: find them, and assemble the new ones (the model itself is not touched here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .errors import UnsupportedModelError
from .methods import InitResult
from .vocab.align import Alignment

__all__ = ["Embeddings", "assemble_weights", "find_embeddings", "row_count"]


@dataclass(frozen=True)
class Embeddings:
    """The model's embedding modules: input, untied output head (or None), any head (tied or not)."""

    input: torch.nn.Module
    output: torch.nn.Module | None
    head: torch.nn.Module | None
    rows: int

    @property
    def tied(self) -> bool:
        return self.head is not None and self.output is None


def find_embeddings(model: Any) -> Embeddings:
    """The model's input embeddings and head.

    Raises:
        `UnsupportedModelError`: without an input embedding matrix, or with a head of another shape.
    """
    try:
        inputs = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        inputs = None
    weight = getattr(inputs, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        raise UnsupportedModelError(
            f"{type(model).__name__} has no input embedding matrix (get_input_embeddings() gave "
            f"{type(inputs).__name__}): pass a transformers model with token embeddings."
        )
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and head.weight.shape != weight.shape:
        raise UnsupportedModelError(
            f"{type(model).__name__}'s output head has shape {tuple(head.weight.shape)} but its input embeddings "
            f"{tuple(weight.shape)}: vocabshift needs one row per token in both."
        )
    untied = head if head is not None and head.weight is not weight else None
    return Embeddings(inputs, untied, head, weight.shape[0])


def row_count(embeddings: Embeddings, vocab_size: int, mode: str, multiple: int | None) -> int:
    """Never shrink in extend mode (padding rows stay); round up to `multiple`."""
    rows = max(vocab_size, embeddings.rows) if mode == "extend" else vocab_size
    return rows if multiple is None else -(-rows // multiple) * multiple


def _copies(embeddings: Embeddings, alignment: Alignment, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(new row index, old row index) of copied rows: every old row in extend mode, shared tokens in replace mode."""
    device = embeddings.input.weight.device
    if mode == "extend":
        index = torch.arange(embeddings.rows, device=device)
        return index, index
    pairs = torch.tensor(alignment.shared, dtype=torch.long, device=device).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _assemble(
    old: torch.Tensor,
    copies: tuple[torch.Tensor, torch.Tensor],
    new_ids: torch.Tensor,
    new_rows: torch.Tensor,
    rows: int,
    num_source: int,
) -> torch.Tensor:
    """The new matrix (or bias): mean of the source rows everywhere, then copied rows, then the method's rows."""
    out = torch.empty((rows, *old.shape[1:]), dtype=old.dtype, device=old.device)
    out[:] = old[:num_source].float().mean(dim=0).to(old.dtype)
    out[copies[0]] = old[copies[1]]
    out[new_ids] = new_rows.to(old.dtype)
    return out


def assemble_weights(
    embeddings: Embeddings, alignment: Alignment, result: InitResult, rows: int, mode: str, num_source: int
) -> dict[str, torch.Tensor]:
    """New `input`, untied `output` and head `bias` tensors: old rows copied, the method's rows placed."""
    copies = _copies(embeddings, alignment, mode)
    new_ids = torch.tensor(alignment.new_ids, dtype=torch.long, device=embeddings.input.weight.device)
    weights = {"input": _assemble(embeddings.input.weight.detach(), copies, new_ids, result.input_rows, rows, num_source)}
    if embeddings.output is not None:
        old = embeddings.output.weight.detach()
        weights["output"] = _assemble(old, copies, new_ids, result.output_rows, rows, num_source)
    bias = getattr(embeddings.head, "bias", None)
    if isinstance(bias, torch.Tensor):  # new tokens start at the mean bias
        mean_bias = bias.detach()[:num_source].float().mean().expand(len(new_ids))
        weights["bias"] = _assemble(bias.detach(), copies, new_ids, mean_bias, rows, num_source)
    return weights
