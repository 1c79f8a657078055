"""The ExtensionRecord: what vocabshift did to a model, stored in `config.json` under `"vocabshift"`.

The model card, `propagate` and `evaluate` read it; nothing re-derives it. Long id lists (decompositions, shared
pairs) are stored packed (zlib + base64 of little-endian int32) so that `print(model.config)` stays readable.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import RecordError

__all__ = ["CONFIG_KEY", "ExtensionRecord", "get_record", "id_ranges", "pack_ids", "unpack_ids"]

CONFIG_KEY = "vocabshift"


def pack_ids(ids: Iterable[int]) -> str:
    """Pack a list of ints into a short ASCII string."""
    return base64.b64encode(zlib.compress(np.asarray(list(ids), dtype="<i4").tobytes(), 9)).decode("ascii")


def unpack_ids(packed: str) -> list[int]:
    """Inverse of `pack_ids`.

    Raises:
        `RecordError`: `packed` was not written by `pack_ids` (a hand-edited or truncated record).
    """
    try:
        return np.frombuffer(zlib.decompress(base64.b64decode(packed, validate=True)), dtype="<i4").tolist()
    except (binascii.Error, zlib.error, ValueError, TypeError) as error:
        raise RecordError(f"A packed id list of the vocabshift record is corrupted ({type(error).__name__}: "
                          f"{error}): the record is damaged; re-run extend_vocabulary.") from None


def id_ranges(ids: Sequence[int]) -> list[list[int]]:
    """Sorted ids as `[start, stop)` ranges: `[3, 4, 5, 9]` -> `[[3, 6], [9, 10]]`."""
    ranges: list[list[int]] = []
    for i in ids:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return ranges


@dataclass
class ExtensionRecord:
    """What was done to a model's vocabulary.

    Attributes:
        method / method_config / diagnostics: the initialization method, its options and its summary figures.
        mode (`str`): `"extend"` or `"replace"`.
        seed (`int`): the seed of every random draw.
        source_model / source_revision: where the model came from (`name_or_path`, commit hash when known).
        old_vocab_size / new_vocab_size (`int`): tokens in the source tokenizer and in the returned tokenizer.
        old_num_rows / new_num_rows (`int`): rows of the embedding matrix before and after (padding included).
        tied (`bool`): whether the output head is tied to the input embeddings.
        new_token_ranges (`list[list[int]]`): `[start, stop)` ranges of the ids initialized by the method.
        special_tokens (`dict[str, int]`): special token -> id in the new vocabulary.
        tokenizer_report (`dict`): the tokenizer merge report (extend mode).
        source_tokenizer_sha256 / target_tokenizer_sha256 / tokenizer_sha256: fingerprints of the model's old
            tokenizer, of the tokenizer given as `new_tokenizer`, and of the tokenizer that now matches the model.
        decompositions (`dict[str, str]`): packed `lengths` and `ids` of each new token's pieces (old ids).
        shared (`str`): packed `(new_id, old_id)` pairs of copied rows; empty in extend mode (identity on old ids).
        cpt / propagation (`list[dict]`): later steps (embedding-only training, LEP) append here.
        evaluations (`list[dict]`): held-out evaluations (`vocabshift.evaluate(...).add_to_record(model)`).
    """

    method: str
    mode: str
    seed: int
    source_model: str
    source_revision: str | None
    old_vocab_size: int
    old_num_rows: int
    new_vocab_size: int
    new_num_rows: int
    tied: bool
    new_token_ranges: list[list[int]]
    special_tokens: dict[str, int]
    source_tokenizer_sha256: str
    target_tokenizer_sha256: str
    tokenizer_sha256: str
    decompositions: dict[str, str]
    shared: str = ""
    method_config: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    tokenizer_report: dict[str, Any] = field(default_factory=dict)
    cpt: list[dict[str, Any]] = field(default_factory=list)
    propagation: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    vocabshift_version: str = ""

    @property
    def new_ids(self) -> list[int]:
        """Ids whose rows the method initialized, sorted."""
        return [i for start, stop in self.new_token_ranges for i in range(start, stop)]

    def decomposition_lists(self) -> list[list[int]]:
        """For each of `new_ids`, the old ids it decomposes into."""
        lengths, flat = unpack_ids(self.decompositions["lengths"]), unpack_ids(self.decompositions["ids"])
        offsets = np.cumsum([0, *lengths]).tolist()
        return [flat[offsets[i] : offsets[i + 1]] for i in range(len(lengths))]

    def shared_pairs(self) -> list[tuple[int, int]]:
        """`(new_id, old_id)` pairs of rows copied from the old model."""
        if self.mode == "extend":
            return [(i, i) for i in range(self.old_vocab_size)]
        flat = unpack_ids(self.shared)
        return list(zip(flat[0::2], flat[1::2]))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtensionRecord:
        """Read a record; unknown keys (from a newer vocabshift) are ignored.

        Raises:
            `RecordError`: if required keys are missing.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        missing = sorted(required - set(data))
        if missing:
            raise RecordError(f"The vocabshift record lacks {missing}: it is damaged; re-run extend_vocabulary.")
        return cls(**{key: value for key, value in data.items() if key in names})


def get_record(model: Any) -> ExtensionRecord:
    """The ExtensionRecord of a model (or of a config) changed by `extend_vocabulary`.

    Raises:
        `RecordError`: if the model was not changed by vocabshift.
    """
    config = getattr(model, "config", model)
    data = getattr(config, CONFIG_KEY, None)
    if not isinstance(data, dict):
        raise RecordError(
            f"{type(model).__name__} carries no vocabshift record (config.json has no {CONFIG_KEY!r} key): "
            "call model.extend_vocabulary(...) first, or load a model saved after it."
        )
    return ExtensionRecord.from_dict(data)
