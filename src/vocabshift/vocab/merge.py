"""Merge a new tokenizer into an old one (extend mode): old ids kept, new tokens appended inside the model.

New tokens become part of the tokenizer's model, not AddedTokens (which bypass merges and slow tokenization down):
BPE gets the new merges spliced after the old ones, Unigram gets new pieces with their scores, WordPiece gets new
vocabulary entries. The old normalizer, pre-tokenizer, post-processor, decoder, added tokens and chat template
stay. For BPE, new tokens that the merged merge table can never produce are repaired when one merge suffices and
dropped otherwise, so that every added token is reachable.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from transformers import AutoTokenizer

from ..errors import IncompatibleTokenizerError
from .forms import Family, TokenForm, backend_state, detect_family, native_string, token_forms
from .stats import changed_share, dominant_script, scripts_in, tokens_per_word

__all__ = ["MergeReport", "merge_tokenizers", "rebuild_tokenizer"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeReport:
    """What a tokenizer merge did.

    Attributes:
        tokens_added (`int`): tokens appended after the old ones.
        tokens_dropped (`int`): new tokens left out because the merged BPE could never produce them.
        target_tokens_per_word_before / target_tokens_per_word_after (`float | None`): fertility of the old and
            merged tokenizer on the given target-language text.
        source_lines_changed (`float | None`): share of the given source-language lines whose segmentation changed.
    """

    tokens_added: int
    tokens_dropped: int = 0
    target_tokens_per_word_before: float | None = None
    target_tokens_per_word_after: float | None = None
    source_lines_changed: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def merge_tokenizers(
    source: Any,
    new: Any,
    *,
    target_texts: Sequence[str] | None = None,
    source_texts: Sequence[str] | None = None,
) -> tuple[Any, MergeReport]:
    """Extend the fast tokenizer `source` with the tokens of `new`.

    Args:
        source: the model's tokenizer; every one of its ids keeps its meaning.
        new: a target-language tokenizer with a model of the same kind (BPE, Unigram or WordPiece); its special
            and added tokens are not carried over.
        target_texts (`Sequence[str]`, *optional*): target-language lines for the fertility figures of the report.
        source_texts (`Sequence[str]`, *optional*): source-language lines for the segmentation-change figure.

    Returns:
        `(merged_tokenizer, MergeReport)`; the merged tokenizer has the class and settings of `source`.

    Raises:
        `IncompatibleTokenizerError`: if the two tokenizer models are of different kinds.
    """
    state, new_state = backend_state(source), backend_state(new)
    family = detect_family(state)
    kind, new_kind = state["model"]["type"], new_state["model"]["type"]
    if kind != new_kind:
        raise IncompatibleTokenizerError(
            f"Cannot extend a {kind} tokenizer with the {new_kind} tokenizer given as new_tokenizer: train the new "
            f"tokenizer as {kind} (the old one's kind), or use mode='replace'."
        )
    before = len(source)
    _fill_holes(state)
    covers_bytes = family == "bytelevel" or bool(state["model"].get("byte_fallback"))
    pieces = _new_pieces(new_state, token_forms(new, new_state))
    converted = _converted(_wanted(pieces, token_forms(source, state), new_state, covers_bytes), family)
    if kind == "BPE":
        dropped = _splice_bpe(state, new_state, converted)
    elif kind == "Unigram":
        dropped = _append_unigram(state, new_state, converted)
    else:
        dropped = _append_wordpiece(state, converted)
    merged = rebuild_tokenizer(source, state)
    report = MergeReport(len(merged) - before, dropped, *_fertility(source, merged, target_texts, source_texts))
    logger.info("Merged tokenizer: %s", report)
    return merged, report


def rebuild_tokenizer(like: Any, state: dict[str, Any]) -> Any:
    """A tokenizer of the class and settings of `like` whose backend is `state` (saved and reloaded)."""
    with tempfile.TemporaryDirectory() as folder:
        like.save_pretrained(folder)
        Path(folder, "tokenizer.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        return AutoTokenizer.from_pretrained(folder)


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
    for entry in state.get("added_tokens", []):
        if isinstance(vocab, dict):
            if entry["id"] not in vocab.values() and entry["content"] not in vocab:
                vocab[entry["content"]] = entry["id"]
        else:
            lowest = min((score for _, score in vocab), default=0.0)
            while len(vocab) <= entry["id"]:
                vocab.append([f"<vocabshift-hole-{len(vocab)}>", lowest - 10.0])
            if len(vocab) - 1 == entry["id"] and vocab[-1][0].startswith("<vocabshift-hole-"):
                vocab[-1][0] = entry["content"]


def _new_pieces(new_state: dict[str, Any], forms: list[TokenForm]) -> dict[str, TokenForm]:
    """The new tokenizer's model pieces (not its added tokens) in id order, with their forms."""
    vocab = new_state["model"]["vocab"]
    pairs = enumerate(piece for piece, _ in vocab) if isinstance(vocab, list) else ((i, p) for p, i in vocab.items())
    return {piece: forms[index] for index, piece in sorted(pairs) if not forms[index].added}


