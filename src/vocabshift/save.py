"""Save an extended model and its tokenizer atomically (`atomic.atomic_folder`), after checking that they still belong
together, and keep a SentencePiece tokenizer's tokenizer.model in step with its tokenizer.json."""

from __future__ import annotations

import os
from pathlib import Path

from ._typing import Model, Tokenizer, is_peft
from .arguments import check_apart, check_shard_size
from .atomic import atomic_folder
from .errors import InvalidArgumentTypeError, TokenizerMismatchError, UnsupportedModelError
from .record import ExtensionRecord, find_record
from .vocab.load import fingerprint
from .vocab.spm_file import save_sentencepiece

__all__ = ["save_pretrained_atomic", "save_tokenizer"]


def save_pretrained_atomic(model: Model, tokenizer: Tokenizer, folder: str | os.PathLike, *,
                           max_shard_size: int | str | None = None) -> Path:
    """`model.save_pretrained` + `tokenizer.save_pretrained` into `folder`, atomically.

    For a tokenizer with a SentencePiece model (Llama-2, Mistral, Gemma) the folder also gets a `tokenizer.model` in
    step with its tokenizer.json (the one `extend_vocabulary` built, or the one it was loaded with), or none: never
    one that holds another vocabulary (a warning says why it is left out).

    Args:
        model (`PreTrainedModel`): the model to save (safetensors, as transformers 5 always writes).
        tokenizer: its tokenizer, or None to save the model alone.
        folder (`str | os.PathLike`): the output folder; an existing model folder there is replaced as a whole.
        max_shard_size (`int | str`, *optional*): passed to `save_pretrained` (e.g. `"2GB"`).

    Returns:
        `Path`: the folder.

    Raises (before anything is written):
        `ModelFolderError`: see `atomic_folder`.
        `InvalidArgumentError`: a `max_shard_size` that is not a size, a model or tokenizer without
            `save_pretrained`, a folder that is not a path (`InvalidArgumentTypeError` for wrong types) or under a
            file.
        `UnsupportedModelError`: a peft model around an extended one (it would save the adapter alone).
        `TokenizerMismatchError`: for a model that carries an ExtensionRecord, the tokenizer it was extended from or
            the new one given to `extend_vocabulary`, in place of the one that call returned; or a model shrunk
            after that call (`resize_token_embeddings`), which lost rows of the extended vocabulary.
        `InvalidArgumentError`: `folder` is, holds or lies in the original model's folder (the record's
            `source_model`).

    Example:
        ```python
        >>> tokenizer = model.extend_vocabulary("ru-tokenizer/")
        >>> vocabshift.save_pretrained_atomic(model, tokenizer, "out/smollm2-ru")
        ```
    """
    for name, value in (("model", model), ("tokenizer", tokenizer)):
        if (value is not None or name == "model") and not callable(getattr(value, "save_pretrained", None)):
            inner = getattr(value, "module", None)  # DataParallel, DistributedDataParallel
            wrapped = callable(getattr(inner, "save_pretrained", None))
            fix = f"the {type(inner).__name__} it wraps (model.module)" if wrapped else \
                "a transformers model and its tokenizer (or tokenizer=None)"
            raise InvalidArgumentTypeError(f"{name} is a {type(value).__name__}, which has no save_pretrained: pass "
                                           f"{fix}.")
    options = {} if max_shard_size is None else {"max_shard_size": check_shard_size(max_shard_size,
                                                                                     name="max_shard_size")}
    record = find_record(model)
    if record is not None:  # an extended model: what its record makes checkable
        _check_not_an_adapter(model)
        _check_rows(model, record)
        _check_not_swapped(model, record, tokenizer)
        # the original model's folder (what distillation, propagation and comparisons read) is never written
        check_apart(folder, name="folder", source_model=record.source_model)
    with atomic_folder(folder) as temporary:
        model.save_pretrained(temporary, **options)
        if tokenizer is not None:
            save_tokenizer(tokenizer, temporary, shown_as=folder)
    return Path(folder)


