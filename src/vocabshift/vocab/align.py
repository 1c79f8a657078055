"""Alignment of a target tokenizer to a source tokenizer: shared tokens, new tokens and their decompositions."""

from __future__ import annotations

from dataclasses import dataclass

from huggingface_hub.utils import tqdm

from .._typing import Tokenizer
from ..arguments import check_flag
from ..errors import TokenizerMismatchError
from .forms import Family, TokenForm, backend_state, detect_family, token_forms
from .load import load_tokenizer
from .segment import Segmenter

__all__ = ["Alignment", "align"]


@dataclass(frozen=True)
class Alignment:
    """How the ids of a target tokenizer relate to the ids of a source tokenizer.

    Attributes:
        source_forms (`list[TokenForm]`): canonical form of every source id.
        target_forms (`list[TokenForm]`): canonical form of every target id.
        shared (`list[tuple[int, int]]`): `(target_id, source_id)` pairs of tokens with the same form, by target id
            (the lowest source id when several match, ordinary pieces before byte-fallback ones).
        new_ids (`list[int]`): target ids without a source token, sorted.
        decompositions (`list[list[int]]`): for each of `new_ids`, the source ids that the source tokenizer cuts
            that token's text into (in its word position); `[]` when the source tokenizer cannot represent it.
        target_family (`str`): the target tokenizer's family (`"bytelevel"`, `"sentencepiece"` or `"wordpiece"`).
        new_tokenizer_forms (`list[TokenForm] | None`): the forms of every id of the new tokenizer as the user gave
            it (before merging), which index a helper model's rows and tell which shared tokens belong to the new
            language; None when `align` was not given it.
    """

    source_forms: list[TokenForm]
    target_forms: list[TokenForm]
    shared: list[tuple[int, int]]
    new_ids: list[int]
    decompositions: list[list[int]]
    target_family: Family
    new_tokenizer_forms: list[TokenForm] | None = None


def align(source: Tokenizer, target: Tokenizer, *, keep_source_ids: bool = False, new: Tokenizer | None = None
          ) -> Alignment:
    """Align the ids of `target` to those of `source` (both fast tokenizers).

    Args:
        source: the model's current tokenizer.
        target: the tokenizer the model will use.
        keep_source_ids (`bool`, defaults to `False`): `target` extends `source` with the same ids for every
            source token (extend mode), so that shared pairs are the identity on the source ids.
        new (*optional*): the new tokenizer `target` was merged from; the alignment keeps its token forms (for the
            methods that read the new vocabulary as the user gave it).

    Returns:
        `Alignment`

    Raises:
        `InvalidTokenizerError`, `TokenizerLoadError`: `source`, `target` or `new` is not a fast tokenizer (or its
            path). `InvalidArgumentTypeError`: `keep_source_ids` is not True or False. `TokenizerMismatchError`:
            with `keep_source_ids`, `target` does not hold every token of `source` at its id.
    """
    source, target = load_tokenizer(source, argument="source"), load_tokenizer(target, argument="target")
    check_flag(keep_source_ids, name="keep_source_ids")
    new = None if new is None else load_tokenizer(new, argument="new")
    source_state = backend_state(source)
    source_forms = token_forms(source, source_state)
    target_state = backend_state(target)
    target_forms = token_forms(target, target_state)
    if keep_source_ids:
        _check_extends(source, target, source_forms, target_forms)
        shared = [(i, i) for i in range(len(source_forms))]
    else:
        first_id: dict[tuple[object, ...], int] = {}
        for index in sorted(range(len(source_forms)), key=lambda i: (source_forms[i].fallback, i)):
            first_id.setdefault(source_forms[index].key, index)
        shared = [(t, first_id[f.key]) for t, f in enumerate(target_forms) if f.key in first_id]
    matched = {t for t, _ in shared}
    new_ids = [t for t in range(len(target_forms)) if t not in matched]
    segmenter = Segmenter(source, source_state)
    decompositions = [
        segmenter.segment(target_forms[t]) for t in tqdm(new_ids, desc="Decomposing new tokens", leave=False)
    ]
    new_forms = None if new is None else token_forms(new)
    return Alignment(source_forms, target_forms, shared, new_ids, decompositions, detect_family(target_state),
                     new_forms)


def _check_extends(source: Tokenizer, target: Tokenizer, source_forms: list[TokenForm],
                   target_forms: list[TokenForm]) -> None:
    """`keep_source_ids` pairs each source id with itself: refuse a target that does not keep them all, which would
    give a silently wrong alignment."""
    differing = next((i for i, form in enumerate(source_forms)
                      if i >= len(target_forms) or target_forms[i].key != form.key), None)
    if differing is None:
        return
    found = (f"is {target.convert_ids_to_tokens(differing)!r}" if differing < len(target_forms)
             else f"does not exist ({len(target_forms)} tokens)")
    raise TokenizerMismatchError(
        f"keep_source_ids=True, but target does not extend source: id {differing} is "
        f"{source.convert_ids_to_tokens(differing)!r} in source ({len(source_forms)} tokens) and {found} in target. "
        "Pass as target the tokenizer merge_tokenizers(source, new) returned, or keep_source_ids=False to pair "
        "tokens by their forms."
    )
