"""The tokenizer that names a vocabshift model's pre-tokenizer to llama.cpp: the model's original one.

llama.cpp's converter names a byte-level BPE pre-tokenizer by hashing the ids a tokenizer gives a fixed text. New
merges change those ids, so an adapted tokenizer is not recognized, although extend mode keeps the pre-tokenizer
as it was. The original tokenizer is recognized. In extend mode it is rebuilt from the adapted one, which keeps the
old ids and merges first: the first `old_vocab_size` ids, and the merges before the first that builds a new token.
Otherwise it is the `source_tokenizer` given. For a model extended more than once, it is the tokenizer the first
extension started from (the later ones are adapted tokenizers). Either way it must have the fingerprint the
ExtensionRecord keeps, and the same normalizer, pre-tokenizer and model options as the adapted tokenizer, or the
name llama.cpp gives it would not describe the adapted one.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from ..errors import InvalidArgumentError, TokenizerMismatchError, UnknownPreTokenizerError
from ..record import ExtensionRecord
from ..vocab._splice import merge_pairs
from ..vocab.forms import backend_state
from ..vocab.load import fingerprint, load_tokenizer

__all__ = ["original_tokenizer", "rebuild_original"]

# what AutoTokenizer reads besides tokenizer.json (the class, special tokens, whether BOS is added)
_SETTINGS = ("config.json", "tokenizer_config.json", "special_tokens_map.json")
_PIPELINE = ("normalizer", "pre_tokenizer")


def original_tokenizer(folder: Path, record: ExtensionRecord, destination: Path, *,
                       source_tokenizer: str | os.PathLike | None = None) -> Path:
    """Write the original tokenizer of the vocabshift model in `folder` into the empty folder `destination`.

    Raises:
        `TokenizerMismatchError`: the tokenizer rebuilt or given has another fingerprint than the record's.
        `InvalidArgumentError`: replace mode without `source_tokenizer`.
        `UnknownPreTokenizerError`: the adapted tokenizer does not cut text as the original does.
    """
    adapted = backend_state(load_tokenizer(folder, argument="model_dir"))
    first = _first_source(record)
    if source_tokenizer is not None:
        original = load_tokenizer(source_tokenizer, argument="source_tokenizer")
        _check_fingerprint(original, first, f"source_tokenizer={os.fspath(source_tokenizer)!r}",
                           "pass the tokenizer of the model this folder was made from")
        _check_pipeline(backend_state(original), adapted, folder)
        original.save_pretrained(destination)
    elif first.rebuildable:  # the rebuilt tokenizer has the adapted one's pipeline by construction
        state = rebuild_original(adapted, first.size)
        original = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)))
        _check_fingerprint(original, first, f"the original tokenizer rebuilt from {str(folder)!r}",
                           "pass source_tokenizer= the tokenizer of the model this folder was extended from")
        _write(folder, state, destination)
    else:
        raise InvalidArgumentError(
            f"model_dir={str(folder)!r} was made in replace mode{' (or from a model made so)' * bool(record.earlier)}"
            ", so its original tokenizer cannot be rebuilt from it: pass source_tokenizer= the tokenizer of "
            f"{record.original_source_model or 'the model it was made from'}.")
    return destination


@dataclass(frozen=True)
class _Source:
    """The tokenizer the first extension started from: its fingerprint and size, and whether it can be rebuilt from
    the adapted tokenizer (every extension since in extend mode, which keeps the old ids and merges first)."""

    sha256: str
    size: int
    rebuildable: bool


def _first_source(record: ExtensionRecord) -> _Source:
    """For a model extended more than once, the source of the first extension (as its record in `earlier` keeps
    it): the tokenizer llama.cpp knows; the later sources are adapted tokenizers."""
    first = record.earlier[0] if record.earlier else {}
    sha256, size = first.get("source_tokenizer_sha256"), first.get("old_vocab_size")
    if not (isinstance(sha256, str) and isinstance(size, int)):
        return _Source(record.source_tokenizer_sha256, record.old_vocab_size, record.mode == "extend")
    modes = [entry.get("mode") for entry in record.earlier] + [record.mode]
    return _Source(sha256, size, all(mode == "extend" for mode in modes))


def rebuild_original(state: dict[str, Any], old_vocab_size: int) -> dict[str, Any]:
    """The tokenizer.json of an extend-mode tokenizer without what extend added: ids from `old_vocab_size` on,
    and (BPE) the merges from the first one that builds a token with such an id."""
    model = dict(state["model"])
    state = {**state, "model": model}  # a new state: `state`'s own entries are not changed
    if isinstance(model["vocab"], list):  # Unigram: the id is the position
        model["vocab"] = model["vocab"][:old_vocab_size]
    else:
        model["vocab"] = {token: i for token, i in model["vocab"].items() if i < old_vocab_size}
    if model["type"] == "BPE":  # (a tokenizer converted from SentencePiece has new merges among the old: `_splits`)
        kept = model["merges"][:_old_merges(model)]
        model["merges"] = [merge for merge, (left, right) in zip(kept, merge_pairs({"merges": kept}))
                           if left in model["vocab"] and right in model["vocab"]]
    state["added_tokens"] = [entry for entry in state.get("added_tokens", []) if entry["id"] < old_vocab_size]
    return state


def _old_merges(model: dict[str, Any]) -> int:
    """How many merges come before the first whose result is not in the (old) vocabulary."""
    prefix, vocab = model.get("continuing_subword_prefix") or "", model["vocab"]
    for count, (left, right) in enumerate(merge_pairs(model)):
        if left + (right[len(prefix):] if prefix and right.startswith(prefix) else right) not in vocab:
            return count
    return len(model["merges"])


def _check_fingerprint(tokenizer: Any, source: _Source, what: str, fix: str) -> None:
    found = fingerprint(tokenizer)
    if found != source.sha256:
        raise TokenizerMismatchError(
            f"{what} has fingerprint {found[:12]}..., but the folder's ExtensionRecord says its source tokenizer had "
            f"{source.sha256[:12]}... ({source.size:,} tokens): {fix}.")


def _check_pipeline(original: dict[str, Any], adapted: dict[str, Any], folder: Path) -> None:
    """The adapted tokenizer cuts text before its model as the original does, with the same model options."""
    def options(state: dict[str, Any]) -> dict[str, Any]:  # "" and None both mean no prefix (tokenizers writes either)
        return {key: value or None for key, value in state["model"].items() if key not in ("vocab", "merges")}

    differ = [key for key in _PIPELINE if original.get(key) != adapted.get(key)]
    differ += ["model options"] if options(original) != options(adapted) else []
    if differ:
        raise UnknownPreTokenizerError(
            f"The tokenizer of model_dir={str(folder)!r} differs from its original tokenizer in {', '.join(differ)}: "
            "llama.cpp names a pre-tokenizer after the known tokenizer it belongs to, so none describes this one. "
            "Make the new tokenizer with vocabshift.train_tokenizer(texts, like=<the original tokenizer>), which "
            "keeps them.")


def _write(folder: Path, state: dict[str, Any], destination: Path) -> None:
    """`destination` as a tokenizer folder: `state` as tokenizer.json, with the settings files of `folder`."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in _SETTINGS:
        if (folder / name).is_file():
            shutil.copyfile(folder / name, destination / name)
    (destination / "tokenizer.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
