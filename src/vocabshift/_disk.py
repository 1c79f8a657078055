"""Writes that run out of room (a full disk, a quota, a file size limit), named as `OutputWriteError` with the folder
and the fix, instead of the raw error of whichever library was writing (safetensors, tokenizers, llama.cpp)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import OutputWriteError

__all__ = ["raise_if_out_of_room", "scratch_folder"]

_ROOM = {errno.ENOSPC: "free space on that disk", getattr(errno, "EDQUOT", errno.ENOSPC): "free space within your "
         "quota", errno.EFBIG: "raise `ulimit -f`"}
# Libraries that report the OS error in their message only: safetensors and tokenizers (Rust), llama.cpp's converter
# (a subprocess).
_CODE = re.compile(r"os error (\d+)|\[Errno (\d+)\]")


def raise_if_out_of_room(error: BaseException, target: Path, *, scratch: bool = False) -> None:
    """Raise `OutputWriteError` from `error` if it is a write that ran out of room in `target` (a `scratch` folder:
    vocabshift's own temporary files, moved with TMPDIR); otherwise return."""
    code = getattr(error, "errno", None)
    if code is None and (found := _CODE.search(str(error))):
        code = int(found.group(1) or found.group(2))
    if code not in _ROOM or isinstance(error, OutputWriteError):
        return
    free = shutil.disk_usage(target.parent).free / 2**20
    shards = ", pass a smaller max_shard_size" if code == errno.EFBIG and not scratch else ""
    place = "set TMPDIR to a folder on" if scratch else "write to"
    other = "a filesystem that holds larger files (FAT32: 4 GiB a file)" if code == errno.EFBIG else "another disk"
    what = f"vocabshift's scratch folder {str(target)!r}" if scratch else repr(str(target))
    kept = "" if scratch else f" (the temporary copy was removed; a previous {target.name} is as it was)"
    raise OutputWriteError(code, f"writing {what} failed: {os.strerror(code)} ({free:,.0f} MiB free on its device). "
                           f"Nothing is half-written{kept}. Fix: {_ROOM[code]}{shards}, or {place} {other}.") from error


@contextlib.contextmanager
def scratch_folder(prefix: str = "vocabshift-") -> Iterator[Path]:
    """`tempfile.TemporaryDirectory` (under TMPDIR), with a write that runs out of room there named as such."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        try:
            yield Path(folder)
        except Exception as error:
            raise_if_out_of_room(error, Path(folder), scratch=True)
            raise
