"""Merge a new tokenizer into an old one (extend mode): old ids kept, new tokens appended inside the model.

New tokens become part of the tokenizer's model, not AddedTokens (which bypass merges and slow tokenization down):
BPE gets the new merges spliced after the old ones (a tokenizer converted from SentencePiece gets a merge for every
split of a new piece, as its old pieces have: `_splits`), Unigram gets new pieces with their scores, WordPiece gets
new vocabulary entries. The old normalizer, pre-tokenizer, post-processor, decoder, added tokens and chat template
stay. For BPE, new tokens that the merged merge table can never produce are repaired when one merge suffices and
dropped otherwise, so that every added token is reachable. Source-language text is cut as before: by construction
when the new tokens' script differs from the old vocabulary's, and on request (`keep_source_segmentation`) by
leaving out the new tokens that change how given source-language lines are cut.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from huggingface_hub.utils import tqdm
from transformers import AutoTokenizer

from .._disk import scratch_folder
from .._typing import Tokenizer as FastTokenizer
from .._typing import TokenizerLike
from ..arguments import check_flag
from ..corpus import text_lines
from ..errors import IncompatibleTokenizerError, InvalidArgumentError
from ._keep import TARGET_LEAN, keep_source
from ._splice import append_unigram, append_wordpiece, drop_unreachable, next_id, splice_bpe
from ._splits import add_every_split, has_every_split
from .forms import Family, TokenForm, backend_state, detect_family, native_bytes, native_string, token_forms
from .load import load_tokenizer
from .stats import bound_to_script, changed_share, dominant_script, tokens_per_word

__all__ = ["TARGET_LEAN", "MergeReport", "merge_tokenizers", "rebuild_tokenizer"]

logger = logging.getLogger(__name__)

# Japanese writes its words in kana and in kanji (HAN): whichever has more letters among a Japanese tokenizer's
# pieces, the pieces of the other are its own words too (with one script, '言語' or 'ます' was left out)
_PARTNER_SCRIPTS = {"JAPANESE": "HAN", "HAN": "JAPANESE"}


@dataclass(frozen=True)
class MergeReport:
    """What a tokenizer merge did.

    Attributes:
        tokens_added (`int`): tokens appended after the old ones.
        tokens_dropped (`int`): new tokens left out because the merged BPE could never produce them.
        target_tokens_per_word_before / target_tokens_per_word_after (`float | None`): fertility of the old and
            merged tokenizer on the given target-language text.
        source_lines_changed (`float | None`): share of the given source-language lines whose segmentation changed.
        source_lines_checked (`int | None`): how many source-language lines that share is measured on.
        tokens_dropped_for_source (`int`): new tokens left out because they changed source-language lines
            (`keep_source_segmentation=True`).
    """

    tokens_added: int
    tokens_dropped: int = 0
    target_tokens_per_word_before: float | None = None
    target_tokens_per_word_after: float | None = None
    source_lines_changed: float | None = None
    source_lines_checked: int | None = None
    tokens_dropped_for_source: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merge_tokenizers(
    source: TokenizerLike,
    new: TokenizerLike,
    *,
    target_texts: Sequence[str] | None = None,
    source_texts: Sequence[str] | None = None,
    keep_source_segmentation: bool = False,
) -> tuple[FastTokenizer, MergeReport]:
    """Extend the fast tokenizer `source` with the tokens of `new`.

    Args:
        source: the model's tokenizer; every one of its ids keeps its meaning.
        new: a target-language tokenizer with a model of the same kind (BPE, Unigram or WordPiece); its special
            and added tokens are not carried over (a warning names those the old tokenizer lacks).
        target_texts (`Sequence[str]`, *optional*): target-language lines for the fertility figures of the report
            and for `keep_source_segmentation`.
        source_texts (`Sequence[str]`, *optional*): source-language lines for the segmentation-change figure.
        keep_source_segmentation (`bool`, defaults to `False`): leave out the new tokens that change how a line of
            `source_texts` is cut (for a target language in the source's script, where the script filter cannot
            tell the languages apart): every one of them, or with `target_texts` those not at least `TARGET_LEAN`
            times as frequent, per token, in `target_texts` as in `source_texts` (counting, for BPE, the tokens
            built from them, which would go with them).

    Returns:
        `(merged_tokenizer, MergeReport)`; the merged tokenizer has the class and settings of `source`.

    Raises:
        `IncompatibleTokenizerError`: if the two tokenizer models are of different kinds.
        `InvalidArgumentError`: `keep_source_segmentation` without `source_texts` (`InvalidArgumentTypeError`: not
            True or False).
        `CorpusError`: `target_texts` or `source_texts` is a string, holds a non-string or no text at all.
    """
    check_flag(keep_source_segmentation, name="keep_source_segmentation")
    source, new = load_tokenizer(source, argument="source"), load_tokenizer(new, argument="new")
    target_texts = None if target_texts is None else text_lines(target_texts, name="target_texts")
    source_texts = None if source_texts is None else text_lines(source_texts, name="source_texts")
    if keep_source_segmentation and not source_texts:
        raise InvalidArgumentError(
            "keep_source_segmentation=True needs source_texts: pass source-language lines whose segmentation must "
            "stay as it is."
        )
    state, new_state = backend_state(source), backend_state(new)
    family = detect_family(state)
    kind, new_kind = state["model"]["type"], new_state["model"]["type"]
    if kind != new_kind:
        raise IncompatibleTokenizerError(
            f"Cannot extend a {kind} tokenizer with the {new_kind} tokenizer given as new_tokenizer: train the new "
            f"tokenizer as {kind} (the old one's kind), or use mode='replace'."
        )
    _warn_added_tokens(source, new_state)
    _warn_letter_changes(state, new_state)
    before = len(source)
    with tqdm(total=4, desc="Merging tokenizers", leave=False) as progress:
        _fill_holes(state)
        first_new_id = next_id(state)
        covers_bytes = family == "bytelevel" or bool(state["model"].get("byte_fallback"))
        pieces = _new_pieces(new_state, token_forms(new, new_state))
        natives = _natives(pieces, family)
        target = _target_scripts(pieces, token_forms(source, state))
        wanted = _wanted(pieces, target, covers_bytes) & natives.keys()
        progress.update()
        if kind == "BPE":
            allowed = (lambda native: True) if target is None else functools.partial(
                _native_bound, family=family, target=target)
            dropped = _splice_bpe(state, new_state, natives, wanted, allowed, family)
        elif kind == "Unigram":
            dropped = append_unigram(state, new_state, natives, wanted)
        else:
            dropped = append_wordpiece(state, natives, wanted)
        progress.update()
        for_source = keep_source(state, source_texts or (), first_new_id, target_texts or ()) \
            if keep_source_segmentation else 0
        merged = rebuild_tokenizer(source, state)
        progress.update()
        report = MergeReport(len(merged) - before, dropped, *_fertility(source, merged, target_texts, source_texts),
                             len(source_texts) if source_texts else None, for_source)
        progress.update()
    logger.info("Merged tokenizer: %s", report)
    return merged, report


def _warn_added_tokens(source: Any, new_state: dict[str, Any]) -> None:
    """Say which added tokens of the new tokenizer (its specials, tokens added to it) the merge leaves out: only its
    model's pieces are merged, so that a token such as a language tag would otherwise vanish without a word."""
    vocab = source.get_vocab()
    left_out = [entry["content"] for entry in new_state.get("added_tokens", []) if entry["content"] not in vocab]
    if left_out:
        logger.warning(
            "new_tokenizer's added tokens %s are left out: only the pieces of its model are merged, and the model "
            "keeps its own special tokens. To give the model a token of its own (e.g. a language tag), add it to "
            "the model's tokenizer and rows before extending (tokenizer.add_special_tokens(...) and "
            "model.resize_token_embeddings(len(tokenizer))), then extend with that tokenizer as source_tokenizer.",
            left_out[:10] + (["..."] if len(left_out) > 10 else []),
        )


