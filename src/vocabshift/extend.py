"""`model.extend_vocabulary(...)`: orchestration only, and the one place that writes to the model.

alignment -> method inputs resolved (`inputs.py`) -> method -> new embedding matrices (`assemble.py`) -> (all checks
passed) write rows, config ids and the record. Everything that can fail runs before the first write, so a refused
call leaves the model as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from ._typing import Model, Tokenizer, TokenizerLike
from .assemble import ROW_MULTIPLE, assemble_weights, row_count
from .corpus import source_lines, text_lines
from .embeddings import ORIGINALS, Embeddings, OriginalEmbeddings, check_tokenizer, find_embeddings
from .errors import NoNewTokensError, TokenizerLoadError
from .extend_checks import (
    check_arguments,
    check_config_ids,
    check_head_partner,
    check_no_other_token_tensor,
    check_not_grown,
    check_not_split,
    warn_without_roles,
)
from .extension_record import Call, build_record, new_tokenizer_label, option_summary
from .inputs import resolve_inputs
from .methods import InitContext
from .record import ExtensionRecord, earlier_records, set_record
from .registry import build_config, get_method
from .results import check_result
from .vocab.align import Alignment, align
from .vocab.ids import remap_token_ids
from .vocab.load import fingerprint, load_tokenizer
from .vocab.merge import MergeReport, merge_tokenizers
from .vocab.placeholders import add_placeholders
from .vocab.replace import replacement_tokenizer
from .vocab.spm_file import attach_sentencepiece

__all__ = ["extend_vocabulary"]

logger = logging.getLogger(__name__)
_REPEATED = "new_tokenizer is the one this model was extended with before (its record keeps the fingerprint):"


def extend_vocabulary(
    model: Model,
    new_tokenizer: TokenizerLike,
    *,
    method: str = "subword",
    mode: str = "extend",
    source_tokenizer: TokenizerLike | None = None,
    pad_to_multiple_of: int | None = ROW_MULTIPLE,
    seed: int = 0,
    source_texts: Sequence[str] | None = None,
    keep_source_segmentation: bool | None = None,
    target_texts: Sequence[str] | None = None,
    **method_options: Any,
) -> Tokenizer:
    """Give `model` a target-language vocabulary and initialize the new input and output rows.

    Registered as `PreTrainedModel.extend_vocabulary` by `import vocabshift`.

    Args:
        model (`PreTrainedModel`): the model to change in place (causal LM, encoder, tied or untied head).
        new_tokenizer: a target-language tokenizer: a fast tokenizer, a `tokenizers.Tokenizer`, a path or a repo id.
        method (`str`, defaults to `"subword"`): any name of `vocabshift.list_methods()`.
        mode (`str`, defaults to `"extend"`): `"extend"` keeps every old id and row and appends the new tokens
            (merged into the old tokenizer's model); `"replace"` makes `new_tokenizer` the vocabulary, keeping the
            model's special tokens, their roles and its chat template.
        source_tokenizer (*optional*): the model's current tokenizer; defaults to the one at `model.name_or_path`.
        pad_to_multiple_of (`int`, *optional*, defaults to `ROW_MULTIPLE`, 128): round the number of embedding rows
            up to a multiple of this; 128 splits evenly over every power-of-two tensor-parallel degree up to 128
            (vLLM, TGI) and keeps matrix shapes aligned for GPU kernels. `None` or 1: no rounding; at most 65,536.
            Rows no token uses (these, and padding rows of the source that no new token took) get named special
            placeholder tokens (`vocab.placeholders`), so that every id below `config.vocab_size` decodes.
        seed (`int`, defaults to 0): seed of every random draw, in [0, 2**32); the same seed gives bit-identical
            rows.
        source_texts (`Sequence[str]`, *optional*): source-language lines whose segmentation extend mode must not
            change; defaults to 1,500 English lines shipped with vocabshift. The share of them cut differently is
            recorded (`record.tokenizer_report`) and, when not zero, warned about. The more lines, the more of the
            new tokens that would cut the source language differently are seen (tens of thousands find most).
        keep_source_segmentation (`bool`, *optional*): for a target language written in the source's script (extend
            mode): leave out the new tokens that change how a line of `source_texts` is cut; with `target_texts`,
            only those that are not clearly the target language's (at least four times as frequent per token in
            `target_texts` as in `source_texts`, with the tokens built from them), which keeps most of the target's
            gain. Defaults to True when `target_texts` is given in extend mode (keeping the source language's
            segmentation for the target costs the target next to nothing), else False.
        target_texts (`Sequence[str]`, *optional*): target-language lines, for `keep_source_segmentation` and for the
            tokens-per-word figures of `record.tokenizer_report`.
        **method_options: options of the method's config dataclass (e.g. `input_weighting="char_length"`).

    Returns:
        The tokenizer that now matches the model; save it next to the model with `vocabshift.save_pretrained_atomic`,
        which also writes a `tokenizer.model` in step with it when the source tokenizer has a SentencePiece model
        (transformers' `save_pretrained` writes tokenizer.json alone).

    Raises:
        `VocabShiftError`: before the model is touched, as the subclass that names the problem:
            `UnknownMethodError`, `MethodOptionError`, `InvalidArgumentError`, `InvalidTokenizerError`,
            `TokenizerLoadError`, `TokenizerMismatchError`, `IncompatibleTokenizerError`, `NoNewTokensError`,
            `UnsupportedModelError`, `MethodResultError`, `TrainingSetupError` (rows still split off for training).

    Example:
        ```python
        >>> import vocabshift
        >>> model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")
        >>> tokenizer = model.extend_vocabulary("ru-tokenizer/", method="subword")
        >>> vocabshift.save_pretrained_atomic(model, tokenizer, "out")
        ```
    """
    spec = get_method(method)
    config = build_config(spec, method_options)
    if keep_source_segmentation is None:
        keep_source_segmentation = target_texts is not None and mode == "extend"
    check_arguments(mode, pad_to_multiple_of, seed, keep_source_segmentation)
    call = Call(method, mode, seed, pad_to_multiple_of, keep_source_segmentation, source_texts is not None,
                target_texts is not None, new_tokenizer_label(new_tokenizer), option_summary(method_options))
    check_texts = source_lines(source_texts)
    target_lines = None if target_texts is None else text_lines(target_texts, name="target_texts")
    embeddings = find_embeddings(model)
    check_not_split(model)
    check_no_other_token_tensor(model, embeddings)
    check_head_partner(model, embeddings)
    source = load_tokenizer(_default_source(model, source_tokenizer), argument="source_tokenizer")
    new = load_tokenizer(new_tokenizer, argument="new_tokenizer")
    check_tokenizer(model, source, embeddings.num_rows, argument="source_tokenizer")
    check_not_grown(model, embeddings.num_rows, len(source))
    warn_without_roles(model, source)
    report = None
    if mode == "extend":
        target, report = merge_tokenizers(source, new, source_texts=check_texts, target_texts=target_lines,
                                          keep_source_segmentation=keep_source_segmentation)
        _warn_source_changes(report, source_texts is None, keep_source_segmentation)
    else:
        target = replacement_tokenizer(source, new)
    if mode == "extend":
        check_config_ids(model, len(source), target)
    alignment = align(source, target, keep_source_ids=mode == "extend", new=new)
    repeated = _extended_with(model, new)
    if not alignment.new_ids:
        raise _no_new_tokens(source, new, repeated)
    num_rows = row_count(embeddings, len(target), mode, pad_to_multiple_of)
    if repeated:
        _warn_repeated(target, alignment.new_ids, num_rows)
    context = _context(embeddings, alignment, source, target, seed, new)
    result = spec.function(context, resolve_inputs(config, new))
    check_result(result, context, method)
    add_placeholders(target, num_rows)
    weights = assemble_weights(embeddings, alignment, result, num_rows, mode, len(source))
    tokenizers = {"source": source, "new": new, "target": target}
    record = build_record(model, call, config, embeddings, tokenizers, alignment, result, report, num_rows)
    attach_sentencepiece(source, target, mode=mode, lines=[*check_texts, *(target_lines or [])])
    _write(model, embeddings, weights, record, _id_map(alignment) if mode == "replace" else None)
    return target


def _no_new_tokens(source: Tokenizer, new: Tokenizer, repeated: bool) -> NoNewTokensError:
    """The error for a new tokenizer that brings nothing, naming the tokens added to it (`add_tokens`) where those
    are what it brings: the merge leaves added tokens out."""
    added = sorted(set(new.get_added_vocab()) - set(source.get_vocab()))
    if added and not repeated:
        return NoNewTokensError(
            f"new_tokenizer's only tokens that the model's tokenizer lacks are added tokens "
            f"({', '.join(map(repr, added[:5]))}{', ...' if len(added) > 5 else ''}), which extend_vocabulary leaves "
            "out (it merges the pieces of a tokenizer's model): give the model those tokens with "
            "tokenizer.add_tokens([...]) and model.resize_token_embeddings(len(tokenizer)), or extend with a "
            "tokenizer trained on target-language text."
        )
    return NoNewTokensError(
        f"new_tokenizer adds no token that the model's tokenizer lacks ({len(new)} tokens, all present): "
        + (_REPEATED + " keep the model and tokenizer that call returned." if repeated else
           "pass a tokenizer trained on target-language text.")
    )


def _warn_source_changes(report: MergeReport, shipped: bool, kept: bool) -> None:
    if report.source_lines_changed:
        advice = ("more source_texts=[...] lines of the model's main language find more of the new tokens that are "
                  "not the target's" if kept else "pass target_texts=[...] with target-language lines to leave out "
                  "the new tokens that are not clearly the target language's (keep_source_segmentation=True "
                  "without them leaves out all that change a line)")
        logger.warning(
            "The extended tokenizer cuts %.1f%% of %d %s source-language lines differently from the model's own "
            "tokenizer (new tokens in the source's script), which costs the model some of that language: %s.",
            100 * report.source_lines_changed, report.source_lines_checked, "shipped English" if shipped else "given",
            advice,
        )


def _extended_with(model: Model, new: Tokenizer) -> bool:
    """Whether the model's record (or an earlier one it keeps) was made with `new` as the new tokenizer: a repeated
    call, as a notebook cell run twice."""
    digest = fingerprint(new)
    return any(entry.get("new_tokenizer_sha256") == digest for entry in earlier_records(model))


def _warn_repeated(target: Tokenizer, new_ids: Sequence[int], rows: int) -> None:
    shown = ", ".join(map(repr, target.convert_ids_to_tokens(list(new_ids[:3]))))
    logger.warning(f"{_REPEATED} this call adds the {len(new_ids)} of its tokens that extension left out ({shown}...) "
                   f"and pads to {rows} rows. If it repeats the earlier call, keep the model and tokenizer that call "
                   "returned instead.")


def _default_source(model: Model, source_tokenizer: TokenizerLike | None) -> TokenizerLike:
    if source_tokenizer is not None:
        return source_tokenizer
    path = str(getattr(model, "name_or_path", "") or "")
    if not path:
        raise TokenizerLoadError(
            f"source_tokenizer was not given and model.name_or_path is empty (a {type(model).__name__} built in "
            "memory): pass source_tokenizer=<the model's tokenizer>."
        )
    return path


def _context(embeddings: Embeddings, alignment: Alignment, source: Tokenizer, target: Tokenizer, seed: int,
             new: Tokenizer) -> InitContext:
    count = len(alignment.source_forms)
    source_input = _source_rows(embeddings.input.weight, count)
    output = embeddings.output
    source_output = None if output is None else _source_rows(output.weight, count)
    return InitContext(source_input, source_output, alignment, source, target, seed, embeddings.tied, new)


def _source_rows(weight: torch.Tensor, count: int) -> torch.Tensor:
    """A float32 copy of the rows of the source tokenizer's ids: a method that writes into it (methods may be
    user-registered) cannot change the model (`.float()` of float32 rows would be a view of them). One copy, made in
    place. Special tokens beyond the matrix (Gemma-3's image token) get the mean row, as `assemble_weights` gives
    them."""
    present = min(count, weight.shape[0])
    rows = torch.empty(count, weight.shape[1], dtype=torch.float32, device=weight.device)
    rows[:present] = weight.detach()[:present]
    if count > present:
        rows[present:] = rows[:present].mean(dim=0, keepdim=True)
    return rows


def _id_map(alignment: Alignment) -> dict[int, int]:
    """Old id -> new id for copied tokens (first new id when several match)."""
    mapping: dict[int, int] = {}
    for new_id, old_id in alignment.shared:
        mapping.setdefault(old_id, new_id)
    return mapping


@torch.inference_mode(False)
def _write(model: Model, embeddings: Embeddings, weights: dict[str, torch.Tensor], record: ExtensionRecord,
           id_map: dict[int, int] | None) -> None:
    """The only writes to the model: embedding rows (in replace mode the original ones kept beside them, for
    distillation's teacher), head size, vocabulary size, special ids, the record. Rows computed inside
    `torch.inference_mode()` are copied out of it first: inference tensors could never train."""
    weights = {side: rows.clone() if rows.is_inference() else rows for side, rows in weights.items()}
    num_rows = weights["input"].shape[0]
    if id_map is not None:  # replace mode: distillation's teacher reads the original rows from the model
        setattr(model, ORIGINALS, OriginalEmbeddings.of(model))
    embeddings.input.weight.data = weights["input"]
    embeddings.input.num_embeddings = num_rows
    if embeddings.output is not None:
        embeddings.output.weight.data = weights["output"]
    if embeddings.head is not None:
        if embeddings.bias is not None:
            embeddings.bias.data = weights["bias"]
        if hasattr(embeddings.head, "out_features"):
            embeddings.head.out_features = num_rows
    model.config.get_text_config().vocab_size = num_rows
    if hasattr(model, "vocab_size"):
        model.vocab_size = num_rows
    if id_map is not None:
        _remap_special_ids(model, embeddings, id_map)
    set_record(model, record)


def _remap_special_ids(model: Model, embeddings: Embeddings, id_map: dict[int, int]) -> None:
    configs = [model.config, model.config.get_text_config(), getattr(model, "generation_config", None)]
    for config in filter(None, {id(c): c for c in configs}.values()):
        for name, value in remap_token_ids(vars(config), id_map.get).items():
            setattr(config, name, value)
    padding = getattr(embeddings.input, "padding_idx", None)
    if padding is not None:
        embeddings.input.padding_idx = id_map.get(padding)
