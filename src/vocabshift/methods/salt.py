"""`salt`: each new row transfers a helper model's embedding into the LLM's space through the anchors (SALT).

Lee et al., 2025 (arXiv 2505.10945). A helper model whose tokenizer is the new tokenizer gives every new token an
embedding `e` and every anchor (a shared token) a row of `A`. Sparsemax over word-vector similarities picks each new
token's anchors; the paper's map `X = A⁺B` from helper space to LLM space is never built: `e X = (e A⁺) B`, so the
coefficients `c = e A⁺` (the least-squares fit of `e` by the anchors' helper rows) are applied to the anchors' LLM
rows `B`, input and untied output alike.

The per-token fit alone is rank-deficient where the support is smaller than the helper's width: the anchors
express only part of `e`, and the rest is lost. By default (`global_map=True`) one ridge map `G` from helper rows to
LLM rows is fitted on all anchors (its ridge chosen on held-out anchors), and the per-token fit corrects it:
row = G(e) + c (B − G(A)). The anchors' errors under `G` are carried over as the paper's rows are; what the anchors
cannot express is still mapped by `G`, and new tokens without a word vector get G(e) alone. The map's held-out R²
goes to the record, and a helper whose R² is at most 0 (no better than the anchors' mean row) is reported in a
warning. Per token: support size k, relative residual ‖e − cA‖/‖e‖ and the condition number of `A`.

Where it stands (README, "Word-vector methods"): with Gemma-3-270M as the helper, the best of the
word-vector methods on SmolLM2 + Russian and ahead of `focus` after training, but behind `subword`. A helper
trained on little text makes rows worse than `mean`. Choose with `probe`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from huggingface_hub.utils import tqdm
from transformers import PreTrainedModel

from ..errors import MethodOptionError
from ..registry import register_method
from ..wordvectors import WordVectors
from .anchors import check_vector_options, token_space
from .base import InitContext, InitResult, median_norm, precise, resolved, side_rows, with_fallback
from .linear_map import LinearMap, fit_linear_map
from .neighbors import MIN_TEMPERATURE, SparseWeights, sparsemax_neighbors, summarize

__all__ = ["SaltConfig", "init_salt"]

logger = logging.getLogger(__name__)

_CHUNK_ELEMENTS = 1 << 22  # anchor helper-rows gathered at once (32 MB of float64)
_WEAK_HELPER_R2 = 0.0  # held-out R² of the global map at or below which the helper is reported as uninformative


@dataclass(frozen=True)
class SaltConfig:
    """Options of `salt` (`helper_model` and exactly one of `word_vectors` and `corpus`).

    The paper's setting is `temperature=1.0, ridge=0.0, max_anchors=None, norm_guard=None, global_map=False`. The
    first four defaults differ because of the word vectors: the paper used pretrained word-level fastText, whose flat
    similarities give sparsemax supports of hundreds of anchors; FOCUS-style token-level vectors give peaked ones,
    too few to span the helper embedding, and the transferred rows were no better than the mean row. Dividing
    similarities by 32 brings back supports of hundreds, the ridge keeps their least squares stable, the cap bounds
    the cost (k² per token) and the guard catches the rows least squares still blows up. Measured figures:
    docs/methods.md, "Measured".

    Attributes:
        helper_model: a target-language model whose tokenizer is the new tokenizer (any transformers model with
            input embeddings: a small BERT, a small decoder), or its input embedding matrix as a tensor whose row i
            belongs to the new tokenizer's id i. `extend_vocabulary` reads the matrix and checks it against the new
            tokenizer before the method runs (`vocabshift.inputs.resolve_inputs`).
        word_vectors / corpus: as for `focus`: fastText vectors, or text to train token-level fastText on.
        temperature (`float`, defaults to 32.0): similarities are divided by it before sparsemax.
        ridge (`float`, defaults to 0.1): Tikhonov regularization, relative to the mean non-zero eigenvalue of
            `A Aᵀ`; 0 is the paper's pseudo-inverse.
        max_anchors (`int`, *optional*, defaults to 128): keep at most this many anchors per token (those of largest
            sparsemax weight); None keeps the whole support, as in the paper.
        norm_guard (`float`, *optional*, defaults to 2.0): rescale rows whose norm is outside
            [median / norm_guard, median * norm_guard] of the old rows' norms into that range; None turns it off.
        global_map (`bool`, defaults to True): the global map corrected per token (see above); False is the
            per-token fit alone, as in the paper.
    """

    helper_model: PreTrainedModel | torch.Tensor | None = None
    word_vectors: str | os.PathLike | WordVectors | None = None
    corpus: str | os.PathLike | Sequence[str] | None = None
    temperature: float = 32.0
    ridge: float = 0.1
    max_anchors: int | None = 128
    norm_guard: float | None = 2.0
    global_map: bool = True

    def __post_init__(self) -> None:
        if self.helper_model is None:
            raise MethodOptionError(
                "Method 'salt' needs helper_model=...: a target-language model whose tokenizer is new_tokenizer "
                "(any transformers model with input embeddings), or its input embedding matrix as a tensor."
            )
        check_vector_options("salt", self.word_vectors, self.corpus)
        if self.ridge < 0 or not self.temperature >= MIN_TEMPERATURE or (
                self.max_anchors is not None and self.max_anchors < 1):
            raise MethodOptionError(
                f"salt ridge={self.ridge!r} must be >= 0, temperature={self.temperature!r} >= {MIN_TEMPERATURE:g} and "
                f"max_anchors={self.max_anchors!r} >= 1."
            )
        if self.norm_guard is not None and not self.norm_guard > 1:
            raise MethodOptionError(f"salt norm_guard={self.norm_guard!r} is invalid: pass a number > 1 or None.")


@register_method(
    "salt",
    config_class=SaltConfig,
    pretty_name="SALT",
    paper_url="https://arxiv.org/abs/2505.10945",
    summary="a helper model's embedding mapped into the LLM's space: a global ridge map, corrected per token by "
            "least squares over sparsemax anchors",
)
def init_salt(context: InitContext, config: SaltConfig) -> InitResult:
    """Initialize new rows by SALT (global map + per-token correction); tokens without a helper row (or, without the
    global map, without a word vector) get random rows."""
    helper = resolved(config.helper_model, torch.Tensor, option="helper_model", method="salt").to(context.device)
    space = token_space(context, resolved(config.word_vectors, WordVectors, option="word_vectors", method="salt"))
    new_helper, anchor_helper = _helper_ids(context, space.anchor_target_ids)
    usable, has_helper = anchor_helper >= 0, new_helper >= 0
    solvable = space.new_found & has_helper
    covered = has_helper if config.global_map else solvable
    weights = sparsemax_neighbors(space.new_vectors[solvable], space.anchor_vectors[usable],
                                  temperature=config.temperature, max_support=config.max_anchors, desc="SALT anchors")
    anchor_rows = helper[anchor_helper[usable]]
    coefficients, stats = _least_squares(weights, anchor_rows, helper[new_helper[solvable]], config.ridge)
    maps: list[LinearMap] = []

    def side(matrix: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, int]:
        anchor_ids = space.anchor_source_ids[usable]
        if config.global_map:
            targets = matrix[anchor_ids]
            maps.append(fit_linear_map(anchor_rows, targets, seed=context.seed))
            transferred = maps[-1].predict(helper[new_helper[has_helper]])
            errors = targets - maps[-1].predict(anchor_rows)
            transferred[solvable[has_helper]] += coefficients.apply(errors, _every(errors))
        else:
            transferred = coefficients.apply(matrix, anchor_ids)
        rows, count = _guard(transferred, matrix, config.norm_guard)
        return with_fallback(matrix, covered, rows, generator), count

    rows, guarded = zip(*side_rows(context, side))
    _warn_weak_helper(maps)
    diagnostics = {
        **space.describe(),
        "anchors": int(usable.sum()),
        "global_map_only": int((covered & ~solvable).sum()),
        "random_fallback": int((~covered).sum()),
        "helper_rows": helper.shape[0],
        "helper_hidden": helper.shape[1],
        "support_size": summarize(weights.support_sizes().float()),
        "support_capped": weights.capped,
        "relative_residual": summarize(stats["residual"]),
        "condition_number": summarize(stats["condition"]),
        "rank_deficient": int((stats["rank"] < weights.support_sizes()).sum()),
        "norm_guarded": list(guarded),
        "global_map": {"ridge": [m.ridge for m in maps], "held_out_r2": [round(m.held_out_r2, 6) for m in maps]}
        if maps else None,
    }
    return InitResult.from_sides(rows, diagnostics)


def _every(rows: torch.Tensor) -> torch.Tensor:
    return torch.arange(len(rows), device=rows.device)


def _warn_weak_helper(maps: list[LinearMap]) -> None:
    weak = [round(m.held_out_r2, 3) for m in maps if m.held_out_r2 <= _WEAK_HELPER_R2]
    if weak:
        logger.warning(
            "SALT: the helper model predicts the model's rows of held-out anchors no better than their mean row "
            "(held-out R² %s per side): its rows are likely worse than method='mean'. Use a helper trained on more "
            "target-language text, or method='subword' or 'focus'.", weak,
        )


def _helper_ids(context: InitContext, anchor_target_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the helper model (ids of the new tokenizer) of the new tokens and of the anchors; -1 if none."""
    by_key: dict[Any, int] = {}
    alignment = context.alignment
    language = alignment.new_tokenizer_forms if alignment.new_tokenizer_forms is not None else alignment.target_forms
    for index, form in enumerate(language):
        by_key.setdefault(form.key, index)
    forms = alignment.target_forms
    new = [by_key.get(form.key, -1) for form in context.new_forms]
    anchors = [by_key.get(forms[t].key, -1) for t in anchor_target_ids.tolist()]
    device = context.device
    return torch.tensor(new, dtype=torch.long, device=device), torch.tensor(anchors, dtype=torch.long, device=device)