def _check_not_an_adapter(model: Model) -> None:
    """Refuse a peft model around an extended one: its save_pretrained writes the adapter alone, without the
    extended embeddings and the record (the tokenizer saved beside would not fit the base model)."""
    if is_peft(model):
        raise UnsupportedModelError(
            f"model is a peft {type(model).__name__} around an extended model, and its save_pretrained writes the "
            "adapter alone: the new embedding rows and the vocabshift record would be lost. Merge the adapter first "
            "(model = model.merge_and_unload()), then save; save the adapter apart with model.save_pretrained(...) "
            "before merging if you need it."
        )


def _check_rows(model: Model, record: ExtensionRecord) -> None:
    """Refuse a model shrunk after `extend_vocabulary` (`resize_token_embeddings`): it lost rows of the extended
    vocabulary, which its tokenizer reaches past. (Rows added after it, for tokens added to the tokenizer, are
    saved as they are.)"""
    rows = model.get_input_embeddings().weight.shape[0]
    if rows < record.new_vocab_size:
        raise TokenizerMismatchError(
            f"model has {rows} embedding rows but extend_vocabulary gave it {record.new_num_rows} (its record says "
            f"so): a resize after it deleted the rows of {record.new_vocab_size - rows} tokens of the extended "
            "vocabulary, and what they learned. Extend the original model again"
            f"{f' ({record.source_model})' if record.source_model else ''}; to pad the rows, pass pad_to_multiple_of "
            "to extend_vocabulary."
        )


def _check_not_swapped(model: Model, record: ExtensionRecord, tokenizer: Tokenizer | None) -> None:
    """Refuse the two tokenizers most easily saved by mistake next to an extended model: the one it was extended from
    and the new one given to `extend_vocabulary`; and a tokenizer changed after `extend_vocabulary` whose ids reach
    past the rows (other changes are saved as they are)."""
    if tokenizer is None or not hasattr(tokenizer, "backend_tokenizer"):
        return
    found = fingerprint(tokenizer)
    if found == record.tokenizer_sha256:  # the one extend_vocabulary returned, which covers every id
        return
    swapped = {record.source_tokenizer_sha256: "the tokenizer the model was extended from",
               record.new_tokenizer_sha256: "the new tokenizer given to extend_vocabulary"}
    if found in swapped:
        raise TokenizerMismatchError(
            f"tokenizer is {swapped[found]}, not the one extend_vocabulary returned (the model's record names its "
            f"fingerprint, {record.tokenizer_sha256[:12]}...): save the tokenizer extend_vocabulary returned, whose "
            "ids the new rows belong to."
        )
    rows = model.get_input_embeddings().weight.shape[0]
    beyond = sorted((i, t) for t, i in tokenizer.get_vocab().items() if i >= rows)
    if beyond:
        raise TokenizerMismatchError(
            f"tokenizer has {len(beyond)} token(s) beyond the model's {rows} embedding rows ({beyond[0][1]!r} is id "
            f"{beyond[0][0]}), added after extend_vocabulary: the model would fail on them. Give them rows first "
            "(model.resize_token_embeddings(len(tokenizer)), then train them), or save the tokenizer it returned."
        )


def save_tokenizer(tokenizer: Tokenizer, folder: str | os.PathLike, *, like: Tokenizer | None = None,
                   shown_as: str | os.PathLike | None = None) -> None:
    """`tokenizer.save_pretrained(folder)`, then its tokenizer.model in step or none (`vocab.spm_file`); `like`: a
    tokenizer whose SentencePiece file may serve when it holds this tokenizer's vocabulary; `shown_as`: the output
    folder that messages name where `folder` is its temporary sibling."""
    tokenizer.save_pretrained(folder)
    save_sentencepiece(tokenizer, folder, like=like, shown_as=shown_as)
