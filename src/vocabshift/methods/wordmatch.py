"""What OFA and HyperOFA share: which words each token appears in, and the SVD factorization of a matrix.

A word of the (multilingual) word-vector vocabulary is tokenized as it appears in text: alone, after a space, and
capitalized after a space, as OFA does; every token of those segmentations is matched to the word. A token's
word-space vector is the mean of its matched words' vectors (OFA); HyperOFA feeds the matched words themselves to a
hypernetwork.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from huggingface_hub.utils import tqdm

from .._typing import Tokenizer
from ..errors import WordVectorsError
from ..wordvectors import WordVectors
from .base import InitContext, precise, resolved

__all__ = ["Factorization", "WordSets", "factorize", "match_words", "multilingual_vectors", "token_word_sets"]

_BATCH = 4096
_BLOCK = 8192


def multilingual_vectors(word_vectors: Any, method: str) -> WordVectors:
    """`word_vectors` (loaded by `resolve_inputs`), once they are known to be word level.

    Raises:
        `WordVectorsError`: if the vectors are token level (OFA matches words, not token strings).
        `MethodOptionTypeError`: if they were not loaded (see `base.resolved`).
    """
    vectors = resolved(word_vectors, WordVectors, option="word_vectors", method=method)
    if vectors.level == "token":
        raise WordVectorsError(
            f"Method {method!r} needs word-level multilingual vectors (words of the source and target languages in "
            f"one space), but {vectors!r} is token level: train them with train_word_vectors(corpus) (no tokenizer) "
            "on text of both languages, or load aligned vectors."
        )
    return vectors


@dataclass(frozen=True)
class WordSets:
    """For each token id, the indices of the words it was matched to (ascending, i.e. most frequent first).

    Attributes:
        offsets (`np.ndarray`): `(num_tokens + 1,)` start of each token's words in `words`.
        words (`np.ndarray`): concatenated word indices.
    """

    offsets: np.ndarray
    words: np.ndarray

    def of(self, token: int) -> np.ndarray:
        return self.words[self.offsets[token] : self.offsets[token + 1]]

    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def mean_vectors(self, vectors: np.ndarray, device: torch.device) -> torch.Tensor:
        """`(num_tokens, dim)` on `device`: the mean vector of each token's words (zero for tokens without words)."""
        counts = self.counts()
        rows = torch.from_numpy(np.repeat(np.arange(len(counts)), counts)).to(device)
        values = torch.from_numpy(1.0 / np.maximum(counts, 1)).to(device, torch.float32)[rows]
        index = torch.stack([rows, torch.from_numpy(self.words).to(device)])
        sparse = torch.sparse_coo_tensor(index, values, (len(counts), len(vectors)), is_coalesced=True,
                                         check_invariants=True, device=device)
        return torch.sparse.mm(sparse, torch.from_numpy(vectors).to(device))


def match_words(tokenizer: Tokenizer, words: list[str], num_tokens: int, *, desc: str) -> WordSets:
    """Match each word to the tokens of its segmentations (alone, after a space, capitalized after a space)."""
    backend = tokenizer.backend_tokenizer
    tokens, indices = [], []
    for start in tqdm(range(0, len(words), _BATCH), desc=desc, leave=False):
        batch = words[start : start + _BATCH]
        variants = [(w, j) for j, word in enumerate(batch, start) for w in _variants(word)]
        encodings = backend.encode_batch([w for w, _ in variants], add_special_tokens=False)
        for (_, j), encoding in zip(variants, encodings):
            tokens.extend(encoding.ids)
            indices.extend([j] * len(encoding.ids))
    pairs = np.unique(np.stack([np.asarray(tokens, dtype=np.int64), np.asarray(indices, dtype=np.int64)]), axis=1)
    pairs = pairs[:, pairs[0] < num_tokens]
    offsets = np.searchsorted(pairs[0], np.arange(num_tokens + 1))
    return WordSets(offsets, pairs[1])


def token_word_sets(context: InitContext, words: list[str], name: str) -> tuple[WordSets, WordSets]:
    """The words of each old token (source tokenizer) and of each target token (target tokenizer)."""
    source = match_words(context.source_tokenizer, words, len(context.source_input), desc=f"{name}: old tokens")
    target = match_words(context.target_tokenizer, words, len(context.alignment.target_forms),
                         desc=f"{name}: new tokens")
    return source, target


def _variants(word: str) -> list[str]:
    capitalized = " " + word[:1].upper() + word[1:]
    return [word, " " + word] + ([capitalized] if capitalized != " " + word else [])


@dataclass(frozen=True)
class Factorization:
    """`matrix ≈ coordinates @ primitives` from the SVD (OFA): `coordinates = U[:, :rank]`,
    `primitives = diag(S[:rank]) @ V[:, :rank]ᵀ`; `explained` is the share of the squared Frobenius norm kept."""

    coordinates: torch.Tensor
    primitives: torch.Tensor
    explained: float


def factorize(matrix: torch.Tensor, rank: int) -> Factorization:
    """Rank-`rank` SVD factorization of `matrix` through its `hidden x hidden` Gram matrix, computed blockwise."""
    hidden, wide = matrix.shape[1], precise(matrix.device)
    gram = torch.zeros(hidden, hidden, dtype=wide, device=matrix.device)
    for start in range(0, matrix.shape[0], _BLOCK):
        block = matrix[start : start + _BLOCK].to(wide)
        gram += block.T @ block
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    rank = min(rank, hidden)
    top = eigenvectors[:, -rank:].flip(1)
    singular = eigenvalues[-rank:].flip(0).clamp_min(1e-12).sqrt()
    coordinates = torch.cat(
        [(matrix[start : start + _BLOCK].to(wide) @ top / singular).float() for start in range(0, len(matrix), _BLOCK)]
    )
    explained = float(eigenvalues[-rank:].clamp_min(0).sum() / eigenvalues.clamp_min(0).sum().clamp_min(1e-300))
    return Factorization(coordinates, (singular[:, None] * top.T).float(), explained)
