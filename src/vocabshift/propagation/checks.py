"""Refuse inputs that would give a wrong model: base and instruct that are not siblings, an adapted model that was
not made from base, an adapted folder inconsistent with its own record."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import LineageError, RecordError, SiblingMismatchError
from ..record import ExtensionRecord
from ..vocab.load import fingerprint
from .shards import Matrix
from .sources import Layout, Source

__all__ = ["Model", "check_lineage", "check_siblings"]

logger = logging.getLogger(__name__)
_SAMPLED_ROWS = 512


@dataclass(frozen=True)
class Model:
    """What propagation knows about one of the three models."""

    source: Source
    config: dict[str, Any]
    layout: Layout
    tokenizer: Any
    input: Matrix
    output: Matrix | None

    def facts(self) -> dict[str, Any]:
        return {"architectures": self.config.get("architectures"), "model_type": self.config.get("model_type"),
                "hidden size": self.input.hidden, "tied output head": self.layout.tied}


def check_siblings(base: Model, instruct: Model) -> None:
    """Same architecture, hidden size and tying; every base id means the same token in instruct, which may only
    add tokens after them (e.g. chat markers added during instruction tuning).

    Raises:
        `SiblingMismatchError`
    """
    fix = "pass the instruct model that was fine-tuned from base (same architecture, hidden size and vocabulary)."
    for what, value in base.facts().items():
        if instruct.facts()[what] != value:
            raise SiblingMismatchError(f"base and instruct differ in {what}: {value!r} vs "
                                       f"{instruct.facts()[what]!r}; {fix}")
    base_vocab = base.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    instruct_vocab = instruct.tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    differing = sorted((i, token) for token, i in base_vocab.items() if instruct_vocab.get(token) != i)
    added = {token.content for token in instruct.tokenizer.backend_tokenizer.get_added_tokens_decoder().values()}
    foreign = sorted(token for token in instruct_vocab.keys() - base_vocab.keys() if token not in added)
    if differing or foreign:
        example = f"id {differing[0][0]} ({differing[0][1]!r})" if differing else f"token {foreign[0]!r}"
        raise SiblingMismatchError(f"base and instruct differ in vocabulary ({len(differing)} base tokens with "
                                   f"another id in instruct, {len(foreign)} instruct tokens missing from base, e.g. "
                                   f"{example}); {fix}")
    if instruct.input.rows < len(instruct.tokenizer):
        raise SiblingMismatchError(f"instruct has {instruct.input.rows} embedding rows for {len(instruct.tokenizer)} "
                                   "tokens: its folder is inconsistent; save it again.")


def check_lineage(record: ExtensionRecord, adapted: Model, base: Model) -> None:
    """`adapted` was extended from `base` (per its record) and its folder matches its record.

    Raises:
        `LineageError`: another source model (tokenizer, rows, architecture, or frozen rows that differ).
        `RecordError`: the adapted folder's tokenizer or rows are not the ones its record describes.
    """
    fix = f"pass as base the model adapted was extended from (its record names {record.source_model or 'none'!r})."
    for what, value in base.facts().items():
        if adapted.facts()[what] != value:
            raise LineageError(f"adapted and base differ in {what}: {adapted.facts()[what]!r} vs {value!r}; {fix}")
    if fingerprint(base.tokenizer) != record.source_tokenizer_sha256 or base.input.rows != record.old_num_rows:
        raise LineageError(f"adapted was extended from a model with another tokenizer or row count (fingerprint "
                           f"{record.source_tokenizer_sha256[:12]}..., {record.old_num_rows} rows) than base "
                           f"({fingerprint(base.tokenizer)[:12]}..., {base.input.rows} rows); {fix}")
    if fingerprint(adapted.tokenizer) != record.tokenizer_sha256 or adapted.input.rows != record.new_num_rows:
        raise RecordError(f"adapted={adapted.source.name!r} holds another tokenizer or row count than its record "
                          "describes: save the model and the tokenizer extend_vocabulary returned together.")
    if _old_rows_frozen(record):
        _check_frozen_rows(record, adapted.input, base.input, fix)
    if record.source_model and record.source_model != base.source.name:
        logger.info("adapted's record names %r as its source, base is %r (same tokenizer and rows).",
                    record.source_model, base.source.name)


def _old_rows_frozen(record: ExtensionRecord) -> bool:
    """The record says CPT trained only the new rows, so the old rows must still be the base model's."""
    return bool(record.cpt) and all(entry.get("rows") == "new" for entry in record.cpt)


def _check_frozen_rows(record: ExtensionRecord, adapted: Matrix, base: Matrix, fix: str) -> None:
    pairs = torch.tensor(record.shared_pairs(), dtype=torch.long).reshape(-1, 2)
    sample = pairs[torch.linspace(0, len(pairs) - 1, min(_SAMPLED_ROWS, len(pairs))).long()]
    if len(sample) and not torch.equal(adapted.gather(sample[:, 0]), base.gather(sample[:, 1]).to(adapted.dtype)):
        raise LineageError("adapted's rows of old tokens differ from base's, although its record says CPT trained "
                           "only the new rows: adapted was not made from this base (were base and instruct "
                           f"swapped?); {fix}")
