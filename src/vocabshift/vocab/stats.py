"""Text statistics of tokenizers: tokens per word, segmentation changes, writing scripts."""

from __future__ import annotations

import collections
import functools
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["changed_share", "dominant_script", "script_of", "scripts_in", "tokens_per_word"]

# Unicode character names that do not start with their script's name.
_SCRIPT_ALIASES = {"CJK": "HAN", "HIRAGANA": "JAPANESE", "KATAKANA": "JAPANESE"}


def _encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def tokens_per_word(tokenizer: Any, texts: Sequence[str]) -> float:
    """Tokens per whitespace-separated word of `texts` (the tokenizer's fertility)."""
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
    first = name.split(" ", 1)[0] if name else None
    return _SCRIPT_ALIASES.get(first, first)


def scripts_in(text: str) -> set[str]:
    """The scripts of the letters in `text`."""
    return {script for script in map(script_of, text) if script}


def dominant_script(texts: Iterable[str]) -> str | None:
    """The script of most letters in `texts`, None if they hold no letter."""
    counts = collections.Counter(script for text in texts for script in map(script_of, text) if script)
    return counts.most_common(1)[0][0] if counts else None
