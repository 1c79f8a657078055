"""Text files as vocabshift reads them: plain or compressed (told by the first bytes), refused with the cause."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
import threading

import pytest

from vocabshift.corpus import documents, read_texts
from vocabshift.errors import CorpusError

LINES = ["привет мир", "", "xin chào thế giới", "hello world"]
TEXT = "\n".join(LINES).encode("utf-8")


def _flipped(data: bytes, position: int) -> bytes:
    """`data` with the byte at `position` inverted: damage in the deflate stream that zlib stops at."""
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]


READABLE = [("a.txt", TEXT), ("a.txt.xz", lzma.compress(TEXT)), ("a.txt.gz", gzip.compress(TEXT, mtime=0)),
            ("a.txt.bz2", bz2.compress(TEXT)), ("gzip-named.txt", gzip.compress(TEXT, mtime=0))]
# Ids by file name: pytest-xdist workers must collect the same test names.
UNREAD = [
    ("cut.txt.xz", lzma.compress(TEXT * 50)[:60], "cannot be decompressed \\(EOFError: .*cut short; copy or download"),
    ("cut.txt.gz", gzip.compress(TEXT * 50, mtime=0)[:40], "cannot be decompressed \\(EOFError"),
    ("bad.txt.bz2", b"BZh9" + b"\x00" * 40, "cannot be decompressed \\(OSError"),
    ("bad.txt.gz", _flipped(gzip.compress(TEXT * 50, mtime=0), 10), "cannot be decompressed \\(error: Error -3"),
    ("cp1251.txt.gz", gzip.compress("привет".encode("cp1251")), "is not UTF-8 text: line 1 has byte 0xef at byte 1. It "
     "may be damaged: test it \\(e.g. `gzip -t`.* else convert it first, e.g. `iconv -f cp1251"),
    ("plain.txt.xz", TEXT, "is named .xz but is not xz-compressed: fix the name"),
    ("a.zip", b"PK\x03\x04" + b"\x00" * 30, "is a zip archive: decompress it first"),
    ("a.txt.zst", b"\x28\xb5\x2f\xfd" + b"\x00" * 30, "is a zstd archive"),
]


@pytest.mark.parametrize(("name", "data"), READABLE, ids=[case[0] for case in READABLE])
def test_plain_and_compressed_files_read_alike(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)
    assert read_texts(tmp_path / name) == [line for line in LINES if line]


def test_text_that_starts_like_a_magic_number_is_text(tmp_path):
    (tmp_path / "a.txt").write_text("BZh is not bz2\nline two\n", encoding="utf-8")
    assert read_texts(tmp_path / "a.txt") == ["BZh is not bz2", "line two"]


@pytest.mark.parametrize(("name", "data", "match"), UNREAD, ids=[case[0] for case in UNREAD])
def test_damaged_or_unread_compression_is_named(tmp_path, name, data, match):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(CorpusError, match=f"texts='.*{name}' {match}"):
        read_texts(tmp_path / name)


def _fifo(tmp_path, data):
    """A named pipe that a thread writes `data` into once (as `<(command)` gives one)."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    writer = threading.Thread(target=path.write_bytes, args=(data,), daemon=True)
    writer.start()
    return path, writer


@pytest.mark.parametrize("data", [TEXT, gzip.compress(TEXT, mtime=0)], ids=["plain", "gzip"])
def test_a_pipe_is_read_once_whole(tmp_path, data):
    path, writer = _fifo(tmp_path, data)
    assert read_texts(path) == [line for line in LINES if line]
    writer.join(timeout=10)


def test_a_dash_reads_standard_input(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(bz2.compress(TEXT))))
    assert read_texts("-") == [line for line in LINES if line]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(CorpusError, match="texts='-' holds no text"):
        read_texts("-")


def test_a_corpus_read_twice_refuses_a_pipe(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # refused before it is opened: no writer needed
    with pytest.raises(CorpusError, match="pipe' is a pipe or device, which can be read only once"):
        list(documents(tmp_path / "pipe"))


def test_a_utf8_byte_order_mark_is_not_text(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbf" + TEXT)  # as Windows editors save UTF-8
    assert read_texts(tmp_path / "a.txt") == [line for line in LINES if line]


@pytest.mark.parametrize(("encoding", "compress"), [("utf-16", None), ("utf-16-le", None), ("utf-16-be", None),
                                                    ("utf-32", None), ("utf-32-be", None), ("utf-16", gzip.compress),
                                                    ("utf-32", lzma.compress)])
def test_utf16_and_utf32_text_is_named_with_its_fix(tmp_path, encoding, compress):
    """Also compressed, and UTF-32, whose little-endian mark begins with UTF-16's: iconv -f utf-16 garbled it."""
    text = "\n".join(LINES) if encoding in ("utf-16", "utf-32") else "\ufeff" + "\n".join(LINES)  # marks written
    (tmp_path / "a.txt").write_bytes((compress or bytes)(text.encode(encoding)))
    kind = encoding[:6].upper()
    with pytest.raises(CorpusError, match=f"a.txt' is {kind} text .*iconv -f {kind.lower()} -t utf-8"):
        read_texts(tmp_path / "a.txt")
