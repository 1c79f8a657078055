"""Static vectors of words or tokens (fastText) for the methods that need them: load and look up (`word_vector_training`
trains and caches them).

Two kinds, as FOCUS uses them: *token level* (fastText trained on a corpus cut into tokens by a tokenizer, keys are
that tokenizer's token strings such as `Ġпр` or `▁при`) and *word level* (fastText on plain text, or a pretrained
`cc.<lang>.300.bin` / `.vec`, keys are words). Training uses one thread, so the same corpus and settings give the
same vectors; trained models are cached by the corpus's fingerprint and the settings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Literal, get_args

import numpy as np
import torch

from ._vector_files import read_bin, read_sidecar, read_vec
from .arguments import check_choice, check_path
from .errors import (
    InvalidArgumentTypeError,
    WordVectorsError,
    WordVectorsNotFoundError,
)
from .vocab.forms import Family, TokenForm, native_string

__all__ = ["WordVectors", "load_word_vectors"]

logger = logging.getLogger(__name__)

Level = Literal["token", "word", "auto"]
_MARKERS = ("\u2581", "\u0120", "##")  # SentencePiece / byte-level word start, WordPiece continuation


class WordVectors:
    """Static vectors, one per word (word level) or per token string of a tokenizer (token level).

    Args:
        words (`Sequence[str]`): the vocabulary, most frequent first.
        vectors (`np.ndarray` or `torch.Tensor`): `(len(words), dim)` rows (kept as float32).
        level (`str`, defaults to `"word"`): `"token"`, `"word"`, or `"auto"` (unknown, e.g. a file without the
            metadata `train_word_vectors` writes: token level when at least 10% of the keys start with a token
            marker such as `▁`, `Ġ` or `##`).
        family (`str`, *optional*): at token level, the tokenizer family of the keys (`"bytelevel"`,
            `"sentencepiece"`, `"wordpiece"`); None means the family of the new tokenizer.
        source (`str`, *optional*): where the vectors come from, for the extension record.
        model (*optional*): the fastText model, to compose vectors of unseen words from character n-grams.

    Raises:
        `WordVectorsError`: if `words` is not a list of strings, or `vectors` not a 2-D array of finite numbers
            with one row per word.
        `InvalidArgumentError`: another `level` or `family`. `InvalidArgumentTypeError`: a `model` without
            `get_word_vector` (no fastText model).
    """

    def __init__(self, words: Sequence[str], vectors: Any, *, level: Level = "word", family: Family | None = None,
                 source: str = "", model: Any = None) -> None:
        check_choice(level, ("token", "word", "auto"), name="level")
        if isinstance(words, str) or not isinstance(words, Sequence) or not all(isinstance(w, str) for w in words):
            raise WordVectorsError(f"words={words!r:.60} is invalid: pass a list of strings, one per row of vectors.")
        if isinstance(vectors, torch.Tensor):  # any dtype or device, a parameter too
            vectors = vectors.detach().float().cpu().numpy()
        try:
            with np.errstate(over="ignore"):  # values beyond float32 become inf, which _check_finite names
                vectors = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise WordVectorsError(f"vectors is a {type(vectors).__name__} that is no matrix of numbers ({error}): "
                                   "pass a 2-D array or tensor, one row per word.") from None
        if vectors.ndim != 2 or vectors.shape[0] != len(words) or vectors.shape[1] == 0:
            raise WordVectorsError(
                f"Word vectors{f' from {source}' if source else ''} have shape {vectors.shape} for {len(words)} "
                "words: pass one row of the same non-zero dimension per word."
            )
        _check_finite(words, vectors, source)
        if family is not None:
            check_choice(family, get_args(Family), name="family")
        if model is not None and not callable(getattr(model, "get_word_vector", None)):  # read when composing
            raise InvalidArgumentTypeError(f"model is a {type(model).__name__}: pass the fastText model the vectors "
                                           "come from (fasttext.load_model(path)), or None.")
        self.words, self.vectors, self.level, self.family = list(words), vectors, level, family
        self.source, self._model = source, model
        self._index = _first_rows(self.words, source)

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def __len__(self) -> int:
        return len(self.words)

    def __repr__(self) -> str:
        return f"WordVectors({len(self)} {self.level}s, dim={self.dim}, source={self.source!r})"

    def lookup(self, keys: Sequence[str | None], *, compose: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Vectors of `keys` and a boolean mask of those that have one (the others are zero rows).

        A key has a vector when its row in the vocabulary is not zero (a zero row, such as a padding word's in a .vec
        file, has no direction to find neighbors by), or, with `compose=True` and a fastText model, when its
        character n-grams give a non-zero vector (how fastText embeds unseen words).
        """
        index = np.array([-1 if key is None else self._index.get(key, -1) for key in keys], dtype=np.int64)
        found = index >= 0
        out = np.zeros((len(keys), self.dim), dtype=np.float32)
        out[found] = self.vectors[index[found]]
        found &= out.any(axis=1)
        if compose and self._model is not None:
            for row in np.flatnonzero(~found).tolist():
                key = keys[row]
                if key is not None:
                    out[row] = self._model.get_word_vector(key)
                    found[row] = bool(np.any(out[row]))
        return out, found

    def token_keys(self, forms: Sequence[TokenForm], family: Family, level: Literal["token", "word"]
                   ) -> list[str | None]:
        """The key of each token: its token string in `family` (token level) or its text without the word-start
        space (word level); None for special tokens and tokens that are not whole UTF-8 text."""
        keys: list[str | None] = []
        for form in forms:
            if form.special or form.added or not form.surface:
                keys.append(None)
            elif level == "token":
                keys.append(native_string(form, family))
            else:
                text = form.text.strip()
                keys.append(text if text and "\ufffd" not in text else None)
        return keys

    def token_vectors(self, forms: Sequence[TokenForm], family: Family) -> tuple[np.ndarray, np.ndarray, str]:
        """Vectors of token forms, the mask of tokens that have one, and the level used (`"auto"` resolved)."""
        level = self.level
        if level == "auto":  # a file without metadata: token strings carry word-start or continuation markers
            marked = sum(word.startswith(_MARKERS) for word in self.words)
            level = "token" if marked >= 0.1 * len(self) else "word"
            logger.info("Word vectors %s read at %s level (%d of %d keys marked).", self.source, level, marked,
                        len(self))
        keys = self.token_keys(forms, self.family or family, level)
        vectors, found = self.lookup(keys, compose=level == "word")
        return vectors, found, level

    def describe(self) -> dict[str, Any]:
        """A JSON summary for the extension record."""
        return {"source": self.source, "level": self.level, "dim": self.dim, "size": len(self)}


