"""Refuse inputs that would give a wrong model: base and instruct that are not siblings, an adapted model that was
not made from base, an adapted folder inconsistent with its own record."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ..arguments import is_int
from ..embeddings import grown_from, ordinary_beyond
from ..errors import LineageError, ModelFolderError, NonFiniteWeightsError, RecordError, SiblingMismatchError
from ..record import ExtensionRecord
from ..vocab.load import fingerprint
from .shards import Matrix
from .sources import Layout, Source

__all__ = ["Model", "check_config_rows", "check_facts", "check_lineage", "check_siblings", "lineage_fix",
           "refuse_non_finite"]

logger = logging.getLogger(__name__)
_SIBLING_FIX = "pass the instruct model that was fine-tuned from base (same architecture, hidden size and vocabulary)."


@dataclass(frozen=True)
class Model:
    """What propagation knows about one of the three models."""

    source: Source
    config: dict[str, Any]
    layout: Layout
    tokenizer: Any
    input: Matrix
    output: Matrix | None
    bias: torch.Tensor | None = None  # a head bias, read whole (one value per row)

    def facts(self) -> dict[str, Any]:
        return {"architectures": self.config.get("architectures"), "model_type": self.config.get("model_type"),
                "hidden size": self.input.hidden, "tied output head": self.layout.tied}


def check_config_rows(model: Model) -> None:
    """The embedding matrices have the rows config.json names (from_pretrained refuses the folder otherwise).

    Raises:
        `ModelFolderError`: naming the model, the config's vocab_size and the stored rows.
    """
    text = model.config.get("text_config")
    config = text if isinstance(text, dict) and "vocab_size" in text else model.config
    stored = {matrix.rows for matrix in (model.input, model.output) if matrix is not None}
    if is_int(config.get("vocab_size")) and stored != {config["vocab_size"]}:
        rows = " and ".join(map(str, sorted(stored)))
        raise ModelFolderError(f"{model.source.role}={model.source.name!r} stores {rows} embedding rows but its "
                               f"config.json says vocab_size={config['vocab_size']}: its files come from different "
                               "models (from_pretrained refuses it too); save or download the model again.")


def check_facts(record: ExtensionRecord, adapted: Model, base: Model, instruct: Model) -> None:
    """What can be checked before any tokenizer is loaded: base and instruct, and adapted and base, agree in
    architecture, hidden size and tying; base has the rows the record names, adapted at least those.

    Raises:
        `SiblingMismatchError`, `LineageError`, `RecordError`: as `check_siblings` and `check_lineage`.
    """
    _same_facts(base, instruct, SiblingMismatchError, "base and instruct", _SIBLING_FIX)
    _same_facts(adapted, base, LineageError, "adapted and base", lineage_fix(record))
    if base.input.rows != record.old_num_rows:
        raise LineageError(f"adapted was extended from a model with another tokenizer or row count: its record "
                           f"says {record.old_num_rows} rows, base has {base.input.rows}; {lineage_fix(record)}")
    if adapted.input.rows < record.new_num_rows:  # more rows may be for tokens added later (`check_lineage`)
        raise _rows_error(adapted, record)


def _rows_error(adapted: Model, record: ExtensionRecord) -> RecordError:
    return RecordError(f"adapted={adapted.source.name!r} has {adapted.input.rows} embedding rows but its record "
                       f"describes {record.new_num_rows}: save the model and the tokenizer extend_vocabulary returned "
                       "together.")


def _same_facts(one: Model, other: Model, error: type[Exception], names: str, fix: str) -> None:
    for what, value in one.facts().items():
        if other.facts()[what] != value:
            raise error(f"{names} differ in {what}: {value!r} vs {other.facts()[what]!r}; {fix}")


def lineage_fix(record: ExtensionRecord) -> str:
    """How to fix a lineage error: the source model the record names; for a model extended more than once, one
    propagation per extension."""
    named = f"its record names {record.source_model!r}" if record.source_model else "its record names no source model"
    if not record.earlier:
        return f"pass as base the model adapted was extended from ({named})."
    return (f"adapted was extended {len(record.earlier) + 1} times, first from {record.original_source_model!r}, and "
            f"its record describes the last extension ({named}): propagate one extension at a time, each with the "
            "previous output as instruct (the first: the model of the first extension, its base and instruct).")


def check_siblings(base: Model, instruct: Model) -> None:
    """Every base id means the same token in instruct, which may only add tokens after them (e.g. chat markers
    added during instruction tuning), and instruct has a row for each of its tokens but special ones (Gemma-3's image
    token has none); architecture, hidden size and tying are `check_facts`'s.

    Raises:
        `SiblingMismatchError`
    """
    base_vocab = base.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    instruct_vocab = instruct.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    differing = sorted((i, token) for token, i in base_vocab.items() if instruct_vocab.get(token) != i)
    added = {token.content for token in instruct.tokenizer.backend_tokenizer.get_added_tokens_decoder().values()}
    foreign = sorted(token for token in instruct_vocab.keys() - base_vocab.keys() if token not in added)
    if differing or foreign:
        example = f"id {differing[0][0]} ({differing[0][1]!r})" if differing else f"token {foreign[0]!r}"
        raise SiblingMismatchError(f"base and instruct differ in vocabulary ({len(differing)} base tokens with "
                                   f"another id in instruct, {len(foreign)} instruct tokens missing from base, e.g. "
                                   f"{example}); {_SIBLING_FIX}")
    beyond = ordinary_beyond(instruct.tokenizer, instruct.input.rows)  # special ones may be (Gemma-3's image token)
    if beyond:
        raise SiblingMismatchError(f"instruct has {instruct.input.rows} embedding rows for {len(instruct.tokenizer)} "
                                   f"tokens, and ids beyond them are ordinary tokens (e.g. {beyond[0]!r}): its folder "
                                   "is inconsistent; save it again.")


def check_lineage(record: ExtensionRecord, adapted: Model, base: Model) -> None:
    """`adapted` was extended from a model with base's tokenizer, and holds the tokenizer its record describes
    (the rows themselves are `lineage.check_rows`'s), or that tokenizer with tokens added after it and rows for them
    (`embeddings.grown_from`: their rows are propagated as the new tokens' are).

    Raises:
        `LineageError`: base has another tokenizer than the one adapted was extended from.
        `RecordError`: the adapted folder's tokenizer is not the one its record describes, or its rows do not match.
    """
    if fingerprint(base.tokenizer) != record.source_tokenizer_sha256:
        raise LineageError(f"adapted was extended from a model with another tokenizer (fingerprint "
                           f"{record.source_tokenizer_sha256[:12]}...) than base ({fingerprint(base.tokenizer)[:12]}"
                           f"...); {lineage_fix(record)}")
    tokens = len(adapted.tokenizer)
    if grown_from(adapted.tokenizer, record):
        if adapted.input.rows < tokens:
            raise RecordError(f"adapted={adapted.source.name!r} has {tokens} tokens, {tokens - record.new_vocab_size} "
                              f"of them added after extend_vocabulary, but {adapted.input.rows} embedding rows: "
                              "give the added tokens rows (model.resize_token_embeddings(len(tokenizer))) and save "
                              "the model and that tokenizer again.")
    elif fingerprint(adapted.tokenizer) != record.tokenizer_sha256:
        raise RecordError(f"adapted={adapted.source.name!r} holds another tokenizer than its record describes: "
                          "save the model and the tokenizer extend_vocabulary returned together.")
    elif adapted.input.rows != record.new_num_rows:
        raise _rows_error(adapted, record)
    if record.source_model and record.source_model != base.source.name:
        logger.info("adapted's record names %r as its source, base is %r (same tokenizer and rows).",
                    record.source_model, base.source.name)


def refuse_non_finite(matrices: dict[str, Matrix | None], *, found: str) -> None:
    """Name the matrix whose NaN or infinite rows make `found` non-finite (each is read whole, block by block: called
    only once a value turned out non-finite, so that finite models pay nothing).

    Raises:
        `NonFiniteWeightsError`: always.
    """
    for role, matrix in matrices.items():
        bad = [] if matrix is None else matrix.non_finite_rows()
        if matrix is not None and bad:
            raise NonFiniteWeightsError(
                f"{role}'s {matrix.key} rows {bad[:5]}{' ...' if len(bad) > 5 else ''} ({len(bad)} in all, in "
                f"{matrix.path}) hold NaN or infinite values, which would make {found} non-finite. Save or "
                "download that model again (a diverged training step or a bad conversion may have written them), or "
                "repair those rows."
            )
    raise NonFiniteWeightsError(f"{found} came out non-finite although the rows it comes from are finite (the fitted "
                                "map overflows): try method='swap'.")
