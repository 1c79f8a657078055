"""`focus`: each new row is a sparsemax-weighted combination of the rows of similar shared tokens (FOCUS).

Dobler & de Melo, EMNLP 2023. Similarity is the cosine of fastText vectors, by default token level (fastText
trained on target-language text cut by the new tokenizer). New tokens without a vector (seen fewer than
`min_count` times) get N(mean, std) rows of the old matrix, per dimension, as in FOCUS. Untied output rows get the
same weights applied to the old output rows (FOCUS run a second time on the head gives exactly that).

Where it stands (README, "Word-vector methods"): behind `subword` on SmolLM2 + Russian and German, at
step 0 and after embedding-only training, and behind `salt` with a good helper. Choose with `probe`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import MethodOptionError
from ..registry import register_method
from ..wordvectors import WordVectors
from .anchors import check_vector_options, token_space
from .base import InitContext, InitResult, resolved, side_rows, with_fallback
from .neighbors import MIN_TEMPERATURE, sparsemax_neighbors, summarize

__all__ = ["FocusConfig", "init_focus"]


@dataclass(frozen=True)
class FocusConfig:
    """Options of `focus` (give exactly one of `word_vectors` and `corpus`).

    Attributes:
        word_vectors (*optional*): fastText vectors: a `.bin` / `.vec` path or a `WordVectors`, token level (trained
            on text cut by the new tokenizer) or word level (e.g. `cc.ru.300.bin`).
        corpus (*optional*): target-language text (a UTF-8 file path or a list of strings) to train token-level
            fastText on with `train_word_vectors` (cached). `extend_vocabulary` loads or trains the vectors before
            the method runs (`vocabshift.inputs.resolve_inputs`); the method itself takes them loaded.
        temperature (`float`, defaults to 1.0): similarities are divided by it before sparsemax. FOCUS uses none
            (1.0); flat word-level similarities spread weight over thousands of tokens, which a smaller value
            (e.g. 0.05) prevents.
    """

    word_vectors: str | os.PathLike | WordVectors | None = None
    corpus: str | os.PathLike | Sequence[str] | None = None
    temperature: float = 1.0

    def __post_init__(self) -> None:
        check_vector_options("focus", self.word_vectors, self.corpus)
        if not self.temperature >= MIN_TEMPERATURE:
            raise MethodOptionError(f"focus temperature={self.temperature!r} is invalid: pass a number >= "
                                    f"{MIN_TEMPERATURE:g}.")


@register_method(
    "focus",
    config_class=FocusConfig,
    pretty_name="FOCUS",
    paper_url="https://arxiv.org/abs/2305.14481",
    summary="sparsemax over fastText similarity to shared tokens; weighted combination of their rows",
)
def init_focus(context: InitContext, config: FocusConfig) -> InitResult:
    """Initialize new rows as FOCUS combinations of anchor rows; tokens without a vector get random rows."""
    vectors = resolved(config.word_vectors, WordVectors, option="word_vectors", method="focus")
    space = token_space(context, vectors)
    found = space.new_found
    weights = sparsemax_neighbors(space.new_vectors[found], space.anchor_vectors, temperature=config.temperature,
                                  desc="FOCUS similarities")
    rows = side_rows(context, lambda matrix, generator: with_fallback(
        matrix, found, weights.apply(matrix, space.anchor_source_ids), generator))
    diagnostics = {
        **space.describe(),
        "random_fallback": int((~found).sum()),
        "support_size": summarize(weights.support_sizes().float()),
        "word_vectors": vectors.describe(),
    }
    return InitResult.from_sides(rows, diagnostics)
