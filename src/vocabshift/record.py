"""The ExtensionRecord: what vocabshift did to a model, stored in `config.json` under `"vocabshift"`.

This module is the only one that reads or writes that key: on a model's config (`get_record`, `set_record`, the
`add_*` functions that append history) and in a `config.json` read as JSON (`find_record`, `require_record`,
`store_record`). The model card, `propagate` and `evaluate` read the record; nothing re-derives it. Long id lists
(decompositions, shared pairs) are stored packed (zlib + base64 of little-endian int32) so that `print(model.config)`
stays readable.
"""

from __future__ import annotations

import copy
import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ._record_values import check_values, damaged_record
from ._typing import Model, ModelConfig
from .errors import RecordError
from .packing import unpack_ids

__all__ = [
    "CONFIG_KEY",
    "OUTPUT_PLACEHOLDER",
    "ExtensionRecord",
    "add_cpt_entry",
    "add_evaluation",
    "earlier_records",
    "find_record",
    "get_record",
    "has_record",
    "new_ids_of",
    "no_record_error",
    "note_command",
    "propagated",
    "require_record",
    "set_record",
    "store_record",
]

CONFIG_KEY = "vocabshift"
# The output folder of an extend command run from Python, where the record cannot know it: the card puts its own.
OUTPUT_PLACEHOLDER = "OUTPUT_DIR"
# Keys of records written by earlier versions -> their name now.
_RENAMED = {"target_tokenizer_sha256": "new_tokenizer_sha256"}


