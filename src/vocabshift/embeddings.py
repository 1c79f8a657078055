"""The model's embedding layout, found in one place: the input matrix, the head, tying, padding rows, a head bias.

Every caller (extend, training, evaluation, distillation's teacher, a helper model, `inspect`, `propagate` on
safetensors files) finds the embeddings here; nothing else calls `get_input_embeddings`. A head bias (`bias`,
`EmbeddingNames.bias`) is supported at every step, decided here: extend gives new tokens the mean bias, training
leaves it frozen, propagation carries it like the rows (see `propagation.plan.propagated_bias`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._typing import Model, Tokenizer, is_peft
from .errors import TokenizerMismatchError, UnsupportedModelError
from .record import ExtensionRecord, find_record
from .vocab.load import fingerprint

__all__ = [
    "MAX_PADDING_ROWS",
    "ORIGINALS",
    "SPLIT",
    "EmbeddingNames",
    "Embeddings",
    "OriginalEmbeddings",
    "check_tokenizer",
    "embedding_names",
    "find_embeddings",
    "grown_from",
    "input_matrix",
    "non_finite_rows",
    "ordinary_beyond",
    "original_embeddings",
    "stored_shape",
]

# Models round their embedding rows up (Qwen2.5: 271 rows beyond its tokenizer, DeepSeek LLM and DeepSeekMoE: 2,385,
# 102,400 rows for 100,015 tokens); a larger gap means another model's tokenizer, whose ids would name rows of other
# tokens.
MAX_PADDING_ROWS = 4096

# The model attribute that holds the embedding tensors a model had before replace mode (`OriginalEmbeddings`).
ORIGINALS = "_vocabshift_original_embeddings"
# The input embedding module's attribute that holds the rows split off for training (`training.cpt.rows`).
SPLIT = "_vocabshift_split"


@dataclass(frozen=True)
class Embeddings:
    """The model's embedding modules: input, untied output head (or None), any head (tied or not).

    Attributes:
        input (`nn.Embedding`): the input embeddings (`weight` of shape `(num_rows, hidden)`).
        output (`nn.Linear | None`): the output head when it is untied, else None.
        head (`nn.Linear | None`): the output head, tied or not; None for an encoder without one.
        num_rows (`int`): rows of the input matrix (padding rows included).

    The modules are typed as the classes nearly every model uses; any module with a 2-D `weight` is accepted (and
    `training.cpt.rows` refuses, for split rows, what is not a plain `nn.Embedding` / `nn.Linear`).
    """

    input: torch.nn.Embedding
    output: torch.nn.Linear | None
    head: torch.nn.Linear | None
    num_rows: int

    @property
    def tied(self) -> bool:
        return self.head is not None and self.output is None

    @property
    def weights(self) -> list[torch.nn.Parameter]:
        """The matrices: the input embeddings and, when untied, the head's weight."""
        weights = [self.input.weight] + ([] if self.output is None else [self.output.weight])
        return [w for w in weights if isinstance(w, torch.nn.Parameter)]

    @property
    def bias(self) -> torch.Tensor | None:
        """The head's bias, if it has one."""
        bias = getattr(self.head, "bias", None)
        return bias if isinstance(bias, torch.Tensor) else None

    def padding_rows(self, vocab_size: int) -> int:
        """Rows beyond a vocabulary of `vocab_size` tokens (models round their row count up)."""
        return max(0, self.num_rows - vocab_size)


def _modules(model: Model) -> tuple[Any, Any]:
    """`get_input_embeddings()` and `get_output_embeddings()` as the model gives them (None where it has none)."""
    try:
        inputs = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        inputs = None
    return inputs, model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None


