"""The `ExtensionRecord` that `extend_vocabulary` stores in the model's config: the call's arguments, the tokenizers'
fingerprints, the new ids and their decompositions, the method's configuration and diagnostics."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._typing import Model, Tokenizer
from ._version import __version__
from .embeddings import Embeddings
from .methods import InitResult
from .packing import id_ranges, pack_ids
from .record import OUTPUT_PLACEHOLDER, ExtensionRecord, earlier_records
from .vocab.align import Alignment
from .vocab.load import fingerprint
from .vocab.merge import MergeReport

__all__ = ["Call", "build_record", "extend_command", "new_tokenizer_label", "option_summary"]


@dataclass(frozen=True)
class Call:
    """The arguments of one `extend_vocabulary` call, as the record keeps them."""

    method: str
    mode: str
    seed: int
    pad_to_multiple_of: int | None
    keep_source_segmentation: bool
    source_texts: bool  # lines were given (else the shipped English lines)
    target_texts: bool  # target-language lines were given
    new_tokenizer: str  # the path or repo id given, else a placeholder
    method_options: dict[str, Any]


def build_record(model: Model, call: Call, config: Any, embeddings: Embeddings, tokenizers: dict[str, Tokenizer],
                 alignment: Alignment, result: InitResult, report: MergeReport | None,
                 num_rows: int) -> ExtensionRecord:
    """The record of one extension: what was called, on which tokenizers, and what the method gave."""
    source, target = tokenizers["source"], tokenizers["target"]
    source_model = str(getattr(model, "name_or_path", "") or "")
    return ExtensionRecord(
        method=call.method,
        mode=call.mode,
        seed=call.seed,
        source_model=source_model,
        source_revision=getattr(model.config, "_commit_hash", None),
        source_is_folder=bool(source_model) and os.path.isdir(source_model),  # from_pretrained's own test
        old_vocab_size=len(source),
        old_num_rows=embeddings.num_rows,
        new_vocab_size=len(target),
        new_num_rows=num_rows,
        tied=embeddings.tied,
        new_token_ranges=id_ranges(alignment.new_ids),
        special_tokens={t: target.convert_tokens_to_ids(t) for t in target.all_special_tokens},
        source_tokenizer_sha256=fingerprint(source),
        new_tokenizer_sha256=fingerprint(tokenizers["new"]),
        tokenizer_sha256=fingerprint(target),
        decompositions={
            "lengths": pack_ids(len(d) for d in alignment.decompositions),
            "ids": pack_ids(i for d in alignment.decompositions for i in d),
        },
        shared="" if call.mode == "extend" else pack_ids(i for pair in alignment.shared for i in pair),
        method_config=option_summary({item.name: getattr(config, item.name) for item in dataclasses.fields(config)}),
        diagnostics=result.diagnostics,
        tokenizer_report=report.to_dict() if report else {},
        pad_to_multiple_of=call.pad_to_multiple_of,
        keep_source_segmentation=call.keep_source_segmentation,
        method_options=call.method_options,
        command=extend_command(source_model=source_model, new_tokenizer=call.new_tokenizer, method=call.method,
                               mode=call.mode, seed=call.seed, pad_to_multiple_of=call.pad_to_multiple_of,
                               method_options=call.method_options, source_texts=call.source_texts,
                               target_texts=call.target_texts,
                               keep_source_segmentation=call.keep_source_segmentation),
        vocabshift_version=__version__,
        earlier=earlier_records(model),
    )


def new_tokenizer_label(tokenizer: Any) -> str:
    """How the extend command names the new tokenizer: the path or repo id given, else a placeholder."""
    return os.fspath(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else "path/to/new-tokenizer"


def option_summary(options: dict[str, Any]) -> dict[str, Any]:
    """Options as JSON: objects (a helper model, word vectors, a list of lines) by a short label."""
    summary: dict[str, Any] = {}
    for name, value in options.items():
        if value is None or isinstance(value, (str, int, float, bool)):
            summary[name] = value
        elif isinstance(value, os.PathLike):
            summary[name] = os.fspath(value)
        else:
            label = getattr(value, "name_or_path", None) or getattr(value, "source", None)
            size = f"{len(value)} items" if isinstance(value, (list, tuple)) else None
            summary[name] = f"<{type(value).__name__}{': ' + str(label or size) if label or size else ''}>"
    return summary


def extend_command(*, source_model: str, new_tokenizer: str, method: str, mode: str, seed: int,
                   pad_to_multiple_of: int | None, method_options: Mapping[str, Any],
                   keep_source_segmentation: bool, source_texts: bool, target_texts: bool = False) -> list[str]:
    """The `vocabshift extend` command equivalent to an `extend_vocabulary` call (output: `OUTPUT_PLACEHOLDER`).

    `source_texts` / `target_texts` say whether lines were given (the command then names a file to write them into).
    """
    words = ["vocabshift", "extend", source_model or "path/to/base-model", new_tokenizer, OUTPUT_PLACEHOLDER,
             "--method", method, "--mode", mode, "--seed", str(seed)]
    words += ["--pad-to-multiple-of", str(pad_to_multiple_of or 1)]  # the CLI's default pads, None did not
    for key, value in sorted(method_options.items()):
        words += ["--option", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    if source_texts:
        words += ["--source-texts", "path/to/source-texts.txt"]
    if target_texts:
        words += ["--target-texts", "path/to/target-texts.txt"]
    if keep_source_segmentation != target_texts:  # --target-texts alone turns it on
        words.append("--keep-source-segmentation" if keep_source_segmentation else "--no-keep-source-segmentation")
    return words
