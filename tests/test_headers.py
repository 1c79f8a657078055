"""`vocabshift.headers`: every way a safetensors header can be broken is a `ShardError` naming the file."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from vocabshift.errors import ModelFolderError, ShardError
from vocabshift.headers import check_links, read_config, read_header
from vocabshift.shard_index import check_folder_files, read_index


@pytest.fixture
def shard(tmp_path):
    tensors = {"a.ids": torch.arange(12, dtype=torch.int64).reshape(3, 4), "b.weight": torch.zeros(5, 2),
               "c.half": torch.zeros(3, dtype=torch.float16)}
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    return tmp_path / "model.safetensors"


def _rewrite(path, change):
    """The file with its header passed through `change` (a dict -> dict or raw JSON text), data kept."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = change(json.loads(data[8 : 8 + length]))
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + length :])


def _set(name, key, value):
    def change(header):
        header[name][key] = value
        return header
    return change


@pytest.mark.parametrize(("change", "why"), [
    (_set("b.weight", "dtype", "F33"), "tensor 'b.weight' has the unknown dtype 'F33'; known: BOOL, U8"),
    (_set("b.weight", "dtype", ["F32"]), "tensor 'b.weight' has the unknown dtype \\['F32'\\]"),
    (_set("b.weight", "shape", [5, -2]), "tensor 'b.weight' has the shape \\[5, -2\\] .* not non-negative integers"),
    (_set("b.weight", "shape", "5x2"), "tensor 'b.weight' has the shape '5x2'"),
    (_set("b.weight", "shape", [5, True]), "tensor 'b.weight' has the shape \\[5, True\\]"),
    (_set("b.weight", "data_offsets", [96, 40]),
     "tensor 'b.weight' has the shape \\[5, 2\\] and data_offsets \\[96, 40\\]"),
    (_set("b.weight", "data_offsets", [96]), "tensor 'b.weight' lacks a dtype, a shape or data_offsets"),
    (_set("b.weight", "shape", [4, 2]), "tensor 'b.weight' does not fit its byte range"),
    (_set("a.ids", "data_offsets", [8, 104]), "tensor 'a.ids' starts at byte \\d+, not where the previous one ends"),
    (lambda h: {**h, "__metadata__": {"format": 1}}, "__metadata__ is not a map of strings to strings"),
    (lambda h: {**h, "x": "oops"}, "tensor 'x' lacks a dtype"),
    (lambda h: [h], "the header is a JSON list, not an object"),
    (lambda h: json.dumps(h)[:-1] + ', "a.ids": ' + json.dumps(h["a.ids"]) + "}",
     "unreadable header: the name 'a.ids' appears twice"),
])
def test_broken_headers(shard, change, why):
    read_header(shard)  # the file as saved is valid
    _rewrite(shard, change)
    with pytest.raises(ShardError, match=f"'{shard}' is not a valid safetensors file \\({why}"):
        read_header(shard)


def test_truncated_and_padded_files(shard):
    data = shard.read_bytes()
    for broken, why in ((data[:-1], "the tensors end at byte \\d+ but the file has \\d+"),
                        (data + b"\0", "the tensors end at byte \\d+ but the file has \\d+"),
                        (data[:3], "header length \\d+ for a file of 3 bytes"), (b"", "header length 0"),
                        (data[:8] + b"\xff\xfe" + data[10:], "unreadable header")):
        shard.write_bytes(broken)
        with pytest.raises(ShardError, match=f"is not a valid safetensors file \\({why}"):
            read_header(shard)


def test_folder_files_and_index(shard):
    folder = shard.parent
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a.ids": "model.safetensors", "b.weight": "model.safetensors"}}))
    check_folder_files(folder, ["model.safetensors", "model.safetensors.index.json"])
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"z": "model.safetensors"}}))
    with pytest.raises(ShardError, match="index.json' puts z in model.safetensors, which does not hold it"):
        check_folder_files(folder, ["model.safetensors", "model.safetensors.index.json"])
    (folder / "model.safetensors.index.json").write_text("not json")
    with pytest.raises(ShardError, match="index.json' is not a shard index"):
        check_folder_files(folder, ["model.safetensors", "model.safetensors.index.json"])
    with pytest.raises(ShardError, match="The shard .*other.safetensors' is missing"):
        check_folder_files(folder, ["other.safetensors"])


@pytest.mark.parametrize(("weight_map", "why"), [
    ({}, "is not a shard index"), ({"a": 3}, "is not a shard index"), ({"a": ""}, "names the shard ''"),
    ({"a": "../x.safetensors"}, "names the shard '../x.safetensors', which is not a file of its folder"),
    ({"a": "sub/../../x.safetensors"}, "names the shard 'sub/../../x.safetensors'"),
    ({"a": "/etc/passwd"}, "names the shard '/etc/passwd'"), ({"a": "C:\\x.safetensors"}, "names the shard 'C:"),
    ({"a": "..\\x.safetensors"}, "names the shard '[.][.]"),
])
def test_index_with_no_tensors_or_shards_outside_its_folder(tmp_path, weight_map, why):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ShardError, match=why):
        read_index(tmp_path / "model.safetensors.index.json")


def test_index_with_shards_in_a_subfolder(tmp_path):
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "sub/model..x.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert read_index(tmp_path / "model.safetensors.index.json")["weight_map"] == weight_map


def test_a_broken_link_in_a_subfolder_stops_only_what_uploads_the_tree(tmp_path):
    """A model is read from its own files: a stale link among its logs does not stop it; push uploads the tree."""
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "latest").symlink_to(tmp_path / "gone")
    assert read_config(tmp_path) == {}
    with pytest.raises(ModelFolderError, match=r"logs/latest -> .*gone"):
        check_links(tmp_path, "folder", deep=True)
    (tmp_path / "tokenizer.json").symlink_to(tmp_path / "blobs" / "abc")
    with pytest.raises(ModelFolderError, match=r"tokenizer.json -> .*copy the snapshot with cp -rL"):
        read_config(tmp_path)
