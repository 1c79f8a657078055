"""What `extend_vocabulary` checks before it touches the model: its arguments, a model whose rows are not what its
record and tokenizer say (split off for training, or grown after the last extension), and one with a per-token tensor
it would not resize."""

from __future__ import annotations

import logging
from typing import Any

import torch

from ._typing import Model, Tokenizer
from .arguments import check_choice, check_count, check_flag, check_seed
from .embeddings import SPLIT, Embeddings, find_embeddings
from .errors import InvalidArgumentError, TokenizerMismatchError, TrainingSetupError, UnsupportedModelError
from .record import find_record
from .vocab.ids import ID_SUFFIXES

__all__ = [
    "check_arguments",
    "check_config_ids",
    "check_head_partner",
    "check_no_other_token_tensor",
    "check_not_grown",
    "check_not_split",
    "warn_without_roles",
]

logger = logging.getLogger(__name__)
_MODES = ("extend", "replace")
_MAX_MULTIPLE = 65536


def check_arguments(mode: Any, pad_to_multiple_of: Any, seed: Any, keep_source_segmentation: Any) -> None:
    check_flag(keep_source_segmentation, name="keep_source_segmentation")
    if keep_source_segmentation and mode != "extend":
        raise InvalidArgumentError(
            "keep_source_segmentation=True works in mode='extend' only: replace mode gives the model a new "
            "vocabulary, which cuts every text anew."
        )
    check_choice(mode, _MODES, name="mode")
    if pad_to_multiple_of is not None:  # bounded: the padding rows it adds take memory and disk as real ones
        accepted = f"a positive int up to {_MAX_MULTIPLE:,} (e.g. 64) or None"
        if check_count(pad_to_multiple_of, name="pad_to_multiple_of", accepted=accepted) > _MAX_MULTIPLE:
            raise InvalidArgumentError(f"pad_to_multiple_of={pad_to_multiple_of!r} is invalid: pass {accepted}.")
    check_seed(seed)


def check_not_split(model: Model) -> None:
    """Refuse a model whose rows are split off for training: its matrices hold zeros at those rows, which the new
    rows would be built from and the resized matrices would keep, losing what the rows learned."""
    split = find_embeddings(model).input.__dict__.get(SPLIT)
    if split is not None:
        raise TrainingSetupError(
            f"{type(model).__name__}'s embedding rows are split off for training (freeze_for_embedding_training, or "
            f"an EmbeddingOnlyCallback whose Trainer did not finish), so its matrices hold zeros at the "
            f"{len(split.ids) if split.ids is not None else 0} rows that train: extending it would lose what they "
            "learned. Fold them back first: trainable.fold() on what freeze_for_embedding_training returned, or "
            "vocabshift.training.cpt.rows.current_split(model).fold()."
        )


def check_not_grown(model: Model, rows: int, tokens: int) -> None:
    """Refuse rows added after the last extension (a resize for tokens added to the tokenizer) that `source_tokenizer`
    lacks: the new tokens would take their ids, and overwrite their rows (replace mode: drop them)."""
    record = find_record(model)
    if record is not None and tokens <= record.new_num_rows < rows:
        raise TokenizerMismatchError(
            f"source_tokenizer has {tokens} tokens, but the model has {rows} embedding rows, "
            f"{rows - record.new_num_rows} more than its last extend_vocabulary call gave it ({record.new_num_rows}): "
            "rows added after it (a resize for tokens added to the tokenizer), which the new tokens would overwrite. "
            "Pass the tokenizer those tokens were added to as source_tokenizer; if the rows hold no token (a resize "
            "that only padded), "
            f"model.resize_token_embeddings({record.new_num_rows}) removes them first."
        )