def _check_finite(words: Sequence[str], vectors: np.ndarray, source: str) -> None:
    """Refuse NaN or infinite rows (a damaged file, a value beyond float32 such as 1e40): nearest-neighbour and
    least-squares methods fail on them far from the cause. Row sums in float64 cannot overflow from finite float32
    values, and need no copy of the matrix."""
    bad = np.flatnonzero(~np.isfinite(vectors.sum(axis=1, dtype=np.float64)))
    if len(bad):
        named = ", ".join(f"{words[i]!r} (row {i})" for i in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise WordVectorsError(
            f"Word vectors{f' from {source}' if source else ''} hold NaN or infinite values (or values beyond float32, "
            f"such as 1e40) in {len(bad)} rows: {named}. Download or train them again, or drop those words."
        )


def _first_rows(words: Sequence[str], source: str) -> dict[str, int]:
    """Each word's row: its first, the most frequent's, where a word repeats (a hand-made or concatenated file), as
    gensim reads such files; a dict built plainly would keep the last."""
    index: dict[str, int] = {}
    for i, word in enumerate(words):
        index.setdefault(word, i)
    if len(index) < len(words):
        logger.warning("Word vectors %s hold %d repeated words (e.g. %r): each is read from its first row.",
                       source or "(given)", len(words) - len(index),
                       next(w for i, w in enumerate(words) if index[w] != i))
    return index


def load_word_vectors(path: str | os.PathLike, *, level: Level | None = None) -> WordVectors:
    """Load fastText vectors from a `.bin` model or a text `.vec` file (word2vec text format).

    Args:
        path: the file.
        level (`str`, *optional*): `"token"`, `"word"` or `"auto"`; defaults to what `train_word_vectors` recorded
            next to the file, else `"auto"`.

    Raises:
        `WordVectorsNotFoundError`: if the file does not exist.
        `WordVectorsError`: if it is a folder, not a fastText model, a model shorter than its header declares
            (cut off), a `.vec` file (plain or gzip) without the rows its header declares, or with NaN or infinite
            values; or if the metadata `<stem>.json` beside it is not what `train_word_vectors` writes.
        `InvalidArgumentError`: another `level`, or a `path` that is no path (`InvalidArgumentTypeError`).
    """
    if level is not None:
        check_choice(level, ("token", "word", "auto"), name="level")
    path = check_path(path, name="path").expanduser()
    if path.is_dir():
        raise WordVectorsError(f"word_vectors={str(path)!r} is a folder: pass the fastText .bin or .vec file in it.")
    if not path.is_file():
        raise WordVectorsNotFoundError(
            f"word_vectors={str(path)!r} does not exist: pass a fastText .bin or .vec file, a WordVectors, or "
            "corpus=... to train vectors."
        )
    meta = read_sidecar(path)
    level = level or meta.get("level", "auto")
    if path.suffix == ".bin":
        words, vectors, model = read_bin(path)
        model = None if level == "token" else model  # only word level composes unseen keys
    else:
        (words, vectors), model = read_vec(path), None
    return WordVectors(words, vectors, level=level, family=meta.get("family"), source=str(path), model=model)
