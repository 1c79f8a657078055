"""Shard indexes (`*.safetensors.index.json`) checked against the shards they name, and the files of a model folder
with the shards an index keeps in subfolders."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from .arguments import is_int
from .errors import ShardError
from .headers import Header, read_header

__all__ = ["check_folder_files", "check_weight_map", "folder_files", "read_index", "read_weight_map"]


def read_index(path: str | os.PathLike) -> dict[str, Any]:
    """A `*.safetensors.index.json`: a JSON object whose `weight_map` maps tensor names to shard files that lie in
    the index's folder (a name such as `../x.safetensors` or `/etc/x` would read or write files elsewhere).

    Raises:
        `ShardError`: the index is not JSON, its map is empty or not of names to file names, a shard lies outside
            the folder, or its `metadata` is not an object with a byte count as `total_size`.
    """
    try:
        index = json.loads(Path(path).read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
    except (ValueError, KeyError, TypeError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        weight_map = None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in weight_map.items()):
        raise ShardError(f"{str(path)!r} is not a shard index (JSON with a \"weight_map\" of tensor names to file "
                         "names): it is corrupted; save the model again.")
    if (outside := next((shard for shard in weight_map.values() if not _inside(shard)), None)) is not None:
        raise ShardError(f"{str(path)!r} names the shard {outside!r}, which is not a file of its folder: the index is "
                         "corrupted or hostile, and vocabshift reads and writes shards only inside the model folder; "
                         "save or download the model again.")
    _check_index_metadata(path, index)
    return index


def _check_index_metadata(path: str | os.PathLike, index: dict[str, Any]) -> None:
    """`metadata` is what transformers reads as an object, and `total_size` (which propagate updates) a count."""
    metadata = index.get("metadata", {})
    size = metadata.get("total_size", 0) if isinstance(metadata, dict) else None
    if not is_int(size) or size < 0:
        found = f"a \"metadata\" {type(metadata).__name__}" if size is None else f"\"total_size\": {size!r:.40}"
        raise ShardError(f"{str(path)!r} has {found}, but an index's \"metadata\" is an object whose \"total_size\" "
                         "is the shards' byte count: the index is corrupted; save or download the model again.")


def read_weight_map(path: str | os.PathLike) -> dict[str, str]:
    """The `weight_map` (tensor name -> shard file) of a `*.safetensors.index.json` (`read_index`)."""
    weight_map: dict[str, str] = read_index(path)["weight_map"]
    return weight_map


def _inside(shard: str) -> bool:
    name = PurePosixPath(shard.replace("\\", "/"))
    return bool(shard) and not name.is_absolute() and ".." not in name.parts and not PureWindowsPath(shard).drive


def check_weight_map(weight_map: dict[str, str], headers: dict[str, Header], *, index: str) -> None:
    """Every tensor of `weight_map` is in the shard it names (`headers`: shard file name -> its header).

    Raises:
        `ShardError`: a named shard is missing, or does not hold the tensor.
    """
    for key, shard in weight_map.items():
        if shard not in headers:
            raise ShardError(f"{index} puts {key} in {shard}, which is missing: the folder is incomplete; "
                             "download or save the model again.")
        if key not in headers[shard].tensors:
            raise ShardError(f"{index} puts {key} in {shard}, which does not hold it: the folder is corrupted; "
                             "download or save the model again.")


def folder_files(folder: Path) -> list[str]:
    """The names of `folder`'s entries, and of the shards its `model.safetensors.index.json` names in subfolders
    (transformers and llama.cpp's converter load an index's "sub/model-00001-of-00002.safetensors"), as paths
    relative to `folder`, sorted: what `check_folder_files` takes.

    Raises:
        `ShardError`: a corrupted index (`read_index`).
    """
    files = {path.name for path in folder.iterdir()}
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files.update(str(PurePosixPath(name)) for name in read_weight_map(index).values() if (folder / name).is_file())
    return sorted(files)


def check_folder_files(folder: Path, files: list[str]) -> dict[str, Header]:
    """Every `*.safetensors` file among `files` (paths relative to `folder`) and every shard index; returns the
    files' headers (by path).

    Raises:
        `ShardError`: naming the first file that is truncated or corrupted, or an index its shards contradict.
    """
    headers = {path: read_header(folder / path) for path in files if path.endswith(".safetensors")}
    for index in (path for path in files if path.endswith(".safetensors.index.json")):
        where = PurePosixPath(index).parent
        weight_map = {key: str(where / shard) for key, shard in read_weight_map(folder / index).items()}
        check_weight_map(weight_map, headers, index=repr(str(folder / index)))
    return headers