@dataclass
class ExtensionRecord:
    """What was done to a model's vocabulary.

    Attributes:
        method / method_config / diagnostics: the initialization method, its options (every field of its config,
            defaults included) and its summary figures.
        mode (`str`): `"extend"` or `"replace"`.
        seed (`int`): the seed of every random draw.
        source_model / source_revision: where the model came from (`name_or_path`, commit hash when known).
        source_is_folder (`bool | None`): whether `source_model` named a local folder when the model was extended
            (as `from_pretrained` tells a folder from a Hub id); None in records written before this field, which
            do not say (the model card then publishes no `base_model` it cannot place).
        old_vocab_size / new_vocab_size (`int`): tokens in the source tokenizer and in the returned tokenizer.
        old_num_rows / new_num_rows (`int`): rows of the embedding matrix before and after (padding included).
        tied (`bool`): whether the output head is tied to the input embeddings.
        new_token_ranges (`list[list[int]]`): `[start, stop)` ranges of the ids initialized by the method.
        special_tokens (`dict[str, int]`): special token -> id in the new vocabulary.
        tokenizer_report (`dict`): the tokenizer merge report (extend mode).
        source_tokenizer_sha256 / new_tokenizer_sha256 / tokenizer_sha256: fingerprints (`vocab.fingerprint`) of
            the model's old tokenizer, of the tokenizer given as `new_tokenizer`, and of the tokenizer that now
            matches the model (merged in extend mode). Records of vocabshift 0.1 call the second one
            `target_tokenizer_sha256`; they are read all the same.
        decompositions (`dict[str, str]`): packed `lengths` and `ids` of each new token's pieces (old ids).
        shared (`str`): packed `(new_id, old_id)` pairs of copied rows; empty in extend mode (identity on old ids).
        pad_to_multiple_of (`int | None`) / keep_source_segmentation (`bool`) / method_options (`dict`): the
            options of the `extend_vocabulary` call as given (method options as JSON, objects by a short label).
        command (`list[str]`): the `vocabshift extend` command that reproduces the call: the one run, or, for a call
            from Python, its equivalent with `OUTPUT_DIR` for the output folder. Empty in records before 0.2.
        cpt / propagation (`list[dict]`): later steps (embedding-only training, LEP) append here; an entry's
            `command`, where a command ran, is its words as `command` is (earlier records kept propagation's as one
            shell string: it is read as its words). A `cpt` entry's `propagations` is how many `propagation` entries
            the record held when it ran (absent in records before 0.2: those runs came before any propagation).
        evaluations (`list[dict]`): held-out evaluations (`vocabshift.evaluate(...).add_to_record(model)`), each
            with `cpt_runs` and `propagations`: how many `cpt` and `propagation` entries the record held when it was
            measured (absent in records before 0.2).
        earlier (`list[dict]`): for a model extended more than once, the records of the earlier extensions, oldest
            first, as they were (each with its own `cpt`, `evaluations` and `source_model`); this record describes
            the last extension.
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
    new_tokenizer_sha256: str
    tokenizer_sha256: str
    decompositions: dict[str, str]
    shared: str = ""
    method_config: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[str, Any] = field(default_factory=dict)
    tokenizer_report: dict[str, Any] = field(default_factory=dict)
    pad_to_multiple_of: int | None = None
    keep_source_segmentation: bool = False
    method_options: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    cpt: list[dict[str, Any]] = field(default_factory=list)
    propagation: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    vocabshift_version: str = ""
    earlier: list[dict[str, Any]] = field(default_factory=list)
    source_is_folder: bool | None = None

    def __post_init__(self) -> None:
        self.cpt, self.propagation = _argv_commands(self.cpt), _argv_commands(self.propagation)

    @property
    def original_source_model(self) -> str:
        """The model the first extension started from (`source_model` when there was only one)."""
        first = self.earlier[0].get("source_model") if self.earlier else None
        return first if isinstance(first, str) else self.source_model

    @property
    def new_ids(self) -> list[int]:
        """Ids whose rows the method initialized, sorted."""
        return [i for start, stop in self.new_token_ranges for i in range(start, stop)]

    def decomposition_lists(self) -> list[list[int]]:
        """For each of `new_ids`, the old ids it decomposes into."""
        lengths, flat = unpack_ids(self.decompositions["lengths"]), unpack_ids(self.decompositions["ids"])
        if len(lengths) != len(self.new_ids) or sum(lengths) != len(flat):
            raise damaged_record(f"'decompositions' holds {len(lengths)} decompositions of {len(flat)} pieces in all, "
                                 f"for {len(self.new_ids)} new ids ('new_token_ranges')")
        offsets = np.cumsum([0, *lengths]).tolist()
        return [flat[offsets[i] : offsets[i + 1]] for i in range(len(lengths))]

    def shared_pairs(self) -> list[tuple[int, int]]:
        """`(new_id, old_id)` pairs of rows copied from the old model: not a special token beyond its rows
        (Gemma-3's image token), which had no row to copy (`assemble_weights` gives it the mean row)."""
        if self.mode == "extend":
            return [(i, i) for i in range(min(self.old_vocab_size, self.old_num_rows))]
        flat = unpack_ids(self.shared)
        return [(new, old) for new, old in zip(flat[0::2], flat[1::2]) if old < self.old_num_rows]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExtensionRecord:
        """Read a record; unknown keys (from a newer vocabshift) are ignored, renamed ones read under their new name.

        Raises:
            `RecordError`: required keys are missing, or a value is not what vocabshift writes (`check_values`).
        """
        if not isinstance(data, Mapping):
            raise damaged_record(f"it is a {type(data).__name__} ({data!r:.60}), where vocabshift writes a mapping")
        data = {_RENAMED.get(key, key): value for key, value in data.items()}
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        missing = sorted(required - set(data))
        if missing:
            raise damaged_record(f"it lacks {missing}")
        known = {key: value for key, value in data.items() if key in names}
        check_values(known)
        return cls(**known)


def _argv_commands(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History entries with every `command` as its words (a shell string, as earlier versions wrote propagation's,
    split); the list itself when there is nothing to split."""
    if not any(isinstance(entry.get("command"), str) for entry in entries):
        return entries
    return [{**entry, "command": shlex.split(entry["command"])} if isinstance(entry.get("command"), str) else entry
            for entry in entries]


def no_record_error(what: str, fix: str) -> RecordError:
    """The one error for a model or folder without a record: `what` names it, `fix` says what to pass instead."""
    return RecordError(f"{what} carries no vocabshift record (config.json has no {CONFIG_KEY!r} key): {fix}")


def _data(source: Any) -> Any:
    """The raw record of a model, a config object or a config.json dict (None when absent)."""
    if isinstance(source, Mapping):
        return source.get(CONFIG_KEY)
    return getattr(getattr(source, "config", source), CONFIG_KEY, None)


def has_record(source: Any) -> bool:
    """Whether a model, its config or a config.json dict carries a record (damaged or not: `find_record` says)."""
    return _data(source) is not None


def find_record(source: Any) -> ExtensionRecord | None:
    """The record of a model, a config or a config.json dict; None when there is none.

    Raises:
        `RecordError`: the record is there but damaged.
    """
    return ExtensionRecord.from_dict(_data(source)) if has_record(source) else None


def require_record(source: Any, *, what: str, fix: str) -> ExtensionRecord:
    """`find_record`, refusing a source without a record with `no_record_error(what, fix)`."""
    record = find_record(source)
    if record is None:
        raise no_record_error(what, fix)
    return record


def get_record(model: Model | ModelConfig) -> ExtensionRecord:
    """The ExtensionRecord of a model (or of a config) changed by `extend_vocabulary`.

    Raises:
        `RecordError`: if the model was not changed by vocabshift.
    """
    return require_record(model, what=type(model).__name__,
                          fix="call model.extend_vocabulary(...) first, or load a model saved after it.")


def new_ids_of(source: Any, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """The ids `extend_vocabulary` initialized (a sorted int64 tensor on `device`), None without a record."""
    record = find_record(source)
    return None if record is None else torch.tensor(record.new_ids, dtype=torch.long, device=device)


def earlier_records(model: Any) -> list[dict[str, Any]]:
    """The `earlier` list of a record made for `model` now: its current record (if any, as stored, damaged or not)
    appended to that record's own `earlier`."""
    data = _data(model)
    if not isinstance(data, dict):
        return []
    previous = data.get("earlier")
    kept = [dict(entry) for entry in previous if isinstance(entry, dict)] if isinstance(previous, list) else []
    return [*kept, copy.deepcopy({key: value for key, value in data.items() if key != "earlier"})]


def set_record(model: Any, record: ExtensionRecord) -> None:
    """Store `record` in `model.config` (replacing any earlier one); `save_pretrained` writes it to config.json."""
    setattr(model.config, CONFIG_KEY, record.to_dict())


def store_record(config: dict[str, Any], source: Any) -> None:
    """Put the record of `source` (a record, or a model that carries one) into a config.json dict, as it is."""
    data = source.to_dict() if isinstance(source, ExtensionRecord) else copy.deepcopy(_data(source))
    if not isinstance(data, dict):
        raise no_record_error(type(source).__name__, "call model.extend_vocabulary(...) first.")
    config[CONFIG_KEY] = data


def _history(model: Any, key: str) -> list[dict[str, Any]] | None:
    data = _data(model)
    return data.setdefault(key, []) if isinstance(data, dict) else None


def add_cpt_entry(model: Any, entry: Mapping[str, Any]) -> bool:
    """Append one embedding-only training run to the record's `cpt` history, with how many `propagation` steps the
    record held then (`propagations`: a run on a model that LEP made comes after them, as the card tells).

    Returns:
        False (and does nothing) if the model carries no record.
    """
    history = _history(model, "cpt")
    if history is None:
        return False
    lep = _data(model).get("propagation")
    history.append({**entry, "propagations": len(lep) if isinstance(lep, list) else 0})
    return True


def add_evaluation(model: Any, entry: Mapping[str, Any]) -> None:
    """Append one held-out evaluation to the record's `evaluations`, with the history of the model it measured: the
    `cpt` runs and `propagation` steps the record held then (`cpt_runs`, `propagations`), which the card tells.

    Raises:
        `RecordError`: if the model carries no record.
    """
    record = get_record(model)
    history = _history(model, "evaluations")
    assert history is not None
    history.append({**entry, "cpt_runs": len(record.cpt), "propagations": len(record.propagation)})


def note_command(model: Any, words: Sequence[str]) -> None:
    """Replace the record's `command` by the one that was run (the `vocabshift extend` command line)."""
    get_record(model)
    _data(model)["command"] = list(words)


def propagated(record: ExtensionRecord, entry: Mapping[str, Any], *, tokenizer_sha256: str, vocab_size: int,
               num_rows: int, special_tokens: dict[str, int]) -> ExtensionRecord:
    """The record of a model that received `record`'s rows by propagation: its tokenizer and rows, one more
    `propagation` entry."""
    return dataclasses.replace(record, new_vocab_size=vocab_size, new_num_rows=num_rows,
                               tokenizer_sha256=tokenizer_sha256, special_tokens=special_tokens,
                               propagation=[*record.propagation, dict(entry)])
