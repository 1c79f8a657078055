"""Where each model comes from (a local folder or a Hub repo) and where its embedding tensors are stored.

From the Hub only what propagation needs is downloaded: config, tokenizer files and the shard index first; then
the shards that hold embedding tensors (all shards of the instruct model, whose other shards are copied).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HFValidationError,
    HTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from ..arguments import unexpanded_home
from ..atomic import LEGACY_TOKENIZER_FILES, LICENSE_PREFIXES, PROCESSOR_FILES, TOKENIZER_FILES
from ..embeddings import embedding_names
from ..errors import InvalidArgumentError, ModelFolderError, ShardError
from ..headers import adapter_fix, check_links, load_config, missing_config, read_config, read_header
from ..shard_index import read_index

__all__ = ["INDEX", "Layout", "Source", "find_layout", "open_source"]

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
_INSTRUCT_FILES = ("generation_config.json", *PROCESSOR_FILES)


@dataclass(frozen=True)
class Source:
    """One of `adapted`, `base`, `instruct`: its name as given, local folder, and Hub repo and commit if remote."""

    role: str
    name: str
    folder: Path
    files: tuple[str, ...]
    repo_id: str | None = None
    revision: str | None = None
    token: str | bool | None = None

    def file(self, filename: str) -> Path:
        """The local path of `filename`, downloaded from the Hub (at the pinned commit) when remote.

        Raises:
            `ShardError`: the file is listed (e.g. by the index) but missing.
        """
        if self.repo_id is None:
            return self.folder / filename
        try:
            return Path(hf_hub_download(self.repo_id, filename, revision=self.revision, token=self.token))
        except EntryNotFoundError:
            raise ShardError(f"{filename} is missing from {self.repo_id}@{self.revision} ({self.role}): the repo "
                             "is incomplete; upload it again.") from None

    def config(self) -> dict[str, Any]:
        return read_config(self.file("config.json").parent)


def open_source(value: str | os.PathLike, *, role: str, revision: str | None, token: str | bool | None) -> Source:
    """A local folder as it is, or a Hub repo with its small files downloaded (config, tokenizer, index).

    Raises:
        `ModelFolderError`: neither a model folder nor a Hub repo that can be read.
        `InvalidArgumentError`: a revision given for a local folder.
    """
    path = Path(value)
    if path.is_dir():
        if revision is not None:
            raise InvalidArgumentError(f"{role}_revision={revision!r} was given but {role}={str(value)!r} is a "
                                       "local folder: pass revisions for Hub repo ids only.")
        check_links(path, f"{role}={str(value)!r}")
        if not (path / "config.json").is_file():
            fix = adapter_fix(path) or "pass a folder written by save_pretrained, or a Hub repo id."
            raise ModelFolderError(f"{role}={str(value)!r} has no config.json: {fix}")
        read_config(path)  # a JSON object, or the error says it is corrupted
        files = tuple(sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()))
        return Source(role, str(value), path, files)
    if path.exists() or unexpanded_home(path):  # a file of the model (its model.safetensors), '~/model': no repo id
        raise missing_config(path, f"{role}={str(value)!r}")
    return _hub_source(str(value), role, revision, token)


def _hub_source(repo_id: str, role: str, revision: str | None, token: str | bool | None) -> Source:
    try:
        validate_repo_id(repo_id)
        info = HfApi().model_info(repo_id, revision=revision, token=token)
    except (HFValidationError, RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise ModelFolderError(f"{role}={repo_id!r} is neither a local model folder nor a Hub repo that can be read "
                               f"({type(error).__name__}): check the path, the repo id, {role}_revision and the "
                               "token.") from None
    except (HTTPError, OfflineModeIsEnabled) as error:  # no network, HF_HUB_OFFLINE, a server error
        raise ModelFolderError(f"{role}={repo_id!r} is not a local folder, and the Hub could not be asked for it "
                               f"({type(error).__name__}: {error}): check the path, or the network and HF_ENDPOINT."
                               ) from None
    files = tuple(sorted(sibling.rfilename for sibling in info.siblings or []))
    source = Source(role, repo_id, Path(), files, repo_id, info.sha, token)
    if "config.json" not in files:
        raise ModelFolderError(f"{role}={repo_id!r} has no config.json at {info.sha}: pass a model repo.")
    wanted = ["config.json", *_tokenizer_files(files), *([INDEX] if INDEX in files else [])]
    if role == "instruct":
        wanted += [f for f in files if f in _INSTRUCT_FILES or f.upper().startswith(LICENSE_PREFIXES)]
    folder = source.file("config.json").parent
    for filename in wanted:
        source.file(filename)
    return Source(role, repo_id, folder, files, repo_id, info.sha, token)


def _tokenizer_files(files: tuple[str, ...]) -> list[str]:
    names = TOKENIZER_FILES if "tokenizer.json" in files else TOKENIZER_FILES + LEGACY_TOKENIZER_FILES
    return [f for f in files if f in names or f.startswith("additional_chat_templates/")]


@dataclass(frozen=True)
class Layout:
    """Where a model's tensors are stored.

    Attributes:
        weight_map (`dict[str, str]`): tensor name -> shard file name.
        index (`dict | None`): the raw shard index, None for a single `model.safetensors`.
        sides (`dict[str, str]`): stored embedding tensor -> `"input"` or `"output"` (an untied head); a tied
            model stores `"input"` only (sometimes twice, under the head's name too).
        tied (`bool`): the output head is the input embedding matrix.
        bias (`str | None`): the stored head bias, if the model has one.
    """

    weight_map: dict[str, str]
    index: dict[str, Any] | None
    sides: dict[str, str]
    tied: bool
    bias: str | None = None

    def key(self, side: str) -> str | None:
        return next((key for key, found in self.sides.items() if found == side), None)

    @property
    def shards(self) -> list[str]:
        return list(dict.fromkeys(self.weight_map.values()))

    @property
    def embedding_shards(self) -> set[str]:
        return {self.weight_map[key] for key in [*self.sides, *([self.bias] if self.bias else [])]}


def find_layout(source: Source) -> Layout:
    """The shard map and the embedding tensors of `source`: the header of model.safetensors, else the index (the
    order in which from_pretrained reads them).

    Raises:
        `ModelFolderError`: no safetensors weights. `ShardError`: the index or a header is corrupted, or an
            embedding tensor is missing. `UnsupportedModelError`: an architecture propagation cannot handle.
    """
    index = None
    if SINGLE in source.files:  # before an index, as from_pretrained reads them
        weight_map = dict.fromkeys(read_header(source.file(SINGLE)).tensors, SINGLE)
    elif INDEX in source.files:
        index = read_index(source.file(INDEX))
        weight_map = dict(index["weight_map"])
    else:
        raise ModelFolderError(f"{source.role}={source.name!r} has no safetensors weights ({SINGLE} or {INDEX}): "
                               "propagate reads safetensors only; load the model and save_pretrained it again.")
    names = embedding_names(load_config(source.folder))
    sides = _embedding_keys(source, names, weight_map)
    bias = next((key for name in names.bias if (key := _stored_key(weight_map, name))), None)
    return Layout(weight_map, index, sides, names.tied, bias)


def _embedding_keys(source: Source, names: Any, weight_map: dict[str, str]) -> dict[str, str]:
    named = [(name, "input") for name in names.input] + [(n, "output") for n in names.head if n not in names.input]
    sides = {key: side for name, side in named if (key := _stored_key(weight_map, name))}
    for side, expected in (("input", names.input), ("output", [] if names.tied else names.head)):
        if expected and side not in sides.values():
            raise ShardError(f"{source.role}={source.name!r} stores no tensor for {expected}: its weights are "
                             "incomplete; save the model again.")
    return sides


def _stored_key(weight_map: dict[str, str], name: str) -> str | None:
    """The stored tensor for parameter `name`, allowing a base-model prefix on either side."""
    for key in weight_map:
        if key == name or key.endswith("." + name) or name.endswith("." + key):
            return key
    return None
