"""What FOCUS and SALT share: word vectors of the new tokens and of the anchors (shared tokens that have one).

Anchors are shared tokens (same canonical form in the old and the target vocabulary) that belong to the new
tokenizer and have a word vector; specials never do. In extend mode every old token is "shared", and FOCUS keeps
only those in the language-specific tokenizer, whose forms travel in the alignment (`new_tokenizer_forms`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import MethodOptionError, WordVectorsError
from ..vocab.forms import backend_state, detect_family
from ..wordvectors import WordVectors
from .base import InitContext

__all__ = ["TokenSpace", "check_vector_options", "token_space"]

logger = logging.getLogger(__name__)


def check_vector_options(method: str, word_vectors: Any, corpus: Any) -> None:
    """Exactly one of `word_vectors` and `corpus` must be given.

    Raises:
        `MethodOptionError`: naming both options and what they accept.
    """
    if (word_vectors is None) == (corpus is None):
        given = "both" if word_vectors is not None else "neither"
        raise MethodOptionError(
            f"Method {method!r} needs exactly one of word_vectors=... (a fastText .bin or .vec path, or "
            f"vocabshift.WordVectors) and corpus=... (target-language text: a UTF-8 file path or a list of strings, "
            f"to train token-level fastText on); {given} given."
        )


@dataclass(frozen=True)
class TokenSpace:
    """Word vectors of the new tokens and of the anchors.

    Attributes:
        new_vectors (`torch.Tensor`): `(num_new, dim)`, zero rows for tokens without a vector.
        new_found (`torch.Tensor`): bool `(num_new,)`, True for new tokens with a vector.
        anchor_target_ids / anchor_source_ids (`torch.Tensor`): ids of the anchors in the target and old vocabulary.
        anchor_vectors (`torch.Tensor`): `(num_anchors, dim)`.
        level (`str`): `"token"` or `"word"`.
    """

    new_vectors: torch.Tensor
    new_found: torch.Tensor
    anchor_target_ids: torch.Tensor
    anchor_source_ids: torch.Tensor
    anchor_vectors: torch.Tensor
    level: str

    def describe(self) -> dict[str, Any]:
        return {
            "word_vector_level": self.level,
            "anchors": len(self.anchor_source_ids),
            "new_with_vector": int(self.new_found.sum()),
            "new_without_vector": int((~self.new_found).sum()),
        }


def token_space(context: InitContext, vectors: WordVectors) -> TokenSpace:
    """Look up the new tokens and the anchor candidates in `vectors`.

    Raises:
        `WordVectorsError`: if the vectors cover none of the new tokens or none of the shared tokens.
    """
    alignment = context.alignment
    # token-level vectors without a family of their own hold the new tokenizer's token strings; in extend mode the
    # target is the old tokenizer's model, which may spell tokens in another family (byte-level `Ġ` vs `▁`)
    new = context.new_tokenizer
    family = alignment.target_family if new is None else detect_family(backend_state(new))
    language = alignment.new_tokenizer_forms
    in_language = {form.key for form in language} if language is not None else None
    forms = alignment.target_forms
    shared = [(t, s) for t, s in alignment.shared if not forms[t].special and not forms[t].added
              and (in_language is None or forms[t].key in in_language)]
    new_vectors, new_found, level = vectors.token_vectors(context.new_forms, family)
    shared_vectors, shared_found, _ = vectors.token_vectors([forms[t] for t, _ in shared], family)
    _check_coverage(vectors, int(new_found.sum()), context.num_new, int(shared_found.sum()), len(shared))
    device = context.device  # the vectors come from NumPy: they move to where the model's rows are
    pairs = torch.tensor(shared, dtype=torch.long, device=device).reshape(-1, 2)
    pairs = pairs[torch.from_numpy(shared_found).to(device)]
    return TokenSpace(
        torch.from_numpy(new_vectors).to(device),
        torch.from_numpy(new_found).to(device),
        pairs[:, 0],
        pairs[:, 1],
        torch.from_numpy(shared_vectors[shared_found]).to(device),
        level,
    )


def _check_coverage(vectors: WordVectors, new: int, num_new: int, anchors: int, num_shared: int) -> None:
    if new and anchors:
        if new < num_new / 2:
            logger.warning(
                "Word vectors %s cover only %d of %d new tokens; the others get random rows. Train them on more "
                "target-language text or with the new tokenizer (corpus=...).", vectors.source, new, num_new
            )
        return
    what = f"none of the {num_new} new tokens" if not new else f"none of the {num_shared} shared tokens"
    raise WordVectorsError(
        f"Word vectors {vectors!r} cover {what}: they were made for another tokenizer or language. Pass vectors "
        "trained on target-language text cut by the new tokenizer (e.g. corpus=...), or word-level vectors."
    )
