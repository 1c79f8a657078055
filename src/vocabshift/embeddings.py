"""The model's embedding matrices: find them, and assemble the new ones (the model itself is not touched here)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

from .errors import TokenizerMismatchError, UnsupportedModelError
from .methods import InitResult
from .record import CONFIG_KEY, get_record
from .vocab.align import Alignment
from .vocab.load import fingerprint

__all__ = [
    "Embeddings",
    "assemble_weights",
    "check_tokenizer",
    "find_embeddings",
    "original_embeddings",
    "original_tensors",
    "remember_original",
    "row_count",
]

# The embedding tensors models had before replace mode, for distillation's teacher (this process only).
_ORIGINALS: weakref.WeakKeyDictionary[Any, dict[str, torch.Tensor]] = weakref.WeakKeyDictionary()


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
        `UnsupportedModelError`: without an input embedding matrix, with a head of another shape, or with
            embeddings whose values are not loaded (on the meta device).
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
    _check_materialized(model, {"input embeddings": weight, "output head": getattr(untied, "weight", None)})
    return Embeddings(inputs, untied, head, weight.shape[0])


def _check_materialized(model: Any, weights: dict[str, torch.Tensor | None]) -> None:
    """Refuse weights on the meta device: building new rows needs the old ones' values, and without this check the
    failure would come late, from deep inside the resize."""
    for what, weight in weights.items():
        if weight is not None and weight.is_meta:
            raise UnsupportedModelError(
                f"{type(model).__name__} holds its {what} on the meta device: the values are not loaded (a model "
                "built under torch.device('meta') or init_empty_weights, or offloaded by device_map / cpu_offload). "
                "Load the weights first: from_pretrained(...) without a device_map that offloads, then call "
                "extend_vocabulary."
            )


# Models round their embedding rows up (Qwen2.5: 271 rows beyond its tokenizer); a larger gap means another model's
# tokenizer, whose ids would name rows of other tokens.
MAX_PADDING_ROWS = 1024


def check_tokenizer(model: Any, tokenizer: Any, rows: int, *, argument: str) -> None:
    """`tokenizer` can be `model`'s: no ordinary token beyond the embedding rows (special tokens may be, as
    Gemma-3's image token is), no more rows without a token than padding explains, and, when the model carries an
    ExtensionRecord, it is the tokenizer the last `extend_vocabulary` call returned (same fingerprint).

    Raises:
        `TokenizerMismatchError`: naming `argument`.
    """
    beyond = sorted(token for token, index in tokenizer.get_vocab().items() if index >= rows)
    if not set(beyond) <= set(tokenizer.all_special_tokens):
        raise TokenizerMismatchError(
            f"{argument} has {len(tokenizer)} tokens but {type(model).__name__} has {rows} embedding rows, and ids "
            f"beyond them are ordinary tokens (e.g. {beyond[0]!r}): it is not this model's tokenizer. Pass the "
            "tokenizer the model was trained with."
        )
    if rows - len(tokenizer) > MAX_PADDING_ROWS:
        raise TokenizerMismatchError(
            f"{argument} has {len(tokenizer)} tokens but {type(model).__name__} has {rows} embedding rows: "
            f"{rows - len(tokenizer)} rows would have no token, more than padding explains, so it is not this "
            "model's tokenizer (new tokens would overwrite rows of the model's own tokens). Pass the tokenizer the "
            "model was trained with; if those rows really are unused padding, shrink them first with "
            "model.resize_token_embeddings(len(tokenizer))."
        )
    if isinstance(getattr(model.config, CONFIG_KEY, None), dict):
        expected = get_record(model).tokenizer_sha256
        if fingerprint(tokenizer) != expected:
            raise TokenizerMismatchError(
                f"{argument} is not the tokenizer returned by the model's last extend_vocabulary call "
                f"(fingerprint {expected[:12]}...): pass that tokenizer."
            )


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


def original_tensors(model: Any) -> dict[str, torch.Tensor | None]:
    """The model's embedding tensors by role (`input`, `head`, `bias`; the same tensor twice when tied), detached
    views of the same storage, not copies."""
    inputs = model.get_input_embeddings().weight
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    bias = getattr(head, "bias", None)
    return {"input": inputs.detach(), "head": None if head is None else head.weight.detach(),
            "bias": bias.detach() if isinstance(bias, torch.Tensor) else None}


def remember_original(model: Any) -> None:
    """Keep the embedding tensors `model` has now (`original_tensors`) before they are replaced."""
    _ORIGINALS[model] = original_tensors(model)


def original_embeddings(model: Any) -> dict[str, torch.Tensor | None] | None:
    """The tensors `remember_original` kept for `model`, by role; None if none were kept."""
    return _ORIGINALS.get(model)