def _merge_pairs(model: dict[str, Any]) -> list[tuple[str, str]]:
    return [tuple(pair.split(" ", 1)) if isinstance(pair, str) else tuple(pair) for pair in model.get("merges", [])]


def _wanted(
    pieces: dict[str, TokenForm], old_forms: list[TokenForm], new_state: dict[str, Any], covers_bytes: bool
) -> dict[str, TokenForm]:
    """Which new tokens to add: with a target script other than the old one's, those of the target script.

    Other tokens of a target-language corpus (English words, digit and punctuation runs in Russian text) would change
    how source-language text is cut: with them, 20% of English lines of the shared corpus were cut differently by
    SmolLM2 + a Russian BPE, without them none. Single characters are kept when the old tokenizer has no byte
    fallback (it would cut them into unknown tokens); BPE pieces that target-script tokens are built from are kept.
    """
    target = dominant_script(form.text for form in pieces.values())
    if target is None or target == dominant_script(f.text for f in old_forms if not f.special):
        return pieces
    wanted = {piece for piece, form in pieces.items() if _in_script(form, target, covers_bytes)}
    parents = {a + b: (a, b) for a, b in _merge_pairs(new_state["model"])}
    stack = list(wanted)
    while stack:
        for parent in parents.get(stack.pop(), ()):
            if parent not in wanted:
                wanted.add(parent)
                stack.append(parent)
    return {piece: form for piece, form in pieces.items() if piece in wanted}


def _in_script(form: TokenForm, target: str, covers_bytes: bool) -> bool:
    try:
        text = form.data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return target in scripts_in(text) or (len(text) == 1 and not covers_bytes)


def _converted(pieces: dict[str, TokenForm], family: Family) -> dict[str, str]:
    """Each wanted piece written as the old tokenizer's model writes it (pieces it cannot write are left out)."""
    natives = {piece: native_string(form, family) for piece, form in pieces.items()}
    return {piece: native for piece, native in natives.items() if native is not None}


def _next_id(state: dict[str, Any]) -> int:
    ids = list(state["model"]["vocab"].values()) + [entry["id"] for entry in state.get("added_tokens", [])]
    return max(ids) + 1


def _splice_bpe(state: dict[str, Any], new_state: dict[str, Any], converted: dict[str, str]) -> int:
    vocab, merges = state["model"]["vocab"], state["model"]["merges"]
    next_id, added = _next_id(state), []
    for piece, native in converted.items():  # new base characters (SentencePiece BPE may lack some)
        if len(native) == 1 and native not in vocab:
            vocab[native], next_id = next_id, next_id + 1
            added.append(native)
    for left, right in _merge_pairs(new_state["model"]):
        a, b = converted.get(left), converted.get(right)
        if a is None or b is None or a not in vocab or b not in vocab or a + b in vocab:
            continue
        vocab[a + b], next_id = next_id, next_id + 1
        merges.append([a, b])
        added.append(a + b)
    dead = _repair_unreachable(state, added)
    _drop(state, dead, first_new_id=next_id - len(added))
    return len(dead)


def _unreachable(state: dict[str, Any], pieces: list[str]) -> dict[str, list[str]]:
    """Pieces the BPE model does not produce from their own text, with what it produces instead."""
    model = Tokenizer.from_str(json.dumps(state)).model
    result = {}
    for piece in pieces:
        produced = [token.value for token in model.tokenize(piece)]
        if produced != [piece]:
            result[piece] = produced
    return result


def _repair_unreachable(state: dict[str, Any], added: list[str]) -> set[str]:
    """Add one merge for each unreachable piece that comes out as two pieces; return those still unreachable."""
    for _ in range(3):
        unreachable = _unreachable(state, added)
        repairable = [produced for produced in unreachable.values() if len(produced) == 2]
        if not repairable:
            return set(unreachable)
        state["model"]["merges"].extend([list(pair) for pair in repairable])
    return set(_unreachable(state, added))


def _drop(state: dict[str, Any], dead: set[str], *, first_new_id: int) -> None:
    """Remove unreachable pieces (and the merges that would build them), then renumber the new ids densely."""
    model = state["model"]
    model["merges"] = [m for m in model["merges"] if not {m[0], m[1], m[0] + m[1]} & dead]
    kept = sorted((i, p) for p, i in model["vocab"].items() if i >= first_new_id and p not in dead)
    model["vocab"] = {p: i for p, i in model["vocab"].items() if i < first_new_id}
    model["vocab"].update({piece: first_new_id + offset for offset, (_, piece) in enumerate(kept)})


def _append_unigram(state: dict[str, Any], new_state: dict[str, Any], converted: dict[str, str]) -> int:
    vocab = state["model"]["vocab"]
    present = {piece for piece, _ in vocab}
    scores = dict(map(tuple, new_state["model"]["vocab"]))
    for piece, native in converted.items():
        if native not in present:
            vocab.append([native, scores[piece]])
            present.add(native)
    return 0


def _append_wordpiece(state: dict[str, Any], converted: dict[str, str]) -> int:
    vocab = state["model"]["vocab"]
    next_id = _next_id(state)
    for native in converted.values():
        if native not in vocab:
            vocab[native], next_id = next_id, next_id + 1
    return 0
