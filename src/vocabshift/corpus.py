"""Text corpora given to vocabshift: a UTF-8 file (one document per line; plain, xz, gzip or bz2) or a list of
strings, checked once. The one reader of text files: fastText corpora, the CLI's text arguments, source lines."""

from __future__ import annotations

import bz2
import functools
import gzip
import hashlib
import io
import lzma
import os
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .arguments import is_collection, lone_surrogate, unexpanded_home
from .errors import CorpusError

__all__ = ["corpus_fingerprint", "documents", "read_texts", "shipped_english", "source_lines"]


@functools.lru_cache(maxsize=1)
def shipped_english() -> tuple[str, ...]:
    """The 1,500 English lines shipped with vocabshift (`vocabshift/data/english.txt.xz`, sources in its README)."""
    with resources.files("vocabshift").joinpath("data/english.txt.xz").open("rb") as raw:
        return tuple(lzma.decompress(raw.read()).decode("utf-8").splitlines())


def source_lines(source_texts: Any) -> list[str]:
    """Source-language lines to check segmentation on: the given ones, or the shipped English lines for None.

    Raises:
        `CorpusError`: not a non-empty list of strings.
    """
    if source_texts is None:
        return list(shipped_english())
    lines = list(source_texts) if is_collection(source_texts) and not isinstance(source_texts, os.PathLike) else None
    if not lines or not all(isinstance(line, str) for line in lines):
        raise CorpusError(
            f"source_texts is a {type(source_texts).__name__} ({str(source_texts)[:60]!r}): pass a non-empty list "
            "of source-language lines (strings), or None for the English lines shipped with vocabshift."
        )
    return lines


def text_lines(texts: Any, *, name: str = "texts") -> list[str]:
    """`texts` as a list of lines, checked: a collection of strings with some text in it.

    Raises:
        `CorpusError`: a string or path (it would be read as its characters), not iterable, a non-string item, or
            no text at all.
    """
    if isinstance(texts, (str, bytes, os.PathLike)):
        raise CorpusError(
            f"{name} is a {type(texts).__name__} ({str(texts)[:60]!r}), not a collection of lines: it would be read "
            "as its characters. Pass the lines, e.g. vocabshift.corpus.read_texts('corpus.txt') or "
            "open(path).read().splitlines()."
        )
    if isinstance(texts, Mapping):  # what a dataset's ds[:n] gives: iterating it would read the column names
        raise CorpusError(f"{name} is a {type(texts).__name__} (a dataset's batch of columns?): pass its column of "
                          "lines, e.g. batch['text'].")
    if not is_collection(texts):
        raise CorpusError(f"{name} is a {type(texts).__name__}: pass an iterable of strings (lines of text).")
    lines = list(texts)
    bad = next((index for index, line in enumerate(lines) if not isinstance(line, str)), None)
    if bad is not None:  # an index: the item itself may be None
        raise CorpusError(f"{name} holds a {type(lines[bad]).__name__} ({lines[bad]!r:.60}): pass strings only.")
    if odd := next(((index, why) for index, line in enumerate(lines) if (why := lone_surrogate(line))), None):
        raise CorpusError(f"{name}[{odd[0]}] {odd[1]}")
    if not any(line.strip() for line in lines):
        raise CorpusError(f"{name} holds no text ({len(lines)} items, all empty): pass lines of text.")
    return lines


def documents(corpus: Any) -> Iterator[str]:
    """The corpus's documents (lines of a file, or items of a list), checked to be text."""
    if isinstance(corpus, (str, os.PathLike)):
        yield from _file_lines(Path(corpus))
    elif isinstance(corpus, Sequence) and not isinstance(corpus, (bytes, bytearray)):
        for number, item in enumerate(corpus, 1):
            if not isinstance(item, str):
                raise CorpusError(
                    f"corpus item {number} is a {type(item).__name__}, not str: decode bytes first, e.g. "
                    "item.decode('utf-8') (or the encoding the text was written in)."
                )
            if odd := lone_surrogate(item):
                raise CorpusError(f"corpus item {number} {odd}")
            yield item
    else:
        raise CorpusError(
            f"corpus is a {type(corpus).__name__}: pass the path of a UTF-8 text file (one document per line) "
            "or a list of strings."
        )


def read_texts(path: str | os.PathLike, *, name: str = "texts") -> list[str]:
    """The non-blank lines of a UTF-8 text file, one document per line: plain, or xz-, gzip- or bz2-compressed (told
    by its first bytes). A pipe (`<(head -1000 corpus.txt)`) or `"-"` (standard input) is read once, whole.

    Raises:
        `CorpusError`: the file is missing, not UTF-8, compressed in another format, damaged or cut short (or not xz
            when named `.xz`), or holds no text.
    """
    path = Path(path)
    if str(path) != "-" and not path.exists() or path.is_dir():
        what = "is a folder" if path.is_dir() else f"does not exist{unexpanded_home(path)}"
        raise CorpusError(f"{name}={str(path)!r} {what}: pass a UTF-8 text file (.txt, or .txt.xz / .gz / .bz2).")
    lines = [line for line in _file_lines(path, name=name, stream=True) if line.strip()]
    if not lines:
        raise CorpusError(f"{name}={str(path)!r} holds no text: pass one document per line.")
    return lines


