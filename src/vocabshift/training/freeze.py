"""Plain functions for embedding-only training: freeze the body, keep chosen rows bit-identical, report row norms.

A custom training loop needs three lines:

```python
guard = freeze_for_embedding_training(model, rows="new")
optimizer = torch.optim.AdamW(guard.parameters, lr=1e-3, weight_decay=0.1)
...  # loss.backward(); optimizer.step(); guard.restore(); optimizer.zero_grad()
```

Gradient masks alone do not keep rows fixed: AdamW's decoupled weight decay moves every row it holds. So the guard
both masks the gradients of frozen rows (which keeps them out of gradient clipping and optimizer moments) and copies
their saved values back after each optimizer step (which undoes weight decay bit for bit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ..errors import InvalidArgumentError, RecordError, UnsupportedModelError
from ..record import CONFIG_KEY, get_record

__all__ = [
    "ROW_CHOICES",
    "RowGuard",
    "embedding_parameters",
    "freeze_body",
    "freeze_for_embedding_training",
    "record_cpt",
    "row_norms",
    "trainable_row_ids",
]

ROW_CHOICES = ("new", "all")


def embedding_parameters(model: Any) -> list[torch.nn.Parameter]:
    """The input embedding matrix and, when it is not tied to it, the output head's weight.

    Raises:
        `UnsupportedModelError`: if the model has no input embedding matrix.
    """
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(inputs, "weight", None)
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 2:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no input embedding matrix: pass a transformers model with token embeddings."
        )
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_weight = getattr(head, "weight", None)
    return [weight] if head_weight is None or head_weight is weight else [weight, head_weight]


def freeze_body(model: Any, *, keep: Iterable[torch.nn.Parameter] = ()) -> list[torch.nn.Parameter]:
    """Set `requires_grad=False` on every parameter except the embedding matrices (and `keep`).

    Call it before building the optimizer: optimizers (and the Trainer) only take parameters that require grad.

    Returns:
        The embedding parameters (trainable now, together with `keep`).
    """
    embeddings = embedding_parameters(model)
    trainable = {id(p) for p in (*embeddings, *keep)}
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) in trainable)
    return embeddings


def trainable_row_ids(model: Any, rows: str | Sequence[int]) -> torch.Tensor | None:
    """The embedding rows to train: `"all"` -> None (every row), `"new"` -> the record's new ids, or given ids.

    Raises:
        `InvalidArgumentError`: if `rows` is none of those, or an id is outside the embedding matrix.
        `RecordError`: if `rows="new"` and the model carries no ExtensionRecord (or one for another size).
    """
    num_rows = embedding_parameters(model)[0].shape[0]
    if isinstance(rows, str):
        if rows not in ROW_CHOICES:
            raise InvalidArgumentError(f"rows={rows!r} is invalid: pass 'new', 'all' or a list of row ids.")
        return None if rows == "all" else _record_new_ids(model, num_rows)
    if not isinstance(rows, Sequence) or not rows or not all(_is_int(i) for i in rows):
        raise InvalidArgumentError(f"rows={rows!r} is invalid: pass 'new', 'all' or a non-empty list of row ids.")
    ids = torch.tensor(sorted(set(rows)), dtype=torch.long)
    if ids[0] < 0 or ids[-1] >= num_rows:
        raise InvalidArgumentError(
            f"rows holds ids from {int(ids[0])} to {int(ids[-1])} but the embedding matrix has {num_rows} rows: "
            f"pass ids in [0, {num_rows})."
        )
    return ids


def _record_new_ids(model: Any, num_rows: int) -> torch.Tensor:
    try:
        record = get_record(model)
    except RecordError as error:
        raise RecordError(f"{error} rows='new' trains the rows extend_vocabulary added; pass rows='all' to train "
                          "every row of a model without a record.") from None
    ids = torch.tensor(record.new_ids, dtype=torch.long)
    if record.new_num_rows != num_rows or (len(ids) and ids[-1] >= num_rows):
        raise RecordError(
            f"The vocabshift record describes {record.new_num_rows} embedding rows but the model has {num_rows}: "
            "it was resized after extend_vocabulary. Pass the row ids to train explicitly (rows=[...])."
        )
    return ids


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class RowGuard:
    """Keeps every embedding row outside `rows` bit-identical while the others train.

    It registers gradient hooks that zero the frozen rows' gradients (single process and DDP; under FSDP2 tensor
    hooks do not fire) and saves the frozen rows so that `restore()` can copy them back after each optimizer step.
    Memory: one copy of the frozen rows, on the parameters' device.

    Args:
        parameters (`list[torch.nn.Parameter]`): the embedding matrices (see `embedding_parameters`).
        rows (`torch.Tensor | None`): the row ids to train; None trains every row (the guard then does nothing).
    """

    def __init__(self, parameters: list[torch.nn.Parameter], rows: torch.Tensor | None) -> None:
        self.parameters = list(parameters)
        self.rows = rows
        self._hooks: list[Any] = []
        self._saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        if rows is None:
            return
        for parameter in self.parameters:
            train = torch.zeros(parameter.shape[0], dtype=torch.bool, device=parameter.device)
            train[rows.to(parameter.device)] = True
            frozen = (~train).nonzero().squeeze(1)
            self._saved.append((frozen, parameter.detach()[frozen].clone()))
            self._hooks.append(parameter.register_hook(lambda grad, keep=train: grad.masked_fill(~keep[:, None], 0)))

    @torch.no_grad()
    def restore(self) -> None:
        """Copy the saved frozen rows back (call after every optimizer step)."""
        for parameter, (frozen, values) in zip(self.parameters, self._saved):
            parameter.index_copy_(0, frozen, values)

    def remove(self) -> None:
        """Remove the gradient hooks (the saved rows are dropped too)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._saved = [], []