def _warn_letter_changes(state: dict[str, Any], new_state: dict[str, Any]) -> None:
    """Say when the new tokenizer's normalizer changes letters otherwise than the old one's (decomposes them, as
    `normalizers.NFD()` does, lowercases or strips accents): its pieces are spelled as text it normalized, and the
    merged tokenizer normalizes as the old one, so pieces such as NFD's 'e' + U+0301 are rarely or never produced."""
    old, new = _letter_changes(state.get("normalizer")), _letter_changes(new_state.get("normalizer"))
    if old != new:
        logger.warning(
            "new_tokenizer's normalizer %s, the model's tokenizer's %s: the merged tokenizer keeps the model's, so the "
            "new pieces spelled otherwise are rarely or never used. Train the new tokenizer with the model's "
            "normalizer (vocabshift.train_tokenizer(texts, like=<the model's tokenizer>) copies it).",
            _said(new), _said(old))


def _letter_changes(normalizer: Any) -> frozenset[str]:
    """What a tokenizers normalizer (its JSON) does to letters: decomposes them, lowercases, strips accents."""
    if not isinstance(normalizer, dict):
        return frozenset()
    kind = str(normalizer.get("type"))
    if kind == "Sequence":
        return frozenset().union(*map(_letter_changes, normalizer.get("normalizers") or []))
    if kind == "BertNormalizer":  # strip_accents None follows lowercase; stripping decomposes first
        lowercase, strip = normalizer.get("lowercase"), normalizer.get("strip_accents")
        strips = lowercase if strip is None else strip
        return frozenset(["lowercases"] * bool(lowercase) + ["decomposes letters", "strips accents"] * bool(strips))
    return frozenset({"NFD": {"decomposes letters"}, "NFKD": {"decomposes letters"}, "Lowercase": {"lowercases"},
                      "StripAccents": {"strips accents"}}.get(kind, set()))


