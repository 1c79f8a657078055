"""`subword`: each new row composed from the old rows of the pieces the old tokenizer cuts the token into.

Follows "Beyond Initialization Loss" (arXiv 2608.03494): the input and output rows are weighted separately
(`uniform`, `char_length` or `max_char`), and new input rows are rescaled to the median norm of the old input rows
of the target script, because a token can win the softmax through its norm alone. Its best configuration, the
default here, is a uniform input mean with norm calibration and a character-length-weighted output mean.

With tied embeddings one row is both, and it is the output rule that holds: norm-calibrated tied rows raise every
new token's logit with its norm, which made held-out text much worse on SmolLM2 (README, "Methods").

`tied_mean_shift` (off by default) moves tied composed rows against the old rows' mean row. Every old row shares that
component, and the final hidden states project on it consistently, so it acts as a common logit prior; a mean of
pieces keeps the whole prior of its pieces while a new token, a sequence of them, is rarer, so the model puts too
much probability on new tokens. The shift lowers each new logit by the same share of that prior: it helps a model
used before training and slows embedding-only training, hence off (the measurements, and the variants that did
worse, are in the README's "Methods" section).

It is the default method: it needs no word vectors or helper model, and on SmolLM2 + Russian and German it led every
word-vector method at step 0 and after embedding-only training (README, "Word-vector methods").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import MethodOptionError
from ..registry import register_method
from ..vocab.forms import TokenForm
from ..vocab.stats import dominant_script, scripts_in
from .base import InitContext, InitResult, combine_rows, median_norm

__all__ = ["SubwordConfig", "init_subword"]

Weighting = Literal["uniform", "char_length", "max_char"]


@dataclass(frozen=True)
class SubwordConfig:
    """Options of `subword`.

    Attributes:
        input_weighting (`str`, defaults to `"uniform"`): how the pieces' input rows are weighted: `"uniform"`,
            `"char_length"` (by each piece's number of characters) or `"max_char"` (the longest piece only).
        output_weighting (`str`, defaults to `"char_length"`): the same for output rows; with tied embeddings this
            setting (with `output_norm`) gives the shared rows.
        input_norm (`bool`, defaults to `True`): rescale composed input rows to the median norm of the old input rows
            whose text holds a letter of the new tokens' main script.
        output_norm (`bool`, defaults to `False`): the same for output rows (risks over-confident logits).
        tied_mean_shift (`float`, defaults to `0.0`): with tied embeddings, subtract this fraction of the old rows'
            mean row from every composed row, lowering new tokens' logits by the same share of the prior that all
            rows share. About 0.25 gave the best step-0 loss on SmolLM2 (docs/methods.md, "subword"), for a model used
            before training; it slows embedding-only training, hence off. Untied models are unchanged.

    Raises:
        `MethodOptionError`: when `tied_mean_shift` is not a finite number in [0, 1].
    """

    input_weighting: Weighting = "uniform"
    output_weighting: Weighting = "char_length"
    input_norm: bool = True
    output_norm: bool = False
    tied_mean_shift: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.tied_mean_shift <= 1.0:
            raise MethodOptionError(
                f"subword tied_mean_shift={self.tied_mean_shift!r} is invalid: pass a number from 0 (off) to 1."
            )


@register_method(
    "subword",
    config_class=SubwordConfig,
    pretty_name="Subword composition",
    paper_url="https://arxiv.org/abs/2608.03494",
    summary="weighted mean of the old pieces of each new token, norm-calibrated input, asymmetric output, optional "
    "shift of tied rows off the mean row",
)
def init_subword(context: InitContext, config: SubwordConfig) -> InitResult:
    """Compose each new row from its decomposition; a single piece is copied, no piece gives the mean row."""
    pieces = context.alignment.decompositions
    lengths = [max(len(form.text), 1) for form in context.alignment.source_forms]
    script, norm_rows = _target_rows(context)
    input_rule = ((config.output_weighting, config.output_norm) if context.tied
                  else (config.input_weighting, config.input_norm))
    rows, input_norm = _compose(context.source_input, pieces, lengths, *input_rule, norm_rows)
    shift = config.tied_mean_shift if context.tied else 0.0
    if shift:
        composed = torch.tensor([len(p) > 1 for p in pieces], dtype=torch.bool, device=context.device)
        rows[composed] -= shift * context.source_input.mean(dim=0)
    out_rows, output_norm = None, None
    if context.source_output is not None:
        out_rows, output_norm = _compose(
            context.source_output, pieces, lengths, config.output_weighting, config.output_norm, norm_rows
        )
    counts = [sum(min(len(p), 2) == n for p in pieces) for n in range(3)]
    diagnostics = {
        "mean_fallback": counts[0],
        "copied": counts[1],
        "composed": counts[2],
        "mean_pieces": sum(map(len, pieces)) / max(len(pieces), 1),
        "target_script": script,
        "input_norm_target": input_norm,
        "output_norm_target": output_norm,
        "tied_mean_shift": shift,
    }
    return InitResult(rows, out_rows, diagnostics)


def _target_rows(context: InitContext) -> tuple[str | None, list[int] | None]:
    """The new tokens' main script and the old ids whose text holds a letter of it (None: use all rows)."""
    script = dominant_script(form.text for form in context.new_forms if not form.special)
    forms: list[TokenForm] = context.alignment.source_forms[: context.source_input.shape[0]]
    rows = [i for i, form in enumerate(forms) if not form.special and script in scripts_in(form.text)]
    return script, rows or None


def _weights(pieces: Sequence[int], lengths: Sequence[int], weighting: str) -> list[float]:
    if weighting == "uniform":
        return [1.0 / len(pieces)] * len(pieces)
    sizes = [lengths[i] for i in pieces]
    if weighting == "char_length":
        return [size / sum(sizes) for size in sizes]
    best = sizes.index(max(sizes))
    return [float(i == best) for i in range(len(sizes))]


def _compose(
    matrix: torch.Tensor,
    pieces: Sequence[Sequence[int]],
    lengths: Sequence[int],
    weighting: str,
    calibrate: bool,
    norm_rows: list[int] | None,
) -> tuple[torch.Tensor, float | None]:
    weights = [_weights(p, lengths, weighting) if p else [] for p in pieces]
    rows = combine_rows(matrix, pieces, weights)
    composed = torch.tensor([len(p) > 1 for p in pieces], device=matrix.device)
    empty = torch.tensor([len(p) == 0 for p in pieces], device=matrix.device)
    rows[empty] = matrix.mean(dim=0)
    target = None
    if calibrate:
        target = median_norm(matrix, norm_rows)
        norms = rows[composed].norm(dim=1, keepdim=True).clamp_min(1e-12)
        rows[composed] = rows[composed] / norms * target
    return rows, target