def _least_squares(weights: SparseWeights, anchors: torch.Tensor, targets: torch.Tensor, ridge: float
                   ) -> tuple[SparseWeights, dict[str, torch.Tensor]]:
    """For each query i with support S_i: c_i = e_i A⁺ with A = anchors[S_i], e_i = targets[i], in float64.

    Solved through the eigen-decomposition of the Gram matrix A Aᵀ (k x k), batched over tokens of similar k;
    eigenvalues below `max(k, h) * eps * largest` count as zero (pseudo-inverse), `ridge` adds a relative Tikhonov term.
    """
    order = torch.argsort(weights.rows * len(anchors) + weights.cols)  # by token, then anchor
    rows, cols = weights.rows[order], weights.cols[order]
    sizes = weights.support_sizes()
    starts = torch.cumsum(sizes, 0) - sizes
    wide, device = precise(anchors.device), anchors.device
    values = torch.zeros(len(rows), dtype=wide, device=device)
    stats = {name: torch.zeros(weights.count, dtype=wide, device=device) for name in ("residual", "condition", "rank")}
    by_size = torch.argsort(sizes, stable=True)
    chunks = _chunks(sizes[by_size], anchors.shape[1])
    for tokens in tqdm([by_size[a:b] for a, b in chunks], desc="SALT least squares", leave=False):
        width = int(sizes[tokens].max())
        slot = starts[tokens][:, None] + torch.arange(width, device=device)
        valid = torch.arange(width, device=device)[None, :] < sizes[tokens][:, None]
        slot = torch.where(valid, slot, 0)
        a = anchors[cols[slot]].to(wide) * valid[..., None]
        e = targets[tokens].to(wide)
        c, residual, condition, rank = _solve(a, e, ridge)
        values[slot[valid]] = c[valid]
        for name, value in (("residual", residual), ("condition", condition), ("rank", rank)):
            stats[name][tokens] = value.to(wide)
    return SparseWeights(rows, cols, values, weights.count), stats


