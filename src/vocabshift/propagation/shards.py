"""Safetensors shards without loading them: row reads with `pread`, shard rewrites tensor by tensor.

Headers are parsed and checked by `vocabshift.headers`. Reading rows of a matrix touches only
those rows' bytes; rewriting a shard copies the bytes of the tensors it keeps and streams the replaced ones block by
block, so memory stays at one block.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import UnsupportedModelError
from ..headers import ITEM_BITS, Header, corrupted

__all__ = ["Blocks", "Matrix", "copy_shard", "read_vector", "same_bytes", "write_shard"]

logger = logging.getLogger(__name__)

FLOAT_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
DTYPE_NAMES = {dtype: name for name, dtype in FLOAT_DTYPES.items()}
_COPY_CHUNK = 2**20
_WRITE_CHUNK = 256 * 2**10  # one 32 MB write() ran at 0.7 GB/s on ext4 here, 256 kB slices of it at 3.5 GB/s


def _pread_into(fd: int, view: memoryview, offset: int, path: Path) -> None:
    while len(view):
        count = os.preadv(fd, [view], offset)
        if count == 0:
            raise corrupted(path, "unexpected end of file")
        view, offset = view[count:], offset + count


class Matrix:
    """The rows of one 2-D floating-point tensor of a shard, read with `pread` (never mapped, never read whole).

    Args:
        header (`Header`): the shard's header.
        key (`str`): the tensor's name in the shard.
    """

    def __init__(self, header: Header, key: str) -> None:
        info = header.tensors[key]
        if info.dtype not in FLOAT_DTYPES or len(info.shape) != 2:
            raise UnsupportedModelError(f"{key} in {header.path} is a {info.dtype} tensor of shape {info.shape}: "
                                        "vocabshift propagates 2-D float embedding matrices only.")
        self.path, self.key, self.info = header.path, key, info
        self.rows, self.hidden = info.shape
        self.dtype = FLOAT_DTYPES[info.dtype]
        self.row_bytes = self.hidden * self.dtype.itemsize

    def gather(self, ids: torch.Tensor, *, buffer: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `ids` (any order, repeats allowed) in the stored dtype; consecutive ids are read in one call.

        With `buffer` (uint8, at least `len(ids) * row_bytes`), the rows are read into it: a loop over blocks that
        passes the same buffer touches its pages once (fresh memory costs a page fault per 4 kB). The result may
        then share its memory and is only valid until the buffer's next use.
        """
        unique, inverse = torch.unique(ids, return_inverse=True)
        if len(unique) == 0:
            return torch.empty((0, self.hidden), dtype=self.dtype)
        values = unique.numpy()
        if values[0] < 0 or values[-1] >= self.rows:
            raise IndexError(f"row ids {values[0]}..{values[-1]} outside the {self.rows} rows of {self.key}")
        breaks = np.flatnonzero(np.diff(values) != 1) + 1
        size = len(values) * self.row_bytes
        buffer = torch.empty(size, dtype=torch.uint8) if buffer is None else buffer[:size]  # not zero-filled
        view = buffer.numpy().data
        with open(self.path, "rb", buffering=0) as handle:
            for first, last in zip([0, *breaks], [*breaks, len(values)]):
                _pread_into(handle.fileno(), view[first * self.row_bytes : last * self.row_bytes],
                            self.info.begin + int(values[first]) * self.row_bytes, self.path)
        rows = buffer.view(self.dtype).view(len(values), self.hidden)
        return rows if len(values) == len(ids) and torch.equal(unique, ids) else rows[inverse]

    def read(self, start: int, stop: int, *, buffer: torch.Tensor | None = None) -> torch.Tensor:
        """Rows `[start, stop)` in the stored dtype (`buffer` as for `gather`)."""
        return self.gather(torch.arange(start, stop), buffer=buffer)

    def non_finite_rows(self) -> list[int]:
        """The ids of the rows holding NaN or infinite values, read in blocks of about 32 MB."""
        step = max(1, 32 * 2**20 // self.row_bytes)
        buffer = torch.empty(step * self.row_bytes, dtype=torch.uint8)
        bad = [start + (~torch.isfinite(self.read(start, min(start + step, self.rows), buffer=buffer)).all(dim=1))
               .nonzero().flatten() for start in range(0, self.rows, step)]
        return torch.cat(bad).tolist() if bad else []


def read_vector(header: Header, key: str) -> torch.Tensor:
    """A 1-D floating-point tensor of a shard (a head bias: one value per row), read whole.

    Raises:
        `UnsupportedModelError`: it is not a 1-D float tensor.
    """
    info = header.tensors[key]
    if info.dtype not in FLOAT_DTYPES or len(info.shape) != 1:
        raise UnsupportedModelError(f"{key} in {header.path} is a {info.dtype} tensor of shape {info.shape}: "
                                    "vocabshift propagates a 1-D float head bias only.")
    buffer = torch.empty(info.end - info.begin, dtype=torch.uint8)
    with open(header.path, "rb", buffering=0) as handle:
        _pread_into(handle.fileno(), buffer.numpy().data, info.begin, header.path)
    return buffer.view(FLOAT_DTYPES[info.dtype])


Blocks = Callable[[], Iterator[torch.Tensor]]


def _header_bytes(header: Header, replaced: dict[str, tuple[tuple[int, ...], str]]) -> bytes:
    entries: dict[str, Any] = {} if header.metadata is None else {"__metadata__": header.metadata}
    offset = 0
    for name, info in header.tensors.items():
        shape, dtype = replaced.get(name, (info.shape, info.dtype))
        size = math.prod(shape) * ITEM_BITS[dtype] // 8 if name in replaced else info.end - info.begin
        entries[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text


def _write_all(target: int, data: memoryview) -> None:
    """Write `data` to the file descriptor `target` in slices (see `_WRITE_CHUNK`), retrying partial writes."""
    data = data.cast("B")
    while len(data):
        data = data[os.write(target, data[:_WRITE_CHUNK]) :]


def _copy_range(source: int, target: int, begin: int, end: int, path: Path) -> None:
    buffer = bytearray(min(_COPY_CHUNK, end - begin))
    while begin < end:
        view = memoryview(buffer)[: min(len(buffer), end - begin)]
        _pread_into(source, view, begin, path)
        _write_all(target, view)
        begin += len(view)


def same_bytes(first: Path, first_begin: int, second: Path, second_begin: int, length: int) -> bool:
    """Whether `length` bytes of two files, from the given offsets, are the same (read in 1 MB chunks, stopping
    at the first difference)."""
    buffers = [bytearray(min(_COPY_CHUNK, length)) for _ in range(2)]
    with open(first, "rb", buffering=0) as a, open(second, "rb", buffering=0) as b:
        for offset in range(0, length, _COPY_CHUNK):
            size = min(_COPY_CHUNK, length - offset)
            views = [memoryview(buffer)[:size] for buffer in buffers]
            _pread_into(a.fileno(), views[0], first_begin + offset, first)
            _pread_into(b.fileno(), views[1], second_begin + offset, second)
            if views[0] != views[1]:
                return False
    return True


def write_shard(target: Path, header: Header, replaced: dict[str, tuple[tuple[int, ...], torch.dtype, Blocks]]
                ) -> int:
    """Write `header`'s shard to `target`, tensors in the same order, those of `replaced` streamed from blocks.

    Args:
        target (`Path`): the new file.
        header (`Header`): the source shard; tensors not in `replaced` are copied byte for byte.
        replaced: tensor name -> (new shape, dtype, a function returning the blocks of rows, in order).

    Returns:
        `int`: the change in the total size of the tensors' bytes.
    """
    names = {name: (shape, DTYPE_NAMES[dtype]) for name, (shape, dtype, _) in replaced.items()}
    change = 0
    with open(header.path, "rb", buffering=0) as source, open(target, "wb", buffering=0) as out:
        _write_all(out.fileno(), memoryview(_header_bytes(header, names)))
        for name, info in header.tensors.items():
            if name not in replaced:
                _copy_range(source.fileno(), out.fileno(), info.begin, info.end, header.path)
                continue
            shape, dtype, blocks = replaced[name]
            written = sum(_write_block(out.fileno(), block.to(dtype)) for block in blocks())
            if written != math.prod(shape) * dtype.itemsize:
                raise RuntimeError(f"{name}: {written} bytes written for a {shape} {dtype} tensor")
            change += written - (info.end - info.begin)
    return change


def _write_block(out: int, block: torch.Tensor) -> int:
    data = block.contiguous().view(torch.uint8).numpy()
    _write_all(out, data.data)
    return data.nbytes


def copy_shard(source: Path, target: Path, *, hardlink: bool) -> None:
    """Copy a shard byte for byte, or hard-link it when asked and both are on the same filesystem."""
    real = Path(os.path.realpath(source))  # Hub cache snapshots hold symlinks to blobs
    if hardlink and real.stat().st_dev == target.parent.stat().st_dev:
        os.link(real, target)
        return
    if hardlink:
        logger.info("%s is on another filesystem than %s: copying it instead of hard-linking.", real, target.parent)
    shutil.copyfile(real, target)
