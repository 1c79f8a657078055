"""Long id lists of the record (decompositions, shared pairs), packed so that `print(model.config)` stays readable:
zlib + base64 of little-endian int32."""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Sequence

import numpy as np

from ._record_values import damaged_record

__all__ = ["id_ranges", "pack_ids", "unpack_ids"]


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
        raise damaged_record(f"a packed id list is corrupted ({type(error).__name__}: {error})") from None


def id_ranges(ids: Sequence[int]) -> list[list[int]]:
    """Sorted ids as `[start, stop)` ranges: `[3, 4, 5, 9]` -> `[[3, 6], [9, 10]]`."""
    ranges: list[list[int]] = []
    for i in ids:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return ranges
