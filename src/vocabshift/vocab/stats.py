"""Text statistics of tokenizers: tokens per word, segmentation changes, writing scripts."""

from __future__ import annotations

import collections
import functools
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from .._typing import TokenizerLike
from ..corpus import text_lines
from .load import load_tokenizer

__all__ = ["bound_to_script", "changed_share", "dominant_script", "script_of", "scripts_in", "tokens_per_word"]

# Unicode character names that do not start with their script's name.
_SCRIPT_ALIASES = {"CJK": "HAN", "HIRAGANA": "JAPANESE", "KATAKANA": "JAPANESE", "KATAKANA-HIRAGANA": "JAPANESE"}


def _encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def tokens_per_word(tokenizer: TokenizerLike, texts: Sequence[str]) -> float:
    """Tokens per whitespace-separated word of `texts` (the tokenizer's fertility).

    Raises:
        `InvalidTokenizerError`, `TokenizerLoadError`: `tokenizer` is not a fast tokenizer (or its path).
        `CorpusError`: `texts` is not a collection of lines with text.
    """
    tokenizer = load_tokenizer(tokenizer, argument="tokenizer")
    texts = text_lines(texts)
    words = sum(len(text.split()) for text in texts)
    if not words:
        return float("nan")
    return sum(len(ids) for ids in _encode(tokenizer, texts)) / words


def changed_share(before: Any, after: Any, texts: Sequence[str]) -> float:
    """Share of `texts` whose token ids differ between tokenizer `before` and tokenizer `after`."""
    if not texts:
        return float("nan")
    changed = sum(a != b for a, b in zip(_encode(before, texts), _encode(after, texts)))
    return changed / len(texts)


@functools.lru_cache(maxsize=4096)
def script_of(char: str) -> str | None:
    """The writing script of a letter (e.g. 'CYRILLIC', 'LATIN', 'DEVANAGARI'), None for non-letters."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    if not name:
        return None
    first = name.split(" ", 1)[0]
    return _SCRIPT_ALIASES.get(first, first)


def scripts_in(text: str) -> set[str]:
    """The scripts of the letters in `text`."""
    return {script for script in map(script_of, text) if script}


def dominant_script(texts: Iterable[str]) -> str | None:
    """The script of most letters in `texts`, None if they hold no letter."""
    counts = collections.Counter(script for text in texts for script in map(script_of, text) if script)
    return counts.most_common(1)[0][0] if counts else None


def bound_to_script(data: bytes, scripts: frozenset[str]) -> bool:
    """Can the bytes `data` occur only in text holding a letter of one of `scripts`?

    True when `data` holds a whole letter of one of them, or ends with the first bytes of a UTF-8 character that can
    only be a letter of them (byte-level BPE builds Cyrillic from such pieces: a space and the lead byte 0xD0,
    which starts only Cyrillic letters).
    """
    if scripts_in(data.decode("utf-8", errors="ignore")) & scripts:
        return True
    tail = _partial_tail(data)
    found = _tail_scripts(tail) if tail else None
    return bool(found and found <= scripts)


def _partial_tail(data: bytes) -> bytes:
    """The last character's bytes when `data` ends before that character does, else b''."""
    for start in range(len(data) - 1, max(len(data) - 4, -1), -1):
        byte = data[start]
        if byte & 0xC0 != 0x80:  # not a continuation byte: a lead byte (or ASCII)
            needed = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return data[start:] if len(data) - start < needed else b""
    return b""


@functools.lru_cache(maxsize=4096)
def _tail_scripts(tail: bytes) -> frozenset[str] | None:
    """The scripts of the letters a character beginning with `tail` can be (None when too many to list)."""
    length = 2 if tail[0] >> 5 == 0b110 else 3 if tail[0] >> 4 == 0b1110 else 4
    free = 6 * (length - len(tail))
    value = tail[0] & (0x7F >> length)
    for byte in tail[1:]:
        value = (value << 6) | (byte & 0x3F)
    low = value << free
    if free > 12:
        return None
    return frozenset(filter(None, (script_of(chr(code)) for code in range(low, low + (1 << free))
                                   if code < 0xD800 or 0xDFFF < code < 0x110000)))  # F4 90.. and F5..F7: none
