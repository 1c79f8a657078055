"""Streaming safetensors I/O: headers, row reads, shard rewrites and copies, against the safetensors library."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from vocabshift.errors import NonFiniteWeightsError, ShardError, UnsupportedModelError
from vocabshift.headers import read_header
from vocabshift.propagation.checks import refuse_non_finite
from vocabshift.propagation.fit import FitPairs, fit_map
from vocabshift.propagation.shards import Matrix, copy_shard, write_shard


@pytest.fixture
def shard(tmp_path) -> tuple[Path, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    tensors = {"a.ids": torch.arange(12, dtype=torch.int64).reshape(3, 4),
               "embed.weight": torch.randn(10, 8, generator=generator).to(torch.bfloat16),
               "z.norm": torch.randn(5, generator=generator)}
    save_file(tensors, tmp_path / "shard.safetensors", metadata={"format": "pt", "note": "kept"})
    return tmp_path / "shard.safetensors", tensors


def test_rows_are_read_in_any_order(shard):
    path, tensors = shard
    matrix = Matrix(read_header(path), "embed.weight")
    ids = torch.tensor([7, 2, 3, 3, 9, 0, 1])
    assert torch.equal(matrix.gather(ids), tensors["embed.weight"][ids])
    assert torch.equal(matrix.read(4, 10), tensors["embed.weight"][4:10])
    assert matrix.gather(torch.tensor([], dtype=torch.long)).shape == (0, 8)
    with pytest.raises(UnsupportedModelError, match="a.ids .* is a I64 tensor of shape \\(3, 4\\)"):
        Matrix(read_header(path), "a.ids")


@pytest.mark.parametrize("chunk", [None, 7])
def test_rewrite_streams_the_replaced_tensor_and_copies_the_others(shard, tmp_path, monkeypatch, chunk):
    from vocabshift.propagation import shards

    if chunk:  # writes and copies in many odd-sized slices
        monkeypatch.setattr(shards, "_WRITE_CHUNK", chunk)
        monkeypatch.setattr(shards, "_COPY_CHUNK", chunk + 2)
    path, tensors = shard
    new = torch.randn(13, 8, generator=torch.Generator().manual_seed(1))
    change = write_shard(tmp_path / "out.safetensors", read_header(path),
                         {"embed.weight": ((13, 8), torch.float32, lambda: iter([new[:6], new[6:]]))})
    loaded = load_file(tmp_path / "out.safetensors")
    assert torch.equal(loaded["embed.weight"], new) and loaded["embed.weight"].dtype == torch.float32
    assert torch.equal(loaded["a.ids"], tensors["a.ids"]) and torch.equal(loaded["z.norm"], tensors["z.norm"])
    assert change == new.nbytes - tensors["embed.weight"].nbytes
    with safe_open(tmp_path / "out.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": "pt", "note": "kept"}
    assert int.from_bytes((tmp_path / "out.safetensors").read_bytes()[:8], "little") % 8 == 0


def test_corrupted_headers(shard, tmp_path):
    path, _ = shard
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    header["z.norm"]["shape"] = [6]
    text = json.dumps(header).encode()
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + length :])
    with pytest.raises(ShardError, match="tensor 'z.norm' does not fit its byte range"):
        read_header(broken)
    broken.write_bytes(data[:8] + b"{not json" + data[17:])
    with pytest.raises(ShardError, match="unreadable header"):
        read_header(broken)
    broken.write_bytes(data[:5])
    with pytest.raises(ShardError, match="header length \\d+ for a file of 5 bytes"):
        read_header(broken)


def test_copies_and_hard_links(shard, tmp_path):
    path, _ = shard
    copy_shard(path, tmp_path / "copy.safetensors", hardlink=False)
    copy_shard(path, tmp_path / "link.safetensors", hardlink=True)
    assert (tmp_path / "copy.safetensors").read_bytes() == path.read_bytes()
    assert not os.path.samefile(path, tmp_path / "copy.safetensors")
    assert os.path.samefile(path, tmp_path / "link.safetensors")
    elsewhere = Path("/dev/shm")
    if elsewhere.is_dir() and elsewhere.stat().st_dev != tmp_path.stat().st_dev:  # another filesystem: copied
        target = elsewhere / f"vocabshift-test-{os.getpid()}.safetensors"
        try:
            copy_shard(path, target, hardlink=True)
            assert target.read_bytes() == path.read_bytes() and not os.path.samefile(path, target)
        finally:
            target.unlink(missing_ok=True)


def test_gather_into_a_reused_buffer(tmp_path):
    tensors = {"embed.weight": torch.randn(40, 8)}
    save_file(tensors, tmp_path / "model.safetensors")
    matrix = Matrix(read_header(tmp_path / "model.safetensors"), "embed.weight")
    buffer = torch.empty(10 * matrix.row_bytes, dtype=torch.uint8)
    for ids in (torch.arange(0, 10), torch.tensor([39, 3, 3, 17]), torch.arange(30, 40)):
        assert torch.equal(matrix.gather(ids, buffer=buffer), tensors["embed.weight"][ids])


def test_non_finite_rows_are_found_and_named(tmp_path):
    generator = torch.Generator().manual_seed(0)
    base, instruct = torch.randn(40, 8, generator=generator), torch.randn(40, 8, generator=generator)
    base[[3, 31]] = torch.tensor([float("nan"), float("inf")]).repeat_interleave(4).reshape(2, 4).repeat(1, 2)
    for name, tensor in (("base", base), ("instruct", instruct)):
        save_file({"embed.weight": tensor.to(torch.bfloat16)}, tmp_path / f"{name}.safetensors")
    matrices = {name: Matrix(read_header(tmp_path / f"{name}.safetensors"), "embed.weight")
                for name in ("base", "instruct")}
    assert matrices["base"].non_finite_rows() == [3, 31] and matrices["instruct"].non_finite_rows() == []
    with pytest.raises(NonFiniteWeightsError, match=r"base's embed.weight rows \[3, 31\] \(2 in all, in .*base"
                       r"\.safetensors\) hold NaN or infinite values, which would make the fitted input map W non-"):
        fit_map("overlap", matrices["base"], matrices["instruct"], FitPairs(torch.arange(40)), side="input")
    with pytest.raises(NonFiniteWeightsError, match="the output came out non-finite although the rows it comes from"):
        refuse_non_finite({"instruct": matrices["instruct"]}, found="the output")