def freeze_for_embedding_training(model: Any, *, rows: str | Sequence[int] = "new") -> RowGuard:
    """Freeze everything but the embeddings and guard the rows that must not change.

    Args:
        model (`PreTrainedModel`): the model; its input embeddings and (tied or untied) output head stay trainable.
        rows (`str` or `list[int]`, defaults to `"new"`): `"new"` trains only the rows `extend_vocabulary` added,
            `"all"` every row, or the given row ids.

    Returns:
        `RowGuard`: pass `guard.parameters` to the optimizer and call `guard.restore()` after each step.

    Raises:
        `InvalidArgumentError`, `RecordError`, `UnsupportedModelError`: see `trainable_row_ids`.

    Example:
        ```python
        >>> guard = freeze_for_embedding_training(model, rows="new")
        >>> optimizer = torch.optim.AdamW(guard.parameters, lr=1e-3, weight_decay=0.1)
        ```
    """
    ids = trainable_row_ids(model, rows)
    return RowGuard(freeze_body(model), ids)


@torch.no_grad()
def row_norms(model: Any, new_ids: torch.Tensor | None) -> dict[str, float]:
    """Mean L2 norm of the new rows and of the other rows, for the input embeddings and an untied head.

    With `new_ids=None` (no record), the mean norm of all rows.
    """
    figures = {}
    for name, parameter in zip(("embed", "head"), embedding_parameters(model)):
        norms = parameter.detach().float().norm(dim=1)
        if new_ids is None:
            figures[f"{name}_row_norm"] = norms.mean().item()
            continue
        is_new = torch.zeros_like(norms, dtype=torch.bool)
        is_new[new_ids.to(norms.device)] = True
        figures[f"{name}_new_row_norm"] = norms[is_new].mean().item()
        figures[f"{name}_old_row_norm"] = norms[~is_new].mean().item()
    return figures


def record_cpt(model: Any, entry: dict[str, Any]) -> bool:
    """Append one CPT history entry to the model's ExtensionRecord (`config.vocabshift["cpt"]`).

    Returns:
        False (and does nothing) if the model carries no record.
    """
    data = getattr(model.config, CONFIG_KEY, None)
    if not isinstance(data, dict):
        return False
    data.setdefault("cpt", []).append(dict(entry))
    return True
