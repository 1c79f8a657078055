"""Saved model files checked without loading them: config.json, and safetensors headers and shard indexes against
their shards.

A file is 8 bytes (little-endian header length), a JSON header (dtype, shape and `data_offsets` of each tensor, an
optional `__metadata__` of strings) and the tensors' bytes, which tile the rest of the file exactly. A file that
passes `read_header` has every byte accounted for, so a truncated or overwritten file is caught before anything is
written or uploaded from it (the safetensors library itself would only fail when the file is loaded).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import HFValidationError, StrictDataclassError
from huggingface_hub.utils import validate_repo_id
from transformers import AutoConfig, PretrainedConfig

from .arguments import is_int, unexpanded_home
from .errors import ModelFolderError, ShardError

__all__ = ["CONFIG_ERRORS", "ITEM_BITS", "Header", "TensorInfo", "adapter_fix", "broken_links", "check_links",
           "corrupted", "json_object", "load_config", "missing_config", "read_config", "read_header",
           "read_json_object"]

# what AutoConfig raises for a config.json it cannot use: an unknown model_type, a field of the wrong type (a
# hand edit: "vocab_size": 1408.0 fails transformers' strict dataclass validation), a missing field
CONFIG_ERRORS = (ValueError, OSError, TypeError, KeyError, StrictDataclassError)

ITEM_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E5M2FNUZ": 8, "F8_E4M3FNUZ": 8,
             "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64,
             "U64": 64, "F64": 64, "C64": 64, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4}
_MAX_HEADER = 100 * 2**20


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a shard: dtype name, shape and its byte range `[begin, end)` in the file."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Header:
    """The parsed header of a shard: its tensors in file order and its `__metadata__`."""

    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str] | None


def read_config(folder: Path) -> dict[str, Any]:
    """The `config.json` of a saved model folder, as a dict.

    Raises:
        `ModelFolderError`: no config.json, or one that is not a JSON object (corrupted).
    """
    check_links(folder, repr(str(folder)))
    if not (folder / "config.json").is_file():
        raise missing_config(folder, repr(str(folder)))
    config = read_json_object(folder / "config.json")
    _check_dtype(folder / "config.json", config)
    return config


def check_links(folder: Path, named: str, *, deep: bool = False) -> None:
    """Refuse a model folder that holds links leading nowhere (`named`: how the message names it; see
    `broken_links`): among its own files, which a model is read from, or, `deep`, in its subfolders too (for what
    uploads the whole tree).

    Raises:
        `ModelFolderError`: naming the first broken link, where it points and how to copy the folder whole.
    """
    if why := broken_links(folder, named, deep=deep):
        raise ModelFolderError(why)


def broken_links(folder: Path, named: str, *, deep: bool = False) -> str:
    """What to say of a folder that holds links leading nowhere, else '': read as it is, the files they stand for
    would be missing (a chat template, a license, config.json itself) and left out of what is written or uploaded
    from it. A Hugging Face cache snapshot copied with `cp -r` is such a folder: its links point to blobs the copy
    does not have."""
    paths = folder.rglob("*") if deep else folder.iterdir() if folder.is_dir() else ()
    broken = sorted(path for path in paths if path.is_symlink() and not path.exists())
    if not broken:
        return ""
    target = os.readlink(broken[0])
    more = f", and {len(broken) - 1} more" if len(broken) > 1 else ""
    why = ("it was copied out of a Hugging Face cache without the blobs its links point to (cp -r copies the links, "
           "not the files): copy the snapshot with cp -rL, or download it with hf download REPO --local-dir DIR, "
           "and pass that folder" if "blobs" in Path(target).parts else
           "restore the files they point to, or replace the links by the files")
    return (f"{named} holds links that lead nowhere ({broken[0].relative_to(folder).as_posix()} -> {target!r}{more}), "
            f"so the files they stand for are missing: {why}.")


def _check_dtype(path: Path, config: dict[str, Any]) -> None:
    """"dtype" (or the older "torch_dtype") names a torch dtype: transformers looks it up on `torch` and fails with
    a raw AttributeError, which the tokenizer's loader (it reads config.json too) would report as its own."""
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is not None and not (isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype)):
            raise ModelFolderError(f"{str(path)!r} has \"{key}\": {value!r:.40}, which names no torch dtype: it is "
                                   "edited by hand or corrupted; set it to the dtype of the weights (e.g. \"float32\" "
                                   "or \"bfloat16\"), or save the model again.")


def load_config(folder: Path) -> PretrainedConfig:
    """The config of a saved model folder, as transformers reads it (`read_config` first: a missing or corrupted
    file is named as such).

    Raises:
        `ModelFolderError`: naming config.json and what transformers found wrong in it.
    """
    read_config(folder)
    try:
        return AutoConfig.from_pretrained(folder)
    except CONFIG_ERRORS as error:
        why = f"{type(error).__name__}: {' '.join(str(error).split())}"
        raise ModelFolderError(f"{str(folder / 'config.json')!r} cannot be read ({why}): it is corrupted, edited by "
                               "hand or written by a newer transformers; save the model again.") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A model folder's JSON file that holds an object (config.json, generation_config.json).

    Raises:
        `ModelFolderError`: it is not valid UTF-8 JSON, or not an object (corrupted).
    """
    return json_object(path, lambda why: ModelFolderError(f"{str(path)!r} cannot be read ({why}): it is corrupted; "
                                                          "save the model again."))


def json_object(path: Path, damaged: Callable[[str], Exception]) -> dict[str, Any]:
    """The JSON object in `path`; raises `damaged(why)` when it is not valid UTF-8 JSON, or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise damaged(f"{type(error).__name__}: {error}") from None
    if not isinstance(value, dict):
        raise damaged(f"a JSON {type(value).__name__}, not an object")
    return value


