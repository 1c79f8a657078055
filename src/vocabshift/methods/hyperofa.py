"""`hyperofa`: a hypernetwork, trained on the old tokens, predicts each new token's OFA coordinate row (HyperOFA).

Özeren et al., 2025 (arXiv 2504.21018). The old embedding matrix is factorized by SVD (`rank` coordinates per token
and primitive embeddings); a hypernetwork learns to map an old token's set of matched multilingual words to its
coordinate row, then predicts the rows of new tokens from their words. With an untied head, one network predicts
input and output coordinates together. New tokens in no word get N(mean, std) rows.

By default (`residual_on_ofa=True`) the network learns what OFA's combination misses: its targets are the old
tokens' coordinates minus their leave-one-out OFA combination, and a new row is OFA's row plus the predicted
correction. Predicting the coordinates outright (the paper's, `residual_on_ofa=False`) falls far behind OFA's
nearest-neighbour combination with word vectors that are not ColexNet+'s (README, "Word-vector methods").
Diagnostic, the permutation test: pairwise cosines between predictions for 10 orders of the same word set (1 for
the set encoder, the default; below 1 where the BiLSTM depends on the order).

Where it stands (README, "Word-vector methods"): level with `ofa`, and like it behind `subword` on
SmolLM2 + Russian at step 0 and after embedding-only training. Choose with `probe`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import MethodOptionError, WordVectorsError
from ..registry import register_method
from ..wordvectors import WordVectors
from .base import InitContext, InitResult, median_norm, with_fallback
from .hypernet import Encoder, predict, train_hypernetwork
from .neighbors import SparseWeights, summarize
from .ofa import OfaConfig, ofa_weights
from .wordmatch import Factorization, WordSets, factorize, multilingual_vectors, token_word_sets

__all__ = ["HyperOfaConfig", "init_hyperofa"]

_PERMUTATION_SAMPLE = 512
_PERMUTATIONS = 10


@dataclass(frozen=True)
class HyperOfaConfig:
    """Options of `hyperofa`.

    Attributes:
        word_vectors: word-level multilingual vectors, as for `ofa`.
        encoder (`str`, defaults to `"set"`): `"set"` (permutation-invariant, as a set of words should be) or
            `"bilstm"` (the paper's, which reads the words' order).
        rank (`int`, defaults to 100): SVD coordinates per token (the paper's smallest setting).
        hidden_size (`int`, defaults to 128): width of the encoder.
        max_words (`int`, defaults to 16): words per token fed to the network (the most frequent ones).
        max_epochs (`int`, defaults to 30) / patience (`int`, defaults to 3): early stopping on a 5% validation
            split.
        residual_on_ofa (`bool`, defaults to True): learn the correction to OFA's combination (see above); False
            predicts the coordinates outright, as in the paper.
    """

    word_vectors: str | os.PathLike | WordVectors | None = None
    encoder: Encoder = "set"
    rank: int = 100
    hidden_size: int = 128
    max_words: int = 16
    max_epochs: int = 30
    patience: int = 3
    residual_on_ofa: bool = True

    def __post_init__(self) -> None:
        if self.word_vectors is None:
            raise MethodOptionError(
                "Method 'hyperofa' needs word_vectors=...: word-level multilingual vectors (a fastText .bin or .vec "
                "path, or vocabshift.WordVectors) in which words of the old and the new language share one space."
            )
        sizes = (self.rank, self.hidden_size, self.max_words, self.max_epochs, self.patience)
        if min(sizes) < 1:
            raise MethodOptionError(
                f"hyperofa rank, hidden_size, max_words, max_epochs and patience must be >= 1; got {sizes}."
            )


@register_method(
    "hyperofa",
    config_class=HyperOfaConfig,
    pretty_name="HyperOFA",
    paper_url="https://arxiv.org/abs/2504.21018",
    summary="a hypernetwork (set encoder or BiLSTM) maps a token's matched word vectors to a correction of OFA's "
            "row in SVD coordinates (or to the coordinates, as in the paper)",
)
def init_hyperofa(context: InitContext, config: HyperOfaConfig) -> InitResult:
    """Train the hypernetwork on old tokens, predict coordinates of new tokens, project them to rows."""
    vectors = multilingual_vectors(config.word_vectors, "hyperofa")
    source_sets, target_sets = token_word_sets(context, vectors.words, "HyperOFA")
    factors = [factorize(m, config.rank) for m in context.matrices]
    coordinates = torch.cat([f.coordinates for f in factors], dim=1)
    special = {i for i, form in enumerate(context.alignment.source_forms) if form.special or form.added}
    train_ids = [i for i in range(len(context.source_input)) if len(source_sets.of(i)) and i not in special]
    new_sets = [_words(target_sets, i, config.max_words) for i in context.alignment.new_ids]
    covered = torch.tensor([len(s) > 0 for s in new_sets], dtype=torch.bool, device=context.device)
    if len(train_ids) < 2 or not covered.any():
        raise WordVectorsError(
            f"Word vectors {vectors!r} match {len(train_ids)} old and {int(covered.sum())} new tokens: HyperOFA "
            "needs multilingual vectors with words of both languages."
        )
    mixture = _OfaMixture.build(context, source_sets, target_sets, vectors, train_ids, covered) \
        if config.residual_on_ofa else None
    targets = coordinates[train_ids] - (mixture.of_old(coordinates) if mixture else 0)
    words = torch.from_numpy(vectors.vectors).to(context.device)
    result = train_hypernetwork(
        words, [_words(source_sets, i, config.max_words) for i in train_ids], targets,
        encoder=config.encoder, hidden=config.hidden_size, max_epochs=config.max_epochs, patience=config.patience,
        seed=context.seed,
    )
    predicted = predict(result.model, [s for s in new_sets if len(s)], len(words))
    rows = _rows(context, factors, predicted, covered, mixture)
    diagnostics = {
        "encoder": config.encoder,
        "residual_on_ofa": config.residual_on_ofa,
        "rank": factors[0].coordinates.shape[1],
        "explained_variance": [round(f.explained, 6) for f in factors],
        "training_pairs": len(train_ids),
        "epochs": result.epochs,
        "stopped_early": result.stopped_early,
        "best_validation_loss": round(result.best_validation_loss, 6),
        "new_in_words": int(covered.sum()),
        "random_fallback": int((~covered).sum()),
        "permutation_cosine": _permutation_cosine(result.model, [s for s in new_sets if len(s) > 1], len(words),
                                                  context.seed),
        "word_vectors": vectors.describe(),
    }
    return InitResult.from_sides(rows, diagnostics)


@dataclass(frozen=True)
class _OfaMixture:
    """OFA's weights (its default 10 neighbours, temperature 0.1) over the old tokens in words: leave-one-out for
    the training tokens, plain for the new tokens in words."""

    keys: torch.Tensor
    old: SparseWeights
    new: SparseWeights

    @classmethod
    def build(cls, context: InitContext, source_sets: WordSets, target_sets: WordSets, vectors: WordVectors,
              train_ids: list[int], covered: torch.Tensor) -> _OfaMixture:
        device = context.device
        keys = torch.from_numpy(source_sets.counts() > 0).to(device).nonzero().squeeze(1)
        source_space = source_sets.mean_vectors(vectors.vectors, device)
        new_ids = torch.tensor(context.alignment.new_ids, dtype=torch.long, device=device)[covered]
        train = torch.tensor(train_ids, dtype=torch.long, device=device)
        k, temperature = OfaConfig.neighbors, OfaConfig.temperature
        old, _ = ofa_weights(source_space[train], source_space[keys], neighbors=k, temperature=temperature,
                             query_ids=train, key_ids=keys)
        new, _ = ofa_weights(target_sets.mean_vectors(vectors.vectors, device)[new_ids], source_space[keys],
                             neighbors=k, temperature=temperature)
        return cls(keys, old, new)

    def of_old(self, matrix: torch.Tensor) -> torch.Tensor:
        return self.old.apply(matrix, self.keys)

    def of_new(self, matrix: torch.Tensor) -> torch.Tensor:
        return self.new.apply(matrix, self.keys)


def _words(sets: WordSets, token: int, limit: int) -> torch.Tensor:
    """The token's first `limit` matched words (word vectors list the most frequent words first)."""
    return torch.from_numpy(sets.of(token)[:limit].copy())


def _rows(context: InitContext, factors: list[Factorization], predicted: torch.Tensor, covered: torch.Tensor,
          mixture: _OfaMixture | None) -> list[torch.Tensor]:
    """Per matrix: with `mixture`, OFA's full rows plus the predicted correction times the primitives; without,
    the predicted coordinates times the primitives, rescaled to the median norm of the old rows (the contrastive
    loss is blind to scale). New tokens in no word get random rows."""
    rows, start = [], 0
    for offset, (factor, matrix) in enumerate(zip(factors, context.matrices)):
        rank = factor.coordinates.shape[1]
        out = predicted[:, start : start + rank] @ factor.primitives
        if mixture is not None:
            out = mixture.of_new(matrix) + out
        else:
            out = out * median_norm(matrix) / out.norm(dim=1, keepdim=True).clamp_min(1e-12)
        rows.append(with_fallback(matrix, covered, out, context.generator(offset)))
        start += rank
    return rows


def _permutation_cosine(model: Any, sets: list[torch.Tensor], pad: int, seed: int) -> dict[str, float]:
    """Pairwise cosines between the predictions for `_PERMUTATIONS` orders of each word set (the given one and
    shuffles), over a sample of at most 512 sets: the reviewers' permutation test."""
    generator = torch.Generator().manual_seed(seed + 2)
    chosen = torch.randperm(len(sets), generator=generator, device="cpu")[:_PERMUTATION_SAMPLE].tolist()
    original = [sets[i] for i in chosen]
    if not original:
        return {}
    orders = [original] + [[s[_new_order(len(s), generator)] for s in original] for _ in range(_PERMUTATIONS - 1)]
    unit = torch.nn.functional.normalize(torch.stack([predict(model, o, pad) for o in orders], dim=1), dim=2)
    pairs = torch.triu_indices(_PERMUTATIONS, _PERMUTATIONS, offset=1)
    return summarize((unit @ unit.transpose(1, 2))[:, pairs[0], pairs[1]])


def _new_order(size: int, generator: torch.Generator) -> torch.Tensor:
    """A random permutation of `range(size)` other than the identity (size > 1)."""
    order = torch.randperm(size, generator=generator, device="cpu")
    return order.flip(0) if torch.equal(order, torch.arange(size, device="cpu")) else order
