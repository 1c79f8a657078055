"""Trainable rows as their own parameters: the embedding lookup and the head compose them with a frozen matrix.

While the rows train, each embedding matrix `W` (the input embeddings, and an untied head) is frozen and the rows
that train live in a separate parameter, `trainable_rows`, registered on the module that uses them (on both modules
of a tied pair, as transformers registers a tied weight). `W`'s own copies of those rows are zero, so that

- the lookup is `W`'s lookup with the trainable ids' rows taken from `trainable_rows` instead;
- the head's logits for a range of ids (the usual new rows) are three blocks side by side, `h @ W[:start].T`,
  `h @ trainable_rows.T` and `h @ W[stop:].T`; for other ids, `h @ W.T` plus `h @ trainable_rows.T` added at their
  columns. No merged matrix is built and the weight gradient covers only the trainable rows.

The optimizer therefore holds state for the trainable rows only and the other rows cannot change: there is nothing
to restore. `trainable_rows` is kept in float32 when `W` is in half precision (master weights) and cast to `W`'s
dtype in the forward. `state_dict()` (so `save_pretrained` and Trainer checkpoints) folds the rows into `W` and
leaves `trainable_rows` out, and `load_state_dict` splits them again: a checkpoint is a plain transformers model.
`TrainableRows.fold()` writes the rows back for good.

Under FSDP2 (`fully_shard` after the split) the parameters become DTensors: the hooks read them from the modules at
call time, `state_dict()` gathers the folded matrix, and `fold()` writes each rank's shard.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch
import torch.nn.functional as F

from ..._typing import Model
from ...embeddings import SPLIT, find_embeddings
from ...errors import TrainingSetupError, UnsupportedModelError
from ._fold import IDS, ROWS, SLOTS, drop_rows, fold_state, split_state, write_rows

__all__ = ["TrainableRows", "current_split", "embedding_parameters", "fold_an_earlier_split", "split_rows"]

logger = logging.getLogger(__name__)
LOOKUPS = "_vocabshift_lookups"  # the input module's count of looked-up ids that are trainable rows (a tensor)


def embedding_parameters(model: Model) -> list[torch.nn.Parameter]:
    """The input embedding matrix and, when it is not tied to it, the output head's weight (`Embeddings.weights`).

    Raises:
        `UnsupportedModelError`: if the model has no input embedding matrix.
    """
    return find_embeddings(model).weights


class TrainableRows:
    """The rows of a model's embedding matrices that train, and how to put them back.

    Returned by `split_rows` (and `freeze_for_embedding_training`). With `ids=None` every row trains as part of its
    matrix and nothing is split.

    Attributes:
        ids (`torch.Tensor | None`): the trainable row ids (sorted, on the embeddings' device); None for every row.
        parameters (`list[torch.nn.Parameter]`): what the optimizer takes, read from the model at each access (so
            that it is right after `fully_shard` replaced the parameters).
        is_split (`bool`): True until `fold()`.
    """

    def __init__(self, model: Model, ids: torch.Tensor | None, groups: list[list[str]], handles: list[Any]) -> None:
        self.model, self.ids = model, ids
        self._groups, self._handles = groups, handles

    @property
    def is_split(self) -> bool:
        return bool(self._groups)

    def take_lookups(self) -> int | None:
        """How many of the ids looked up since the split were trainable rows' (one read of a device counter), and
        stop counting: the lookup hook does no more work for it. None once folded, or taken before."""
        if not self._groups:
            return None
        counter = self.model.get_submodule(self._groups[0][0]).__dict__.pop(LOOKUPS, None)
        return None if counter is None else int(counter)

    @property
    def parameters(self) -> list[torch.nn.Parameter]:
        if self.ids is None:
            return embedding_parameters(self.model)
        return [getattr(self.model.get_submodule(g[0]), ROWS) for g in self._groups]

    @torch.no_grad()
    def fold(self) -> None:
        """Write the trained rows into their matrices and remove the split: the model is plain again.

        Call it once on every rank (under FSDP2 it gathers the rows; the `trainable_rows` parameters, which FSDP
        manages, stay registered but unused, and `state_dict()` leaves them out). A second call does nothing.
        """
        if not self._groups:
            return
        self.model.get_submodule(self._groups[0][0]).__dict__.pop(SPLIT, None)
        sharded = False
        for group in self._groups:
            module = self.model.get_submodule(group[0])
            sharded |= hasattr(module.weight, "to_local")
            write_rows(module.weight, getattr(module, IDS), getattr(module, ROWS))
        for handle in self._handles:
            handle.remove()
        self._handles = [self.model.register_state_dict_post_hook(drop_rows)] if sharded else []
        for name in ([] if sharded else [n for g in self._groups for n in g]):
            module = self.model.get_submodule(name)
            _unregister(module)
            module.weight.requires_grad_(True)  # as freeze_for_embedding_training left it before the split
        self._groups = []

    def __enter__(self) -> TrainableRows:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.fold()


def split_rows(model: Model, ids: torch.Tensor | None) -> TrainableRows:
    """Move the rows `ids` of the embedding matrices into their own trainable parameters; freeze the matrices.

    Args:
        model (`PreTrainedModel`): its input embeddings (`nn.Embedding`, or a subclass that only scales the lookup by
            `embed_scale`, as Gemma's) and output head (`nn.Linear`, tied or untied).
        ids (`torch.Tensor | None`): sorted unique row ids; None leaves every row trainable in its matrix.

    Returns:
        `TrainableRows`: pass `.parameters` to the optimizer; `.fold()` when training ends.

    Raises:
        `UnsupportedModelError`: an embedding or head module vocabshift cannot compose rows for.
        `TrainingSetupError`: the rows are split already, or the matrices sharded already (FSDP2's `fully_shard`
            before the split).
    """
    embeddings = find_embeddings(model)
    inputs, head = embeddings.input, embeddings.head
    if ids is None:
        for weight in embedding_parameters(model):
            weight.requires_grad_(True)
        return TrainableRows(model, None, [], [])
    _check_modules(inputs, head)
    names = {id(module): name for name, module in model.named_modules()}
    ids = ids.to(inputs.weight.device)
    handles = [_install_lookup(inputs, ids)]
    groups = [[names[id(inputs)]]]  # per matrix, the names of the modules that use it
    if head is not None:
        tied = head.weight is inputs.weight
        if tied:
            groups[0].append(names[id(head)])
        else:
            groups.append([names[id(head)]])
        _register(head, ids, getattr(inputs, ROWS) if tied else _new_rows(head.weight, ids))
        handles.append(_install_head(head, _start_of_range(ids)))
    handles.append(model.register_state_dict_post_hook(functools.partial(fold_state, groups=groups)))
    handles.append(model.register_load_state_dict_pre_hook(functools.partial(split_state, groups=groups)))
    rows = TrainableRows(model, ids, groups, handles)
    inputs.__dict__[SPLIT] = rows  # found again by `current_split` (a plain attribute: no parameter, no buffer)
    return rows


def current_split(model: Model) -> TrainableRows | None:
    """The `TrainableRows` whose split of `model`'s rows is still in place (None when the model is plain)."""
    return find_embeddings(model).input.__dict__.get(SPLIT)


def fold_an_earlier_split(model: Model) -> None:
    """A Trainer built on this model before, and not trained to its end, left the rows split: fold them back (what
    they learned stays) so that this Trainer can split them again."""
    earlier = current_split(model)
    if earlier is not None:
        logger.warning("An earlier Trainer's EmbeddingOnlyCallback left the rows split (built, or interrupted, before "
                       "training ended): folding them back into the model; do not train that Trainer any more.")
        earlier.fold()


def _check_modules(inputs: torch.nn.Embedding, head: torch.nn.Linear | None) -> None:
    if not isinstance(inputs, torch.nn.Embedding) or inputs.max_norm is not None or inputs.sparse \
            or inputs.scale_grad_by_freq or not _plain_or_scaled(inputs):
        raise UnsupportedModelError(
            f"The input embeddings are a {type(inputs).__name__} (max_norm, sparse or scale_grad_by_freq set, a "
            "lookup that does more than scale its rows, as a norm, or not an nn.Embedding): vocabshift composes "
            "trainable rows only for plain (or embed_scale-scaled) nn.Embedding lookups. Train every row "
            "(rows='all') instead."
        )
    plain = isinstance(head, torch.nn.Linear) and type(head).forward is torch.nn.Linear.forward
    if head is not None and not plain:
        raise UnsupportedModelError(
            f"The output head is a {type(head).__name__}, not a plain nn.Linear: vocabshift composes trainable rows "
            "only for linear heads. Train every row (rows='all') instead."
        )
    for module in (inputs, head):
        if module is not None and hasattr(module.weight, "to_local"):
            raise TrainingSetupError(
                f"The {'input embeddings' if module is inputs else 'output head'} are already sharded (a DTensor: "
                "fully_shard ran on the model first), and vocabshift splits the trainable rows off whole matrices. "
                "Split first, then shard: call freeze_for_embedding_training(model, rows=...) before fully_shard (the "
                "Trainer shards after EmbeddingOnlyCallback has split), or train every row (rows='all')."
            )
        if module is not None and hasattr(module, ROWS):
            raise TrainingSetupError(
                f"{type(module).__name__} already has split trainable rows: fold the earlier split "
                "(vocabshift.training.cpt.rows.current_split(model).fold()) before splitting again."
            )


def _plain_or_scaled(module: torch.nn.Embedding) -> bool:
    """nn.Embedding's own lookup, or one that only multiplies it by `embed_scale` (what the lookup hook does for the
    trainable rows): a subclass with modules of its own (a norm after the lookup) would skip them for those rows."""
    if type(module).forward is torch.nn.Embedding.forward:
        return True
    return getattr(module, "embed_scale", None) is not None and not any(True for _ in module.children())


def _new_rows(weight: torch.Tensor, ids: torch.Tensor) -> torch.nn.Parameter:
    """The rows `ids` of `weight` as a new parameter (float32 for half-precision weights); `weight` frozen, those
    rows zeroed."""
    with torch.no_grad():
        rows = torch.nn.Parameter(weight[ids].to(torch.promote_types(weight.dtype, torch.float32)))
        weight.index_fill_(0, ids, 0)
    weight.requires_grad_(False)
    return rows


def _register(module: torch.nn.Embedding | torch.nn.Linear, ids: torch.Tensor, rows: torch.nn.Parameter) -> None:
    slots = torch.full((module.weight.shape[0],), -1, dtype=torch.long, device=ids.device)
    slots[ids] = torch.arange(len(ids), device=ids.device)
    module.register_parameter(ROWS, rows)
    module.register_buffer(IDS, ids, persistent=False)
    module.register_buffer(SLOTS, slots, persistent=False)


def _unregister(module: torch.nn.Module) -> None:
    for name in (ROWS, IDS, SLOTS):
        if hasattr(module, name):
            delattr(module, name)
    module.__dict__.pop(LOOKUPS, None)


def _install_lookup(module: torch.nn.Embedding, ids: torch.Tensor) -> Any:
    _register(module, ids, _new_rows(module.weight, ids))
    module.__dict__[LOOKUPS] = torch.zeros((), dtype=torch.long, device=ids.device)  # no buffer: DDP
    # would broadcast the first process's count to the others
    pad = module.padding_idx
    padding_slot = int(getattr(module, SLOTS)[pad]) if pad is not None else -1
    hook = functools.partial(_lookup_hook, padding_slot=padding_slot if padding_slot >= 0 else None)
    return module.register_forward_hook(hook, with_kwargs=True)


def _lookup_hook(module: torch.nn.Embedding, args: tuple[Any, ...], kwargs: dict[str, Any], output: torch.Tensor, *,
                 padding_slot: int | None) -> torch.Tensor:
    """Replace the looked-up rows of trainable ids (zero in the frozen matrix) by the trainable rows."""
    ids = args[0] if args else next(iter(kwargs.values()))
    slots = getattr(module, SLOTS)[ids]
    found = slots >= 0
    counter = module.__dict__.get(LOOKUPS)
    if counter is not None:  # until taken; out of place: the model may have moved since, or run under inference_mode
        module.__dict__[LOOKUPS] = counter.to(found.device) + found.sum()
    weight = module.weight
    rows = F.embedding(slots.clamp(min=0), getattr(module, ROWS).to(weight.dtype), padding_idx=padding_slot)
    scale = getattr(module, "embed_scale", None)  # scaled lookups: a buffer (Gemma), or a float (XGLM, BioGPT)
    if scale is not None:
        rows = rows * (scale.to(weight.dtype) if isinstance(scale, torch.Tensor) else scale)
    return torch.where(found.unsqueeze(-1), rows, output)


class _Override:
    """Undoes an instance-level `forward` (a removable handle, as a hook's)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def remove(self) -> None:
        self.module.__dict__.pop("forward", None)


def _install_head(module: torch.nn.Linear, start: int | None) -> _Override:
    module.forward = functools.partial(_head_forward, module, start=start)  # type: ignore[method-assign]
    return _Override(module)


def _head_forward(module: torch.nn.Linear, hidden: torch.Tensor, *, start: int | None) -> torch.Tensor:
    """The head's logits with the trainable rows in their columns, without a merged matrix.

    For a range of ids (the usual new rows) the frozen matrix's rows before and after the range and the trainable
    rows each make their block of logits, so no work goes to the zeroed rows. Otherwise the trainable rows' logits
    are added at their columns, where the frozen matrix's rows are zero.
    """
    weight, bias = module.weight, module.bias
    rows = getattr(module, ROWS).to(weight.dtype)
    if start is None:
        logits = F.linear(hidden, weight, bias)
        return logits.index_add_(-1, getattr(module, IDS), F.linear(hidden, rows).to(logits.dtype))
    stop = start + rows.shape[0]
    parts = [(weight[:start], slice(0, start)), (rows, slice(start, stop)), (weight[stop:], slice(stop, None))]
    return torch.cat([F.linear(hidden, w, None if bias is None else bias[cut]) for w, cut in parts], dim=-1)


def _start_of_range(ids: torch.Tensor) -> int | None:
    """The first id when the (sorted, unique) ids are one range, else None."""
    first, last = int(ids[0]), int(ids[-1])
    return first if last - first + 1 == len(ids) else None
