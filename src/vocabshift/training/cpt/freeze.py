"""Plain functions for embedding-only training: freeze the body, split off the rows that train, report row norms.

A custom training loop needs three lines:

```python
rows = freeze_for_embedding_training(model, rows="new")
optimizer = torch.optim.AdamW(rows.parameters, lr=1e-3, weight_decay=0.1)
...  # loss.backward(); optimizer.step(); optimizer.zero_grad()
rows.fold()  # the trained rows back into the embedding matrices: a plain model again
```

The rows that train are parameters of their own (see `rows.py`), so the optimizer holds state for them only and the
other rows cannot move, whatever the weight decay or momentum.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from ..._typing import Model, is_peft
from ...arguments import is_collection, is_int
from ...embeddings import find_embeddings
from ...errors import InvalidArgumentError, RecordError, UnsupportedModelError
from ...record import get_record
from ._fold import row_norms_of
from .rows import TrainableRows, embedding_parameters, split_rows

__all__ = [
    "ROW_CHOICES",
    "check_not_an_adapter",
    "check_rows",
    "freeze_body",
    "freeze_for_embedding_training",
    "requires_grad_of",
    "restore_requires_grad",
    "row_norms",
    "trainable_row_ids",
]

ROW_CHOICES = ("new", "all")
REQUIRES_GRAD = "_vocabshift_requires_grad"  # on the model: the flags `requires_grad_of` read first (a plain attribute)


def freeze_body(model: Model, *, keep: Iterable[torch.nn.Parameter] = ()) -> list[torch.nn.Parameter]:
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


def requires_grad_of(model: Model) -> dict[str, bool]:
    """Which parameters require grad, by name: what `restore_requires_grad` gives back after training.

    Kept on the model until then: a Trainer built after one that froze the body and never finished training
    (built and abandoned, or interrupted) gets the flags from before that one froze it, not its frozen body.
    """
    if REQUIRES_GRAD not in model.__dict__:
        model.__dict__[REQUIRES_GRAD] = {name: p.requires_grad for name, p in model.named_parameters()}
    return dict(model.__dict__[REQUIRES_GRAD])


def restore_requires_grad(model: Model, flags: dict[str, bool]) -> None:
    """Give each parameter named in `flags` its `requires_grad` back (a later Trainer trains what it did before)."""
    model.__dict__.pop(REQUIRES_GRAD, None)
    for name, parameter in model.named_parameters():
        if name in flags:
            parameter.requires_grad_(flags[name])


def check_not_an_adapter(model: Model) -> None:
    """Refuse a peft model around the extended one: embedding-only training would freeze its adapters, and its
    `save_pretrained` (so the Trainer's checkpoints and `save_model`) writes the adapters alone, not the trained rows.

    Raises:
        `UnsupportedModelError`: naming the model and the ways to train embeddings and adapters together.
    """
    if is_peft(model):
        raise UnsupportedModelError(
            f"model is a peft {type(model).__name__}: embedding-only training would freeze its adapters, and its "
            "save_pretrained (the Trainer's checkpoints and save_model too) writes the adapters alone, so the trained "
            "embedding rows would be lost. Train the model before get_peft_model (or merge a trained adapter first: "
            "model = model.merge_and_unload()); to train LoRA adapters in the same run, pass "
            "EmbeddingOnlyCallback(second_stage=SecondStage(after_step=0, lora=LoraConfig(...))), which merges them "
            "when training ends."
        )


def trainable_row_ids(model: Model, rows: str | Sequence[int]) -> torch.Tensor | None:
    """The embedding rows to train: `"all"` -> None (every row), `"new"` -> the record's new ids, or given ids.

    Ids come sorted, unique, on the embeddings' device.

    Raises:
        `InvalidArgumentError`: if `rows` is none of those, or an id is outside the embedding matrix.
        `RecordError`: if `rows="new"` and the model carries no ExtensionRecord (or one for another size).
    """
    weight = embedding_parameters(model)[0]
    num_rows, device = weight.shape[0], weight.device
    rows = check_rows(rows)
    if isinstance(rows, str):
        return None if rows == "all" else _record_new_ids(model, num_rows, device)
    if rows[0] < 0 or rows[-1] >= num_rows:  # checked as Python ints: an id past int64 fails to become a tensor
        raise InvalidArgumentError(
            f"rows holds ids from {rows[0]} to {rows[-1]} but the embedding matrix has {num_rows} rows: "
            f"pass ids in [0, {num_rows})."
        )
    return torch.tensor(rows, dtype=torch.long, device=device)


def check_rows(rows: Any) -> str | list[int]:
    """`rows` checked: `"new"`, `"all"`, or row ids in any collection of ints (a list, a range, a 1-D integer tensor
    or array), returned sorted without repeats.

    Raises:
        `InvalidArgumentError`: another string, no ids, or an id that is not an int (a bool, a float).
    """
    if isinstance(rows, str):
        if rows not in ROW_CHOICES:
            raise InvalidArgumentError(f"rows={rows!r} is invalid: pass 'new', 'all' or a list of row ids.")
        return rows
    ids = rows.tolist() if isinstance(rows, (torch.Tensor, np.ndarray)) and rows.ndim == 1 else rows
    if not is_collection(ids):
        raise InvalidArgumentError(f"rows={rows!r:.80} is invalid: pass 'new', 'all' or a list of row ids.")
    ids = list(ids)
    if not ids or not all(is_int(i) or isinstance(i, np.integer) for i in ids):
        raise InvalidArgumentError(f"rows={rows!r:.80} is invalid: pass 'new', 'all' or a non-empty list of row ids.")
    return sorted({int(i) for i in ids})


def _record_new_ids(model: Model, num_rows: int, device: torch.device) -> torch.Tensor:
    try:
        record = get_record(model)
    except RecordError as error:
        raise RecordError(f"{error} rows='new' trains the rows extend_vocabulary added; pass rows='all' to train "
                          "every row of a model without a record.") from None
    ids = torch.tensor(record.new_ids, dtype=torch.long, device=device)
    if record.new_num_rows != num_rows or (len(ids) and ids[-1] >= num_rows):
        raise RecordError(
            f"The vocabshift record describes {record.new_num_rows} embedding rows but the model has {num_rows}: "
            "it was resized after extend_vocabulary. Pass the row ids to train explicitly (rows=[...]); vocabshift "
            "train, which takes no ids, trains the new rows of a model with the record's size (resize_token_embeddings("
            f"{record.new_num_rows}) where the rows after them hold no token), or every row with --rows all."
        )
    return ids


def freeze_for_embedding_training(model: Model, *, rows: str | Sequence[int] = "new") -> TrainableRows:
    """Freeze everything but the embeddings, and split the rows that train into their own parameters.

    Args:
        model (`PreTrainedModel`): the model; its input embeddings and (tied or untied) output head train.
        rows (`str` or `list[int]`, defaults to `"new"`): `"new"` trains only the rows `extend_vocabulary` added,
            `"all"` every row, or the given row ids (a list, a range, a 1-D integer tensor or array).

    Returns:
        `TrainableRows`: pass `.parameters` to the optimizer; call `.fold()` when training ends (or use it as a
        context manager). Until then `state_dict()` and `save_pretrained` fold the rows in on the fly.

    Raises:
        `InvalidArgumentError`, `RecordError`, `UnsupportedModelError`: see `trainable_row_ids` and `split_rows`;
            `UnsupportedModelError` also for a peft model (`check_not_an_adapter`).

    Example:
        ```python
        >>> with freeze_for_embedding_training(model, rows="new") as trainable:
        ...     optimizer = torch.optim.AdamW(trainable.parameters, lr=1e-3, weight_decay=0.1)
        ...     train(model, optimizer)
        ```
    """
    check_not_an_adapter(model)
    ids = trainable_row_ids(model, rows)
    freeze_body(model)
    return split_rows(model, ids)


def row_norms(model: Model, new_ids: torch.Tensor | None) -> dict[str, float]:
    """Mean L2 norm of the new rows and of the other rows, for the input embeddings and an untied head.

    With `new_ids=None` (no record), the mean norm of all rows. Rows split off for training count with their
    current values.
    """
    embeddings = find_embeddings(model)
    modules = [embeddings.input] + ([] if embeddings.output is None else [embeddings.output])
    figures = {}
    for name, module in zip(("embed", "head"), modules):
        norms = row_norms_of(module)
        if new_ids is None:
            figures[f"{name}_row_norm"] = norms.mean().item()
            continue
        is_new = torch.zeros_like(norms, dtype=torch.bool)
        is_new[new_ids.to(norms.device)] = True
        figures[f"{name}_new_row_norm"] = norms[is_new].mean().item()
        figures[f"{name}_old_row_norm"] = norms[~is_new].mean().item()
    return figures