def _file_lines(path: Path, *, name: str = "corpus", stream: bool = False) -> Iterator[str]:
    """The decoded lines of a file; with `stream`, also of a pipe or "-" (standard input), which are read whole
    first (they cannot be read twice, and their first bytes tell the format)."""
    if not path.is_file() and not stream:
        what = "is a pipe or device, which can be read only once" if path.exists() else "is not a file"
        raise CorpusError(f"{name}={str(path)!r} {what}: pass the path of a UTF-8 text file or a list of strings.")
    if path.is_file():
        source: Path | io.BytesIO = path
        head = _head(path)
    else:
        data = _read_stream(path)
        source, head = io.BytesIO(data), data[:6]
    opener = _opener(head, path, name)
    try:
        with opener(source, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                yield _decoded(raw, number, path, name, compressed=opener is not _plain)
    except (lzma.LZMAError, zlib.error, EOFError, OSError) as error:  # gzip's BadGzipFile, bz2's bad data: OSErrors
        if opener is _plain:
            raise
        raise CorpusError(f"{name}={str(path)!r} cannot be decompressed ({type(error).__name__}: {error}): the file "
                          "is damaged or cut short; copy or download it again.") from None


def _read_stream(path: Path) -> bytes:
    if str(path) == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as handle:
        return handle.read()


def _head(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(6)


def _plain(source: Path | io.BytesIO, mode: str) -> Any:
    return source if isinstance(source, io.BytesIO) else open(source, mode)


# Compressed files are read by their first bytes, whatever their name; formats the standard library lacks are named.
_READERS: dict[bytes, Callable[..., Any]] = {b"\xfd7zXZ\x00": lzma.open, b"\x1f\x8b": gzip.open,
                                             **{b"BZh%d" % level: bz2.open for level in range(1, 10)}}
_UNREAD = {b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip", b"7z\xbc\xaf\x27\x1c": "7z"}


def _opener(head: bytes, path: Path, name: str) -> Callable[..., Any]:
    for magic, kind in _UNREAD.items():
        if head.startswith(magic):
            raise CorpusError(f"{name}={str(path)!r} is a {kind} archive: decompress it first (vocabshift reads plain, "
                              "xz, gzip and bz2 text).")
    if path.suffix == ".xz" and not head.startswith(b"\xfd7zXZ\x00"):
        raise CorpusError(f"{name}={str(path)!r} is named .xz but is not xz-compressed: fix the name.")
    return next((reader for magic, reader in _READERS.items() if head.startswith(magic)), _plain)


# byte-order marks of other encodings than UTF-8, UTF-32's first (UTF-16's little-endian one begins it)
_MARKS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


def _decoded(raw: bytes, number: int, path: Path, name: str, *, compressed: bool) -> str:
    """Line `number` as text. Damage in a compressed file shows as bad bytes before the checksum that would name it."""
    kind = next((kind for mark, kind in _MARKS.items() if raw.startswith(mark)), None) if number == 1 else None
    if kind is not None:  # of the text itself, compressed or not
        raise CorpusError(f"{name}={str(path)!r} is {kind} text (it starts with a {kind} byte-order mark): convert it "
                          f"to UTF-8 first, e.g. `iconv -f {kind.lower()} -t utf-8 in.txt > out.txt`.")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        fix = ("It may be damaged: test it (e.g. `gzip -t` or `xz -t`) and copy or download it again if so; else "
               "convert" if compressed else "Convert")
        raise CorpusError(
            f"{name}={str(path)!r} is not UTF-8 text: line {number} has byte 0x{raw[error.start]:02x} at "
            f"byte {error.start + 1}. {fix} it first, e.g. `iconv -f cp1251 -t utf-8 in.txt > out.txt`."
        ) from None
    if "\x00" in line:
        raise CorpusError(
            f"{name}={str(path)!r} line {number} holds NUL characters (UTF-16 text?): convert it to UTF-8, "
            "e.g. `iconv -f utf-16 -t utf-8 in.txt > out.txt`."
        )
    return (line.removeprefix("\ufeff") if number == 1 else line).rstrip("\r\n")  # a UTF-8 byte-order mark


def corpus_fingerprint(corpus: Any) -> tuple[str, int]:
    """SHA-256 of the corpus's documents (joined by newlines) and the number of non-blank documents.

    Raises:
        `CorpusError`: if the corpus is not text, not UTF-8, or holds no text at all.
    """
    digest, count = hashlib.sha256(), 0
    for document in documents(corpus):
        digest.update(document.encode("utf-8") + b"\n")
        count += bool(document.strip())
    if not count:
        name = repr(str(corpus)) if isinstance(corpus, (str, os.PathLike)) else f"a {type(corpus).__name__}"
        raise CorpusError(f"corpus ({name}) holds no text: pass target-language text, one document per line.")
    return digest.hexdigest(), count
