"""Writing split trainable rows back (see `rows.py`): into the matrices (`fold`), into state dicts, and out of them.

The matrices hold zeros at the trainable rows while they are split; a state dict gets the rows written in (and no
`trainable_rows` entries), so that checkpoints are plain models, and loading one splits its rows off again. Under
FSDP2 the tensors are DTensors sharded on rows: a state dict gathers them, `write_rows` writes each rank's shard.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from ...errors import TrainingSetupError, UnsupportedModelError

__all__ = ["IDS", "ROWS", "SLOTS", "drop_rows", "fold_state", "full", "row_norms_of", "split_state", "write_rows"]

ROWS = "trainable_rows"  # the parameter holding the rows that train, on each module that uses them
IDS = "trainable_row_ids"  # buffer: their ids, sorted
SLOTS = "trainable_row_slots"  # buffer: for every row, its index in ROWS, or -1


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of an FSDP2 DTensor (gathered), else the tensor."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def write_rows(weight: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> None:
    """`weight[ids] = rows` in place; for a DTensor sharded on rows (FSDP2), into each rank's shard."""
    rows = full(rows.detach()).to(weight.dtype)
    if not hasattr(weight, "to_local"):
        weight.index_copy_(0, ids, rows)
        return
    local, start = _local_rows(weight)
    inside = (ids >= start) & (ids < start + local.shape[0])
    local.index_copy_(0, ids[inside] - start, rows[inside])


def _local_rows(weight: Any) -> tuple[torch.Tensor, int]:
    """This rank's rows of a DTensor sharded on dim 0 over a 1-D mesh (torch.chunk layout) and the first row's id."""
    from torch.distributed.tensor import Shard

    mesh, local = weight.device_mesh, weight.to_local()
    chunk = -(-weight.shape[0] // mesh.size())
    start = min(mesh.get_local_rank() * chunk, weight.shape[0])
    expected = min(chunk, weight.shape[0] - start)
    if mesh.ndim != 1 or tuple(weight.placements) != (Shard(0),) or local.shape[0] != expected:
        raise UnsupportedModelError(
            f"The embedding matrix is a DTensor with placements {tuple(weight.placements)} on a {mesh.ndim}-D mesh: "
            "vocabshift folds rows into row-sharded matrices (fully_shard on a 1-D mesh) only."
        )
    return local, start


def fold_state(model: torch.nn.Module, state_dict: dict, prefix: str, local_metadata: Any, *,
                groups: list[list[str]]) -> None:
    """state_dict post-hook: each matrix with its trainable rows written in, and no `trainable_rows` entries."""
    for group in groups:
        keys = [f"{prefix}{name}.weight" for name in group]
        first = f"{prefix}{group[0]}."
        if keys[0] not in state_dict or first + ROWS not in state_dict:
            continue
        with torch.no_grad():
            weight = full(state_dict[keys[0]].detach())
            ids = getattr(model.get_submodule(group[0]), IDS).to(weight.device)
            folded = weight.index_copy(0, ids, full(state_dict[first + ROWS].detach()).to(weight.dtype))
        for key in keys:
            state_dict[key] = folded
        for name in group:
            state_dict.pop(f"{prefix}{name}.{ROWS}", None)


def drop_rows(model: torch.nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    for key in [k for k in state_dict if k.endswith(f".{ROWS}")]:
        del state_dict[key]


def split_state(model: torch.nn.Module, state_dict: dict, prefix: str, *args: Any, groups: list[list[str]]) -> None:
    """load_state_dict pre-hook: a plain checkpoint's rows go to `trainable_rows`, the matrix gets zeros there."""
    for group in groups:
        key = f"{prefix}{group[0]}.weight"
        if key not in state_dict:
            continue
        weight, module = state_dict[key], model.get_submodule(group[0])
        rows = _rows_of(module)
        if weight.shape[0] != rows:
            raise TrainingSetupError(
                f"{key} in the weights being loaded has {weight.shape[0]} rows, the model {rows}: "
                "they were saved from another model (a checkpoint of another run, or of the model before "
                "extend_vocabulary). Resume from, or load, a checkpoint of this model."
            )
        ids = getattr(module, IDS).to(weight.device)
        zeroed = weight.index_fill(0, ids, 0)
        for name in group:
            state_dict[f"{prefix}{name}.{ROWS}"] = weight[ids]
            if f"{prefix}{name}.weight" in state_dict:
                state_dict[f"{prefix}{name}.weight"] = zeroed


def _rows_of(module: torch.nn.Module) -> int:
    """The rows of an embedding module's matrix (its global size, where FSDP2 shards it)."""
    return int(cast(torch.Tensor, module.weight).shape[0])


@torch.no_grad()
def row_norms_of(module: torch.nn.Embedding | torch.nn.Linear) -> torch.Tensor:
    """L2 norm (float32) of every row of an embedding module's matrix, its trainable rows included."""
    norms = full(torch.linalg.vector_norm(module.weight.detach(), dim=1, dtype=torch.float32))
    rows = getattr(module, ROWS, None)
    if rows is not None:
        trained = full(torch.linalg.vector_norm(rows.detach(), dim=1, dtype=torch.float32))
        norms = norms.index_copy(0, getattr(module, IDS).to(norms.device), trained.to(norms.device))
    return norms
