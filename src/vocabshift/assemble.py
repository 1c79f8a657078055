"""The new embedding matrices of `extend_vocabulary`, assembled from the old rows and a method's rows.

Nothing here touches the model: `extend.py` writes what these functions return.
"""

from __future__ import annotations

import torch

from .embeddings import Embeddings
from .methods import InitResult
from .vocab.align import Alignment

__all__ = ["ROW_MULTIPLE", "assemble_weights", "row_count"]

# the default row multiple: even tensor-parallel splits up to 128 shards (Megatron-LM pads vocabularies to 128 too)
ROW_MULTIPLE = 128


def row_count(embeddings: Embeddings, vocab_size: int, mode: str, multiple: int | None) -> int:
    """Never shrink in extend mode (padding rows stay); round up to `multiple`."""
    rows = max(vocab_size, embeddings.num_rows) if mode == "extend" else vocab_size
    return rows if multiple is None else -(-rows // multiple) * multiple


def _copies(embeddings: Embeddings, alignment: Alignment, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(new row index, old row index) of copied rows: every old row in extend mode, shared tokens in replace mode.
    A special token beyond the old rows (Gemma-3's image token) has no row to copy: it keeps the mean row, as in
    extend mode."""
    device = embeddings.input.weight.device
    if mode == "extend":
        index = torch.arange(embeddings.num_rows, device=device)
        return index, index
    pairs = torch.tensor(alignment.shared, dtype=torch.long, device=device).reshape(-1, 2)
    pairs = pairs[pairs[:, 1] < embeddings.num_rows]
    return pairs[:, 0], pairs[:, 1]


def _assemble(
    old: torch.Tensor,
    copies: tuple[torch.Tensor, torch.Tensor],
    new_ids: torch.Tensor,
    new_rows: torch.Tensor,
    num_rows: int,
    num_source: int,
) -> torch.Tensor:
    """The new matrix (or bias): mean of the source rows everywhere, then copied rows, then the method's rows."""
    out = torch.empty((num_rows, *old.shape[1:]), dtype=old.dtype, device=old.device)
    out[:] = old[:num_source].float().mean(dim=0).to(old.dtype)
    out[copies[0]] = old[copies[1]]
    out[new_ids] = new_rows.to(old.dtype)
    return out


def assemble_weights(
    embeddings: Embeddings, alignment: Alignment, result: InitResult, num_rows: int, mode: str, num_source: int
) -> dict[str, torch.Tensor]:
    """New `input`, untied `output` and head `bias` tensors: old rows copied, the method's rows placed."""
    copies = _copies(embeddings, alignment, mode)
    new_ids = torch.tensor(alignment.new_ids, dtype=torch.long, device=embeddings.input.weight.device)
    old = embeddings.input.weight.detach()
    weights = {"input": _assemble(old, copies, new_ids, result.input_rows, num_rows, num_source)}
    if embeddings.output is not None and result.output_rows is not None:
        old = embeddings.output.weight.detach()
        weights["output"] = _assemble(old, copies, new_ids, result.output_rows, num_rows, num_source)
    bias = embeddings.bias
    if bias is not None:  # new tokens start at the mean bias
        mean_bias = bias.detach()[:num_source].float().mean().expand(len(new_ids))
        weights["bias"] = _assemble(bias.detach(), copies, new_ids, mean_bias, num_rows, num_source)
    return weights