def _said(changes: frozenset[str]) -> str:
    return " and ".join(sorted(changes)) if changes else "changes no letter"


def rebuild_tokenizer(like: Any, state: dict[str, Any]) -> Any:
    """A tokenizer of the class and settings of `like` whose backend is `state` (saved and reloaded)."""
    with scratch_folder() as folder:
        like.save_pretrained(folder)
        Path(folder, "tokenizer.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        return AutoTokenizer.from_pretrained(folder)


def _splice_bpe(state: dict[str, Any], new_state: dict[str, Any], natives: dict[str, str], wanted: set[str],
                allowed: Any, family: Family) -> int:
    """`splice_bpe`, keeping the convention of a tokenizer converted from SentencePiece (a merge for every split of
    every piece, `_splits`) where the old tokenizer has it."""
    every = family == "sentencepiece" and has_every_split(state["model"])
    old_merges, first_new_id = len(state["model"]["merges"]), next_id(state)
    dropped = splice_bpe(state, new_state, natives, wanted, allowed)
    if every:
        add_every_split(state["model"], old_merges, first_new_id)
        dropped += drop_unreachable(state, first_new_id=first_new_id)
    return dropped


def _fertility(source: Any, merged: Any, target_texts: Any, source_texts: Any) -> tuple[Any, Any, Any]:
    before = tokens_per_word(source, target_texts) if target_texts else None
    after = tokens_per_word(merged, target_texts) if target_texts else None
    changed = changed_share(source, merged, source_texts) if source_texts else None
    return before, after, changed


def _fill_holes(state: dict[str, Any]) -> None:
    """Give added tokens that sit beyond the model vocabulary a model entry at their id.

    Otherwise `tokenizers` renumbers them after the model vocabulary once new tokens are appended, and they would
    collide with the new ids (Llama-3 keeps its special tokens after the BPE vocabulary).
    """
    vocab = state["model"]["vocab"]
    if isinstance(vocab, dict):
        ids = set(vocab.values())
        for entry in state.get("added_tokens", []):
            if entry["id"] not in ids and entry["content"] not in vocab:
                vocab[entry["content"]] = entry["id"]
                ids.add(entry["id"])
        return
    lowest = min((score for _, score in vocab), default=0.0)
    for entry in sorted(state.get("added_tokens", []), key=lambda e: e["id"]):
        while len(vocab) <= entry["id"]:
            vocab.append([f"<vocabshift-hole-{len(vocab)}>", lowest - 10.0])
        if vocab[entry["id"]][0].startswith("<vocabshift-hole-"):
            vocab[entry["id"]][0] = entry["content"]


def _new_pieces(new_state: dict[str, Any], forms: list[TokenForm]) -> dict[str, TokenForm]:
    """The new tokenizer's model pieces (not its added tokens) in id order, with their forms."""
    vocab = new_state["model"]["vocab"]
    pairs = enumerate(piece for piece, _ in vocab) if isinstance(vocab, list) else ((i, p) for p, i in vocab.items())
    return {piece: forms[index] for index, piece in sorted(pairs) if not forms[index].added}


def _target_scripts(pieces: dict[str, TokenForm], old_forms: list[TokenForm]) -> frozenset[str] | None:
    """The new tokens' script (with its partner, `_PARTNER_SCRIPTS`) when it differs from the old vocabulary's, else
    None (no script filter applies)."""
    target = dominant_script(form.text for form in pieces.values())
    old = dominant_script(f.text for f in old_forms if not f.special)
    if target is None or target == old:
        return None
    return frozenset({target, _PARTNER_SCRIPTS.get(target, target)} - {old})


def _wanted(pieces: dict[str, TokenForm], target: frozenset[str] | None, covers_bytes: bool) -> set[str]:
    """Which new pieces to add: with target scripts other than the old one's, those bound to them.

    A piece is bound to the scripts when its bytes can only occur in text with a letter of them (a letter, or the first
    bytes of a character that can only be one). Every merge (or piece) added then builds a bound piece, so text
    without such letters is cut exactly as before: pieces of other scripts (Latin names, digit and punctuation runs
    in Russian text) would change how source-language text is cut. Single characters are kept when the old tokenizer
    has no byte fallback (it would cut them into unknown tokens).
    """
    if target is None:
        return set(pieces)
    return {piece for piece, form in pieces.items()
            if bound_to_script(form.surface, target) or (len(form.text) == 1 and not covers_bytes)}


def _native_bound(native: str, *, family: Family, target: frozenset[str]) -> bool:
    return bound_to_script(native_bytes(native, family), target)


def _natives(pieces: dict[str, TokenForm], family: Family) -> dict[str, str]:
    """Each new piece written as the old tokenizer's model writes it (pieces it cannot write are left out)."""
    natives = {piece: native_string(form, family) for piece, form in pieces.items()}
    return {piece: native for piece, native in natives.items() if native is not None}
