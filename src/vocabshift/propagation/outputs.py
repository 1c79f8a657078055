"""The output's small files: the instruct config and generation config with the new vocabulary size, special ids
looked up again by content, the extended ExtensionRecord; the shard index; license files."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._typing import Tokenizer
from ..atomic import LICENSE_PREFIXES, PROCESSOR_FILES, atomic_write_text
from ..headers import read_json_object
from ..record import ExtensionRecord, propagated, store_record
from ..vocab.ids import remap_token_ids
from ..vocab.load import fingerprint
from .checks import Model
from .sources import INDEX, Layout, Source

__all__ = ["copy_instruct_files", "write_configs", "write_index"]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_index(folder: Path, layout: Layout, change: int) -> None:
    """The instruct index with the same weight map and the new total size."""
    if layout.index is None:
        return
    index = json.loads(json.dumps(layout.index))
    metadata = index.setdefault("metadata", {})
    if "total_size" in metadata:
        metadata["total_size"] += change
    _write_json(folder / INDEX, index)


def _id_mapper(instruct_tokenizer: Tokenizer, tokenizer: Tokenizer) -> Callable[[int], int | None]:
    """Instruct id -> output id, through the token's content."""
    source, target = instruct_tokenizer.backend_tokenizer, tokenizer.backend_tokenizer

    def mapped(value: int) -> int | None:
        token = source.id_to_token(value)
        return None if token is None else target.token_to_id(token)

    return mapped


def _remap_ids(config: dict[str, Any], mapped: Callable[[int], int | None]) -> None:
    config.update(remap_token_ids(config, mapped))


def _updated_record(record: ExtensionRecord, entry: dict[str, Any], tokenizer: Tokenizer, rows: int
                    ) -> ExtensionRecord:
    specials = {token: tokenizer.convert_tokens_to_ids(token) for token in tokenizer.all_special_tokens}
    return propagated(record, entry, tokenizer_sha256=fingerprint(tokenizer), vocab_size=len(tokenizer),
                      num_rows=rows, special_tokens=specials)


def write_configs(folder: Path, instruct: Model, record: ExtensionRecord, entry: dict[str, Any], tokenizer: Any,
                  rows: int) -> None:
    """config.json (and generation_config.json when instruct has one), everything else kept as instruct has it."""
    mapped = _id_mapper(instruct.tokenizer, tokenizer)
    config = json.loads(json.dumps(instruct.config))
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    for part in filter(None, (config, text)):
        _remap_ids(part, mapped)
    (text if text is not None and "vocab_size" in text else config)["vocab_size"] = rows
    store_record(config, _updated_record(record, entry, tokenizer, rows))
    _write_json(folder / "config.json", config)
    if "generation_config.json" in instruct.source.files:
        generation = read_json_object(instruct.source.file("generation_config.json"))
        _remap_ids(generation, mapped)
        _write_json(folder / "generation_config.json", generation)


def copy_instruct_files(folder: Path, instruct: Source) -> None:
    """The instruct model's license and notice files (its license applies to the output), and a multimodal
    instruct's processor configs (its image and video preprocessing, which the new vocabulary leaves as it is)."""
    for name in instruct.files:
        if "/" not in name and (name.upper().startswith(LICENSE_PREFIXES) or name in PROCESSOR_FILES):
            shutil.copyfile(instruct.file(name), folder / name)
