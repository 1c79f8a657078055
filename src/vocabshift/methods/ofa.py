"""`ofa`: each new row is a softmax-weighted combination of its most similar old tokens in a word space (OFA).

Liu et al., 2023 (arXiv 2311.08849). Every token, old and new, gets the mean vector of the multilingual words it
appears in; a new token's row combines the rows of its `neighbors` most similar old tokens (any old token, not only
shared ones) with weights softmax(similarity / temperature). New tokens that appear in no word get N(mean, std) rows.
With `rank`, the combination happens on OFA's SVD coordinates and is projected back by the primitive embeddings, so
rows stay in the top-`rank` subspace; without it (the default), full rows are combined, which is the same
computation at full rank: a Hugging Face model stores full rows, not OFA's two factors.

Where it stands (README, "Word-vector methods"): behind `subword` on SmolLM2 + Russian at step 0 and after
embedding-only training, with word vectors trained here (no ColexNet+ offline). Choose with `probe`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..errors import MethodOptionError, WordVectorsError
from ..registry import register_method
from ..wordvectors import WordVectors
from .base import InitContext, InitResult, precise, side_rows, with_fallback
from .neighbors import MIN_TEMPERATURE, SparseWeights, summarize, topk_neighbors
from .wordmatch import factorize, multilingual_vectors, token_word_sets

__all__ = ["OfaConfig", "init_ofa", "ofa_weights"]


@dataclass(frozen=True)
class OfaConfig:
    """Options of `ofa`.

    Attributes:
        word_vectors: word-level multilingual vectors (source and target language in one space): a `.bin` /
            `.vec` path or a `WordVectors` (e.g. trained on text of both languages, or aligned vectors).
        neighbors (`int`, defaults to 10): old tokens combined per new token.
        temperature (`float`, defaults to 0.1): softmax temperature over their cosine similarities.
        rank (`int`, *optional*): combine SVD coordinates of this rank instead of full rows.
    """

    word_vectors: str | os.PathLike | WordVectors | None = None
    neighbors: int = 10
    temperature: float = 0.1
    rank: int | None = None

    def __post_init__(self) -> None:
        if self.word_vectors is None:
            raise MethodOptionError(
                "Method 'ofa' needs word_vectors=...: word-level multilingual vectors (a fastText .bin or .vec path, "
                "or vocabshift.WordVectors) in which words of the old and the new language share one space."
            )
        if self.neighbors < 1 or not self.temperature >= MIN_TEMPERATURE or (self.rank is not None and self.rank < 1):
            raise MethodOptionError(
                f"ofa neighbors={self.neighbors!r} and rank={self.rank!r} must be >= 1 and "
                f"temperature={self.temperature!r} >= {MIN_TEMPERATURE:g}."
            )


@register_method(
    "ofa",
    config_class=OfaConfig,
    pretty_name="OFA",
    paper_url="https://arxiv.org/abs/2311.08849",
    summary="softmax over the top-k most similar old tokens in a multilingual word space (SVD coordinates optional)",
)
def init_ofa(context: InitContext, config: OfaConfig) -> InitResult:
    """Initialize new rows as OFA combinations of similar old tokens' rows; tokens in no word get random rows."""
    vectors = multilingual_vectors(config.word_vectors, "ofa")
    source_sets, target_sets = token_word_sets(context, vectors.words, "OFA")
    device = context.device
    new_ids = torch.tensor(context.alignment.new_ids, dtype=torch.long, device=device)
    covered = torch.from_numpy(target_sets.counts() > 0).to(device)[new_ids]
    keys = torch.from_numpy(source_sets.counts() > 0).to(device).nonzero().squeeze(1)
    if not covered.any() or not len(keys):
        raise WordVectorsError(
            f"Word vectors {vectors!r} match none of the {'new' if not covered.any() else 'old'} tokens: pass "
            "multilingual vectors with words of both the old and the new language."
        )
    weights, similarity = ofa_weights(target_sets.mean_vectors(vectors.vectors, device)[new_ids[covered]],
                                      source_sets.mean_vectors(vectors.vectors, device)[keys],
                                      neighbors=config.neighbors, temperature=config.temperature)
    explained: list[float] = []

    def side(matrix: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if config.rank is None:
            return with_fallback(matrix, covered, weights.apply(matrix, keys), generator)
        factors = factorize(matrix, config.rank)
        explained.append(round(factors.explained, 6))
        basis = factors.coordinates
        return with_fallback(basis, covered, weights.apply(basis, keys), generator) @ factors.primitives

    rows = side_rows(context, side)
    diagnostics = {
        "words": len(vectors),
        "old_tokens_in_words": len(keys),
        "new_in_words": int(covered.sum()),
        "random_fallback": int((~covered).sum()),
        "top_similarity": summarize(similarity[:, 0]),
        "explained_variance": explained or None,
        "word_vectors": vectors.describe(),
    }
    return InitResult.from_sides(rows, diagnostics)


def ofa_weights(queries: torch.Tensor, keys: torch.Tensor, *, neighbors: int, temperature: float,
                query_ids: torch.Tensor | None = None, key_ids: torch.Tensor | None = None
                ) -> tuple[SparseWeights, torch.Tensor]:
    """softmax(similarity / temperature) over each query's `neighbors` most similar keys (weights over key
    indices), and the similarities kept. With `query_ids` and `key_ids` (the tokens behind queries and keys), no
    query picks itself: leave-one-out weights for tokens that are also keys."""
    leave_out = query_ids is not None and key_ids is not None
    similarity, index = topk_neighbors(queries, keys, neighbors + leave_out, desc="OFA neighbours")
    if query_ids is not None and key_ids is not None and index.shape[1] > 1:
        own = key_ids[index] == query_ids[:, None]
        drop = torch.where(own.any(dim=1), own.float().argmax(dim=1), index.shape[1] - 1)
        keep = torch.ones_like(own)
        keep[torch.arange(len(index), device=index.device), drop] = False
        similarity, index = similarity[keep].view(len(index), -1), index[keep].view(len(index), -1)
    count, k = similarity.shape
    device = similarity.device
    values = torch.softmax(similarity.to(precise(device)) / temperature, dim=1).flatten()
    return SparseWeights(torch.arange(count, device=device).repeat_interleave(k), index.flatten(), values,
                         count), similarity