def missing_config(folder: Path, named: str) -> ModelFolderError:
    """The error for a model folder without config.json (`named`: how the message names it), telling a folder that
    lacks it from a path that is no folder, and a Hub repo id (which this step does not download) from a typo."""
    if folder.is_dir():
        fix = adapter_fix(folder) or "pass a folder written by save_pretrained."
        return ModelFolderError(f"{named} has no config.json: {fix}")
    try:
        validate_repo_id(str(folder))
        hub = "/" in str(folder) and not folder.is_absolute()
    except HFValidationError:
        hub = False
    fix = f"; for a Hub repo, download it first (hf download {folder} --local-dir DIR) and pass DIR" if hub else ""
    what = "is a file, not a folder" if folder.exists() else f"does not exist{unexpanded_home(folder)}"
    return ModelFolderError(f"{named} {what}{' (this step reads local folders only)' if hub else ''}: pass a folder "
                            f"written by save_pretrained{fix}.")


def corrupted(path: Path, why: str) -> ShardError:
    """The error for a file that is not valid safetensors, naming it and saying why."""
    return ShardError(f"{str(path)!r} is not a valid safetensors file ({why}): it is truncated or corrupted; "
                      "download or save it again.")


def read_header(path: str | os.PathLike) -> Header:
    """Parse and check a shard's header: known dtypes, shapes that match the byte ranges, tensors that tile the
    data exactly up to the file's end.

    Raises:
        `ShardError`: the file is missing, truncated, or its header is corrupted.
    """
    path = Path(path)
    if not path.is_file():
        raise ShardError(f"The shard {str(path)!r} is missing: download or save the model again.")
    size = path.stat().st_size
    raw, start = _parse(path, size)
    metadata = raw.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(key, str) and isinstance(value, str) for key, value in metadata.items())):
        raise corrupted(path, "__metadata__ is not a map of strings to strings")
    tensors = {name: _tensor(path, name, entry, start) for name, entry in raw.items()}
    ordered = dict(sorted(tensors.items(), key=lambda item: item[1].begin))
    _check_tiling(path, ordered, start, size)
    return Header(path, ordered, metadata)


def _parse(path: Path, size: int) -> tuple[dict[str, Any], int]:
    """The header as a dict, and where the data starts."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if size < 8 or not 0 < length <= min(_MAX_HEADER, size - 8):
            raise corrupted(path, f"header length {length} for a file of {size} bytes")
        try:
            raw = json.loads(handle.read(length), object_pairs_hook=_unique_keys)
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, a repeated name
            raise corrupted(path, f"unreadable header: {error}") from None
    if not isinstance(raw, dict):
        raise corrupted(path, f"the header is a JSON {type(raw).__name__}, not an object")
    return raw, 8 + length


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"the name {next(n for n in names if names.count(n) > 1)!r} appears twice")
    return dict(pairs)


def _tensor(path: Path, name: str, entry: Any, start: int) -> TensorInfo:
    try:
        dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise corrupted(path, f"tensor {name!r} lacks a dtype, a shape or data_offsets [begin, end]") from None
    if not isinstance(dtype, str) or dtype not in ITEM_BITS:
        raise corrupted(path, f"tensor {name!r} has the unknown dtype {dtype!r}; known: {', '.join(ITEM_BITS)}")
    counts = [*shape, begin, end] if isinstance(shape, list) else [None]
    if not all(is_int(n) and n >= 0 for n in counts) or begin > end:
        raise corrupted(path, f"tensor {name!r} has the shape {shape!r} and data_offsets {[begin, end]!r}, which "
                              "are not non-negative integers (with begin <= end)")
    if (end - begin) * 8 != math.prod(shape) * ITEM_BITS[dtype]:
        raise corrupted(path, f"tensor {name!r} does not fit its byte range")
    return TensorInfo(dtype, tuple(shape), start + begin, start + end)


def _check_tiling(path: Path, tensors: dict[str, TensorInfo], start: int, size: int) -> None:
    """The tensors, in file order, follow each other without gap or overlap and end at the end of the file."""
    position = start
    for name, info in tensors.items():
        if info.begin != position:
            raise corrupted(path, f"tensor {name!r} starts at byte {info.begin}, not where the previous one ends "
                                  f"({position})")
        position = info.end
    if position != size:
        raise corrupted(path, f"the tensors end at byte {position} but the file has {size}")


def adapter_fix(folder: Path) -> str:
    """For a folder without config.json that holds a peft adapter (what `PeftModel.save_pretrained` writes): what
    to pass instead; else an empty string."""
    if not (folder / "adapter_config.json").is_file():
        return ""
    return ("it holds a peft adapter (adapter_config.json), not a model: merge the adapter into its base model "
            "(PeftModel.from_pretrained(base, folder).merge_and_unload()), save that with save_pretrained and pass "
            "its folder.")
