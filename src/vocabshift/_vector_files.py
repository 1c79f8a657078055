"""Reading word-vector files for `load_word_vectors`: a fastText `.bin` model (its size checked against what its
header declares), a word2vec text `.vec` file (plain or gzip), and the metadata `train_word_vectors` writes beside
them. Every damaged input is a `WordVectorsError` naming the file."""

from __future__ import annotations

import gzip
import json
import mmap
import struct
from pathlib import Path
from typing import Any, get_args

import numpy as np

from .errors import WordVectorsError
from .vocab.forms import Family

__all__ = ["read_bin", "read_sidecar", "read_vec"]

_LEVELS = ("token", "word", "auto")
_FASTTEXT_MAGIC = 793712314
_ARGS = 12 * 4 + 8  # fastText's Args: twelve int32 and a double
_ARCHIVES = {b"\xfd7zXZ\x00": "xz", b"BZh": "bz2", b"PK\x03\x04": "zip", b"\x28\xb5\x2f\xfd": "zstd"}


def read_sidecar(path: Path) -> dict[str, Any]:
    """The metadata `<stem>.json` beside the vectors (level, family), or {} when there is none."""
    sidecar = path.with_suffix(".json")
    if not sidecar.is_file():
        return {}
    problem: str | None
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        problem = f"it is no UTF-8 JSON ({type(error).__name__}: {error})"
    else:
        problem = _sidecar_problem(meta)
        if problem is None:
            return meta
    raise WordVectorsError(
        f"{str(sidecar)!r}, beside word_vectors={str(path)!r}, is read as their metadata (what train_word_vectors "
        f"writes), but {problem}: delete or rename it (the level is then told from the keys), or fix it."
    )


def _sidecar_problem(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return f"it holds a {type(meta).__name__}, not an object"
    if meta.get("level", "auto") not in _LEVELS:
        return f"its 'level' is {meta['level']!r}, none of {', '.join(_LEVELS)}"
    if meta.get("family") not in (None, *get_args(Family)):
        return f"its 'family' is {meta['family']!r}, none of {', '.join(get_args(Family))}"
    return None


def read_bin(path: Path) -> tuple[list[str], np.ndarray, Any]:
    """Words, their vectors and the model of a fastText `.bin` file, after checking its size."""
    import fasttext

    _check_bin_size(path)
    try:
        model = fasttext.load_model(str(path))
    except (ValueError, RuntimeError, OSError) as error:
        raise WordVectorsError(f"word_vectors={str(path)!r} is not a fastText .bin model: {error}.") from None
    words = [word for word in model.get_words(on_unicode_error="replace") if word != "</s>"]
    vectors = (np.stack([model.get_word_vector(word) for word in words]) if words
               else np.zeros((0, model.get_dimension())))
    return words, vectors, model


def _check_bin_size(path: Path) -> None:
    """fastText reads a cut-off file without complaint (garbage vectors) and a damaged header into std::bad_alloc:
    the size its header, dictionary and matrix shapes declare must be there. Quantized models are not checked."""
    with open(path, "rb") as handle:
        size = path.stat().st_size
        if size < 8 or struct.unpack("<i", handle.read(4))[0] != _FASTTEXT_MAGIC:
            raise WordVectorsError(f"word_vectors={str(path)!r} is not a fastText .bin model (it lacks fastText's "
                                   "signature): pass a model saved by fastText, or a text .vec file named .vec.")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            needed = _declared_size(data)
    if needed is not None and needed > size:
        raise WordVectorsError(
            f"word_vectors={str(path)!r} is truncated or damaged: its header declares {needed:,} bytes, the file has "
            f"{size:,}. It was cut off while downloading or copying: download it again."
        )


def _declared_size(data: mmap.mmap) -> int | None:
    """The bytes a fastText model declares (one past the end when its dictionary runs past it); None for a
    quantized model."""
    position = 8 + _ARGS
    if len(data) < position + 28:
        return len(data) + 1
    words, _, _, _, pruned = struct.unpack_from("<iiiqq", data, position)
    position += 28
    for _ in range(max(words, 0)):
        end = data.find(b"\0", position)
        if end < 0:
            return len(data) + 1
        position = end + 1 + 9  # the word, its NUL, an int64 count and an int8 type
    position += 8 * max(pruned, 0)
    for _ in range(2):  # the input matrix, then the output matrix, each after a "quantized" flag
        if position + 17 > len(data):
            return position + 17
        if data[position]:
            return None
        rows, columns = struct.unpack_from("<qq", data, position + 1)
        position += 17 + 4 * max(rows, 0) * max(columns, 0)
    return position


def read_vec(path: Path) -> tuple[list[str], np.ndarray]:
    """word2vec text format, plain or gzip: an optional `count dim` header, then `word v1 ... vdim` per line."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    for magic, kind in _ARCHIVES.items():
        if head.startswith(magic):
            raise WordVectorsError(f"word_vectors={str(path)!r} is a {kind} archive: decompress it first (vocabshift "
                                   "reads .vec text, plain or gzip, and fastText .bin models).")
    opener: Any = gzip.open if head.startswith(b"\x1f\x8b") else open
    try:
        # utf-8-sig: a byte-order mark (an editor on Windows writes one) would make the count line no header
        with opener(path, "rt", encoding="utf-8-sig", errors="replace") as handle:
            return _parse_vec(handle, path)
    except (EOFError, gzip.BadGzipFile) as error:
        raise WordVectorsError(f"word_vectors={str(path)!r} cannot be decompressed ({type(error).__name__}: "
                               f"{error}): the file is damaged or cut short; download it again.") from None


def _parse_vec(handle: Any, path: Path) -> tuple[list[str], np.ndarray]:
    words, rows, dim, declared = [], [], None, None
    for number, line in enumerate(handle, 1):
        parts = line.rstrip("\n").rstrip(" ").split(" ")
        if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
            declared, dim = int(parts[0]), int(parts[1])
            continue
        dim = dim or len(parts) - 1
        if len(parts) - 1 != dim:
            raise WordVectorsError(
                f"word_vectors={str(path)!r} line {number} has {len(parts) - 1} values, but the vectors have "
                f"dimension {dim}: the file is damaged or mixes vectors of different models."
            )
        try:
            with np.errstate(over="ignore"):  # values beyond float32 become inf, which WordVectors names
                rows.append(np.asarray(parts[1:], dtype=np.float32))
        except ValueError:
            raise WordVectorsError(f"word_vectors={str(path)!r} line {number} holds a non-number.") from None
        words.append(parts[0])
    if declared is not None and declared != len(rows):
        raise WordVectorsError(
            f"word_vectors={str(path)!r} declares {declared:,} vectors in its first line but holds {len(rows):,}: "
            "it was cut off while downloading or copying (or edited without its header): download it again, or "
            "fix the count in the first line."
        )
    return words, np.stack(rows) if rows else np.zeros((0, dim or 0), dtype=np.float32)