def check_no_other_token_tensor(model: Model, embeddings: Embeddings) -> None:
    """Refuse a model with a float tensor of one value per token besides the head's bias, added to the logits
    (Marian's, mBART's and BART's `final_logits_bias` buffer): extension would leave it at the old size, and the
    extended model would fail in its first forward. Only the last dimension is read, as logits are: position tables
    and id buffers of as many entries as the vocabulary are not per-token tensors."""
    def per_token(tensor: torch.Tensor) -> bool:
        return tensor.is_floating_point() and tensor.dim() > 0 and tensor.shape[-1] == embeddings.num_rows

    bias = embeddings.bias
    tensors = [*model.named_parameters(), *model.named_buffers()]
    found = next(((name, t) for name, t in tensors if t is not bias and per_token(t)), None)
    if found is not None:
        raise UnsupportedModelError(
            f"{type(model).__name__} has {found[0]} of shape {tuple(found[1].shape)}, one value per token besides "
            "its embeddings and output head, which vocabshift does not resize: the extended model would fail in its "
            "first forward. vocabshift extends models whose only per-token tensors are the input embeddings, the "
            "output head and its bias (decoder-only LLMs, encoders such as BERT, T5)."
        )


def check_config_ids(model: Model, source_size: int, target: Tokenizer) -> None:
    """Refuse (extend mode) a config token id that `source_tokenizer` has no token for and a new token would take
    (Llava's `image_token_index` when given its language model's tokenizer, without `<image>`): the model would read
    that new token as its image or control token."""
    configs = [model.config, model.config.get_text_config(), getattr(model, "generation_config", None)]
    for config in filter(None, {id(c): c for c in configs}.values()):
        for name, value in filter(lambda item: item[0].endswith(ID_SUFFIXES), vars(config).items()):
            taken = [i for i in (value if isinstance(value, list) else [value])
                     if type(i) is int and source_size <= i < len(target)]
            if taken:
                raise TokenizerMismatchError(
                    f"config.{name}={value} names no token of source_tokenizer ({source_size} tokens), and the new "
                    f"token {target.convert_ids_to_tokens(taken[0])!r} would take that id, which the model reads as "
                    f"its {name.removesuffix('_id').removesuffix('_index')}: pass the model's own tokenizer, with "
                    "that token, as source_tokenizer (the one saved next to its weights; for a vision-language "
                    "model AutoProcessor's .tokenizer)."
                )


def check_head_partner(model: Model, embeddings: Embeddings) -> None:
    """Refuse a head tied to a token embedding other than the input one (EncoderDecoderModel: the input embeddings
    are the encoder's, the head is tied to the decoder's): extension writes one matrix and one vocab_size, so the
    other sub-model's config would keep the old size, and the saved model would not load."""
    head = getattr(embeddings.head, "weight", None)
    partner = next((name for name, module in model.named_modules() if isinstance(module, torch.nn.Embedding)
                    and module.weight is head and module is not embeddings.input), None)
    if head is not None and head is not embeddings.input.weight and partner is not None:
        raise UnsupportedModelError(
            f"{type(model).__name__}'s output head is tied to {partner}, a token embedding other than its input "
            "embeddings (get_input_embeddings()): vocabshift extends a model with one token embedding matrix and "
            "its head (a causal LM, an encoder, T5 with its shared embeddings)."
        )


def warn_without_roles(model: Model, source: Tokenizer) -> None:
    """Warn when `source` has no eos token but the model's config names one: a tokenizer.json or a
    `tokenizers.Tokenizer` (accepted as source_tokenizer) carries no special-token roles nor chat template, so the
    returned tokenizer, and the folder saved with it, would lack them without a word."""
    eos = model.config.get_text_config().eos_token_id
    first = eos[0] if isinstance(eos, list) and eos else eos
    if source.eos_token is None and type(first) is int and first < len(source):
        logger.warning(
            "source_tokenizer has no eos_token while the model's config names eos_token_id=%s (%r): a tokenizer.json "
            "or a tokenizers.Tokenizer carries no special-token roles nor chat template, so the returned tokenizer "
            "has none either. Pass the model's tokenizer folder, or AutoTokenizer.from_pretrained(...) of it, as "
            "source_tokenizer.", eos, source.convert_ids_to_tokens(first),
        )