def _chunks(sizes: torch.Tensor, hidden: int) -> list[tuple[int, int]]:
    """Consecutive ranges of tokens (sorted by support size) whose padded anchor block stays bounded."""
    chunks, start, counts = [], 0, sizes.tolist()
    for stop in range(1, len(counts) + 1):
        if stop == len(counts) or (stop + 1 - start) * counts[stop] * hidden > _CHUNK_ELEMENTS:
            chunks.append((start, stop))
            start = stop
    return chunks


def _solve(a: torch.Tensor, e: torch.Tensor, ridge: float) -> tuple[torch.Tensor, ...]:
    """c = e A⁺ (or the ridge solution) for a batch of padded `a` (B, k, h) and `e` (B, h).

    Without ridge, through the eigen-decomposition of A Aᵀ (pseudo-inverse); with ridge, by Cholesky on
    A Aᵀ + λ I (which is positive definite), the eigenvalues being needed only for rank and condition number.
    """
    gram = a @ a.transpose(1, 2)
    projected = torch.einsum("bkh,bh->bk", a, e)
    if ridge > 0:
        eigenvalues = torch.linalg.eigvalsh(gram)
    else:
        eigenvalues, vectors = torch.linalg.eigh(gram)
    largest = eigenvalues[:, -1:].clamp_min(0)
    kept = eigenvalues > largest * max(a.shape[1], a.shape[2]) * torch.finfo(a.dtype).eps
    rank = kept.sum(dim=1)
    if ridge > 0:
        shift = ridge * (eigenvalues * kept).sum(dim=1) / rank.clamp_min(1)
        eye = torch.eye(a.shape[1], dtype=gram.dtype, device=gram.device)
        factor = torch.linalg.cholesky(gram + shift[:, None, None].clamp_min(1e-300) * eye)
        c = torch.cholesky_solve(projected[..., None], factor).squeeze(-1)
    else:
        inverse = torch.where(kept, 1 / eigenvalues.clamp_min(1e-300), torch.zeros_like(eigenvalues))
        c = torch.einsum("bkj,bj->bk", vectors, inverse * torch.einsum("bkj,bk->bj", vectors, projected))
    residual = (e - torch.einsum("bk,bkh->bh", c, a)).norm(dim=1) / e.norm(dim=1).clamp_min(1e-300)
    smallest = torch.where(kept, eigenvalues, torch.full_like(eigenvalues, float("inf"))).min(dim=1).values
    condition = (largest.squeeze(1) / smallest).sqrt()
    return c, residual, condition, rank


def _guard(rows: torch.Tensor, matrix: torch.Tensor, guard: float | None) -> tuple[torch.Tensor, int]:
    """Rows rescaled into [median / guard, median * guard] of `matrix`'s row norms; also the count changed."""
    if guard is None or not len(rows):
        return rows, 0
    median = median_norm(matrix)
    norms = rows.norm(dim=1)
    # a guard so wide that median * guard leaves the dtype's range (1e300) bounds nothing above
    target = norms.clamp(median / guard, min(median * guard, torch.finfo(norms.dtype).max))
    changed = target != norms
    return rows * (target / norms.clamp_min(1e-12))[:, None], int(changed.sum())