def input_matrix(model: Model) -> torch.Tensor | None:
    """The input embedding matrix of a model (2-D, floating point), or None if it has none."""
    weight = getattr(_modules(model)[0], "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        return None
    return weight


def find_embeddings(model: Model) -> Embeddings:
    """The model's input embeddings and head.

    Raises:
        `UnsupportedModelError`: without an input embedding matrix, with a head of another shape or one that is not
            a floating-point matrix (quantized), with embeddings whose values are not loaded (on the meta device), or
            with embeddings or a head that a peft adapter wraps.
    """
    inputs, found = _modules(model)
    _check_not_wrapped(model, inputs, found)
    head = found if isinstance(getattr(found, "weight", None), torch.Tensor) else None
    weight = input_matrix(model)
    if weight is None:
        inner = getattr(model, "module", None)  # DataParallel, DistributedDataParallel
        fix = f"the {type(inner).__name__} it wraps (model.module)" if isinstance(inner, torch.nn.Module) else \
            "a transformers model with token embeddings"
        raise UnsupportedModelError(f"{type(model).__name__} has no input embedding matrix (get_input_embeddings() "
                                    f"gave {type(inputs).__name__}): pass {fix}.")
    _check_head_writable(model, found, head)
    if head is not None and head.weight.shape != weight.shape:
        raise UnsupportedModelError(
            f"{type(model).__name__}'s output head has shape {tuple(head.weight.shape)} but its input embeddings "
            f"{tuple(weight.shape)}: vocabshift needs one row per token in both."
        )
    untied = head if head is not None and head.weight is not weight else None
    _check_materialized(model, {"input embeddings": weight, "output head": getattr(untied, "weight", None)})
    return Embeddings(inputs, untied, head, weight.shape[0])


def _check_not_wrapped(model: Model, *modules: Any) -> None:
    """Refuse embeddings that a peft adapter wraps (a LoRA layer, `modules_to_save`, trainable tokens): their
    adapter weights keep the old vocabulary's width, and the extended model would fail in its first forward."""
    wrapped = next((module for module in modules if is_peft(module)), None)
    if wrapped is not None:
        raise UnsupportedModelError(
            f"{type(model).__name__}'s embeddings are wrapped by a peft adapter ({type(wrapped).__module__}."
            f"{type(wrapped).__name__}), whose weights keep the old vocabulary's width: call extend_vocabulary on "
            "the model before get_peft_model, or merge a trained adapter first (model = model.merge_and_unload())."
        )


def _check_head_writable(model: Model, found: Any, head: Any) -> None:
    """Refuse a head vocabshift cannot write rows into (a quantized one: its weight is packed integers, or not a
    tensor at all), which would otherwise be left without the new tokens' rows, silently."""
    if found is not None and (head is None or not head.weight.is_floating_point()):
        raise UnsupportedModelError(
            f"{type(model).__name__}'s output head is a {type(found).__module__}.{type(found).__name__} without a "
            "floating-point weight matrix (a quantized head?), so the new tokens' output rows cannot be written: "
            "extend the model in its float dtype, save it, then quantize the result."
        )


def _check_materialized(model: Model, weights: dict[str, torch.Tensor | None]) -> None:
    """Refuse weights on the meta device: building new rows needs the old ones' values, and without this check the
    failure would come late, from deep inside the resize."""
    for what, weight in weights.items():
        if weight is not None and weight.is_meta:
            raise UnsupportedModelError(
                f"{type(model).__name__} holds its {what} on the meta device: the values are not loaded (a model "
                "built under torch.device('meta') or init_empty_weights, or offloaded by device_map / cpu_offload). "
                "Load the weights first: from_pretrained(...) without a device_map that offloads, then pass that "
                "model."
            )


@dataclass(frozen=True)
class EmbeddingNames:
    """Parameter names of a model class's embedding tensors (a tied pair shares names).

    Attributes:
        input / head / bias (`list[str]`): every name of the input matrix, of the head's weight and of its bias
            (empty: none; BERT's bias is `cls.predictions.decoder.bias` and, as stored, `cls.predictions.bias`).
        tied (`bool`): the head's weight is the input matrix.
    """

    input: list[str]
    head: list[str]
    bias: list[str]
    tied: bool


def embedding_names(config: Any) -> EmbeddingNames:
    """The names of the embedding tensors of the model `config` describes, from a model built on the meta device
    (no weight is allocated): what `inspect` and `propagate` look for in safetensors files."""
    import transformers

    architecture = (config.architectures or [None])[0]
    model_class = getattr(transformers, architecture or "", None)
    with torch.device("meta"):
        model = model_class(config) if model_class else transformers.AutoModel.from_config(config)
    inputs, head = _modules(model)
    named = list(model.named_parameters(remove_duplicate=False))
    input_names = [n for n, p in named if p is inputs.weight]
    head_names, bias_names = ([n for n, p in named if p is getattr(head, what, None)] for what in ("weight", "bias"))
    tied = bool(head_names) and bool(set(input_names) & set(head_names))
    inputs_saved, head_saved, bias_saved = (_with_saved_names(model, n) for n in (input_names, head_names, bias_names))
    return EmbeddingNames(inputs_saved, head_saved, bias_saved, tied)


def _with_saved_names(model: Any, names: list[str]) -> list[str]:
    """`names`, then the names save_pretrained stores those parameters under where transformers renames them on
    saving (Gemma-3's and Llava's `model.language_model.*` are stored as `language_model.model.*`)."""
    from transformers.core_model_loading import revert_weight_conversion

    parameters = dict(model.named_parameters(remove_duplicate=False))
    saved = [key for name in names for key in revert_weight_conversion(model, {name: parameters[name]})]
    return list(dict.fromkeys([*names, *saved]))


def stored_shape(shapes: Mapping[str, list[int]], names: Sequence[str]) -> list[int] | None:
    """The shape of the first of `names` (`embedding_names`) among a folder's stored tensors (`shapes`, by name),
    allowing for a base-model prefix on either side."""
    for name in names:
        for key, shape in shapes.items():
            if key == name or key.endswith("." + name) or name.endswith("." + key):
                return shape
    return None


def check_tokenizer(model: Model, tokenizer: Tokenizer, num_rows: int, *, argument: str) -> None:
    """`tokenizer` can be `model`'s: no ordinary token beyond the embedding rows (special tokens may be, as
    Gemma-3's image token is), no more rows without a token than padding explains, and, when the model carries an
    ExtensionRecord, it is the tokenizer the last `extend_vocabulary` call returned (same fingerprint).

    Raises:
        `TokenizerMismatchError`: naming `argument`.
    """
    record = find_record(model)
    if record is not None and fingerprint(tokenizer) != record.tokenizer_sha256 and not grown_from(tokenizer, record):
        raise TokenizerMismatchError(
            f"{argument} is not the tokenizer returned by the model's last extend_vocabulary call (it has "
            f"{len(tokenizer)} tokens, that one {record.new_vocab_size}, fingerprint {record.tokenizer_sha256[:12]}"
            f"...; the model carries the record of that call): pass that tokenizer as {argument} (the one "
            "extend_vocabulary returned, or saved next to the extended model, with any tokens added after it)."
        )
    beyond = ordinary_beyond(tokenizer, num_rows)
    if beyond:
        raise TokenizerMismatchError(
            f"{argument} has {len(tokenizer)} tokens but {type(model).__name__} has {num_rows} embedding rows, and "
            f"ids beyond them are ordinary tokens (e.g. {beyond[0]!r}): it is not this model's tokenizer. Pass the "
            "tokenizer the model was trained with."
        )
    if num_rows - len(tokenizer) > MAX_PADDING_ROWS:
        raise TokenizerMismatchError(
            f"{argument} has {len(tokenizer)} tokens but {type(model).__name__} has {num_rows} embedding rows: "
            f"{num_rows - len(tokenizer)} rows would have no token, more than padding explains, so it is not this "
            "model's tokenizer (new tokens would overwrite rows of the model's own tokens). Pass the tokenizer the "
            "model was trained with (the one saved next to its weights, which has a token for each of those rows)."
        )


def ordinary_beyond(tokenizer: Tokenizer, num_rows: int) -> list[str]:
    """The tokens of `tokenizer` with ids past `num_rows` rows that are not special (a special token may have no row,
    as Gemma-3's image token), sorted: a model with those rows would fail on them."""
    specials = set(tokenizer.all_special_tokens)
    return sorted(token for token, i in tokenizer.get_vocab().items() if i >= num_rows and token not in specials)


def grown_from(tokenizer: Tokenizer, record: ExtensionRecord) -> bool:
    """`tokenizer` is the one the last `extend_vocabulary` call returned with tokens added after it (ids from
    `record.new_vocab_size` on, whose rows a resize added and training may have filled): `vocab.fingerprint` of its
    ids below those."""
    return len(tokenizer) > record.new_vocab_size and \
        fingerprint(tokenizer, below=record.new_vocab_size) == record.tokenizer_sha256


@dataclass(frozen=True, eq=False)
class OriginalEmbeddings:
    """A model's embedding tensors by role, as they were before `extend_vocabulary` replaced its vocabulary.

    Distillation's teacher runs the original model on the old tokenization, so in replace mode `extend_vocabulary`
    keeps them on the model (attribute `ORIGINALS`, read by `original_embeddings`): the tensors the model held,
    detached, not copies. A plain attribute, not a parameter or buffer: `state_dict()` and `save_pretrained` leave it
    out, so a model loaded again has none (its distillation then needs a `teacher_model`); `copy.deepcopy` copies
    it.

    Attributes:
        input (`torch.Tensor`): the input embedding matrix.
        head (`torch.Tensor | None`): the output head's weight (the same tensor when tied); None without a head.
        bias (`torch.Tensor | None`): the head's bias, if it has one.
    """

    input: torch.Tensor
    head: torch.Tensor | None
    bias: torch.Tensor | None

    @classmethod
    def of(cls, model: Model) -> OriginalEmbeddings:
        """The embedding tensors `model` holds now, detached views of the same storage (a tied head: one tensor)."""
        embeddings = find_embeddings(model)
        weight, output, bias = embeddings.input.weight.detach(), embeddings.output, embeddings.bias
        head = weight if embeddings.tied else None if output is None else output.weight.detach()
        return cls(weight, head, None if bias is None else bias.detach())

    def first_rows(self, count: int) -> OriginalEmbeddings:
        """Copies of the first `count` rows of each tensor (the old vocabulary's), made before any of them trains;
        a tied head shares the input's copy."""
        rows = self.input[:count].clone()
        head = rows if self.head is self.input else None if self.head is None else self.head[:count].clone()
        return OriginalEmbeddings(rows, head, None if self.bias is None else self.bias[:count].clone())


def original_embeddings(model: Model) -> OriginalEmbeddings | None:
    """The embedding tensors `extend_vocabulary` kept on `model` when it replaced its vocabulary; None if none."""
    found = vars(model).get(ORIGINALS)
    return found if isinstance(found, OriginalEmbeddings) else None


def non_finite_rows(matrix: torch.Tensor) -> list[int]:
    """The ids of the rows of `matrix` that hold NaN or infinite values. Row sums in float64 cannot overflow from
    finite values (and a row of +inf and -inf sums to NaN), so no boolean copy of the matrix is made."""
    return (~torch.isfinite(matrix.detach().sum(dim=1, dtype=torch.float64))).nonzero().flatten().tolist()
