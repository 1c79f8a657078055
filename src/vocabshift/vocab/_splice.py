"""The model-level edits of a tokenizer merge: BPE merges spliced after the old ones, Unigram and WordPiece pieces
appended, and new pieces dropped again (with everything built from them) when they must not stay."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tokenizers import models

from .forms import BYTE_PIECE

__all__ = ["append_unigram", "append_wordpiece", "built_from", "drop_pieces", "drop_unreachable", "merge_pairs",
           "next_id", "splice_bpe"]


def merge_pairs(model: dict[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for pair in model.get("merges", []):
        left, right = pair.split(" ", 1) if isinstance(pair, str) else pair
        pairs.append((left, right))
    return pairs


def built_from(model: dict[str, Any], pieces: Iterable[str], *, first_new_id: int) -> dict[str, set[str]]:
    """Each of `pieces` with every new piece built from it (a BPE merge needs it, directly or not), which
    `drop_pieces` would remove with it; itself alone for Unigram and WordPiece."""
    if model["type"] != "BPE":
        return {piece: {piece} for piece in pieces}
    children: dict[str, list[str]] = collections.defaultdict(list)
    for left, right in merge_pairs(model):
        if model["vocab"][left + right] >= first_new_id:  # an old piece keeps its old merges
            children[left].append(left + right)
            children[right].append(left + right)
    result = {}
    for piece in pieces:
        seen, stack = {piece}, [piece]
        while stack:
            fresh = [child for child in children.get(stack.pop(), ()) if child not in seen]
            seen.update(fresh)
            stack.extend(fresh)
        result[piece] = seen
    return result


def next_id(state: dict[str, Any]) -> int:
    vocab = state["model"]["vocab"]
    ids = list(range(len(vocab))) if isinstance(vocab, list) else list(vocab.values())
    return max(ids + [entry["id"] for entry in state.get("added_tokens", [])]) + 1


def splice_bpe(state: dict[str, Any], new_state: dict[str, Any], natives: dict[str, str], wanted: set[str],
               allowed: Callable[[str], bool]) -> int:
    """Append the new tokenizer's merges that build wanted pieces; return how many pieces stay unreachable.

    `natives` spells every new piece as the old model writes it. A wanted piece whose two parts both exist (old
    pieces, or pieces added before) gets its own merge; the others, and pieces the merged table does not produce
    from their own text, are built from what it produces instead (`_build`), through pieces that `allowed` accepts.
    """
    vocab, merges = state["model"]["vocab"], state["model"]["merges"]
    first, added, pending = next_id(state), list[str](), list[str]()
    for piece, native in natives.items():  # new base characters (SentencePiece BPE may lack some), those of
        if piece not in wanted or BYTE_PIECE.match(native):  # longer pieces too: without 'э' the model would
            continue  # cut 'элемент' into byte pieces
        for char in native:
            if char not in vocab and (len(native) == 1 or allowed(char)):
                vocab[char] = first + len(added)
                added.append(char)
    for left, right in merge_pairs(new_state["model"]):
        a, b, joined = natives.get(left), natives.get(right), natives.get(left + right)
        if left + right not in wanted or a is None or b is None or joined is None or joined in vocab:
            continue
        # the parts' spellings need not add up to the piece's: byte-level 'Ñ' + 'į' are SentencePiece '<0xD1>' and
        # '<0x8D>', but the piece is 'э' (a merge of the two would make a piece that reads '<0xD1><0x8D>')
        if a + b == joined and a in vocab and b in vocab:
            vocab[joined] = first + len(added)
            merges.append([a, b])
            added.append(joined)
        else:
            pending.append(joined)
    # last, so that their merges rank below all the others: wanted pieces no merge above reached, for a part the old
    # model cannot spell (byte-level 'ĠÐ', half of ' н') or no merge at all (a SentencePiece letter, two bytes in
    # byte-level BPE)
    reached = set(pending)
    others = [native for piece, native in natives.items()
              if piece in wanted and native not in vocab and native not in reached and not BYTE_PIECE.match(native)]
    dead = _repair(state, added + pending, allowed) | _repair(state, others, allowed)
    return drop_pieces(state, dead, first_new_id=first)


def _bpe_model(model: dict[str, Any]) -> models.BPE:
    """The BPE model of a tokenizer.json `model` entry, built directly (no JSON round trip of the whole state)."""
    options = {key: model[key] for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix")
               if model.get(key) is not None}
    return models.BPE(vocab=model["vocab"], merges=merge_pairs(model), byte_fallback=bool(model.get("byte_fallback")),
                      fuse_unk=bool(model.get("fuse_unk")), ignore_merges=bool(model.get("ignore_merges")), **options)


def _unreachable(state: dict[str, Any], pieces: list[str]) -> dict[str, list[str]]:
    """Pieces the BPE model does not produce from their own text, with what it produces instead."""
    model = _bpe_model(state["model"])
    result = {}
    for piece in pieces:
        produced = [token.value for token in model.tokenize(piece)]
        if produced != [piece]:
            result[piece] = produced
    return result


def drop_unreachable(state: dict[str, Any], *, first_new_id: int) -> int:
    """Drop the new BPE pieces that the model does not produce from their own text; return how many."""
    pieces = [piece for piece, index in state["model"]["vocab"].items() if index >= first_new_id]
    dead = set(_unreachable(state, pieces))
    return drop_pieces(state, dead, first_new_id=first_new_id)


def _repair(state: dict[str, Any], pieces: list[str], allowed: Callable[[str], bool]) -> set[str]:
    """Build every piece the model does not produce from its own text; return those still unreachable.

    Merges appended later rank below every merge that builds a reachable piece, so only pieces that were
    unreachable need checking again.
    """
    unreachable, ids = _unreachable(state, pieces), itertools.count(next_id(state))  # ids: one count, not a scan
    for _ in range(3):
        if not unreachable:
            break
        known = {tuple(pair) for pair in state["model"]["merges"][-10 * len(unreachable):]}
        for piece, produced in unreachable.items():
            _build(state, piece, produced, allowed, known, ids)
        unreachable = _unreachable(state, list(unreachable))
    return set(unreachable)


def _build(state: dict[str, Any], piece: str, produced: list[str], allowed: Callable[[str], bool],
           known: set[tuple[str, str]], ids: Iterator[int]) -> None:
    """Append merges that join `produced` into `piece`, each joining two neighbours into a piece `allowed` accepts
    (a merge result that could occur in source-language text would change how it is cut); give up otherwise. New
    pieces take their ids from `ids`."""
    vocab, merges, sequence = state["model"]["vocab"], state["model"]["merges"], list(produced)
    if state["model"].get("byte_fallback") and any(BYTE_PIECE.match(part) for part in sequence):
        return  # a merge of '<0xD1>' and '<0x8D>' makes a piece that reads '<0xD1><0x8D>', not 'э'
    while len(sequence) > 1:
        index = next((i for i in range(len(sequence) - 1) if allowed(sequence[i] + sequence[i + 1])), None)
        if index is None:
            return
        pair = (sequence[index], sequence[index + 1])
        joined = pair[0] + pair[1]
        if joined not in vocab:
            vocab[joined] = next(ids)
        if pair not in known:
            merges.append(list(pair))
            known.add(pair)
        sequence[index : index + 2] = [joined]


def drop_pieces(state: dict[str, Any], dead: set[str], *, first_new_id: int) -> int:
    """Remove new pieces (and, for BPE, every new piece built from them), then renumber the new ids densely; return
    how many pieces went."""
    model = state["model"]
    size = len(model["vocab"])
    if model["type"] == "Unigram":
        model["vocab"] = model["vocab"][:first_new_id] + [e for e in model["vocab"][first_new_id:] if e[0] not in dead]
        return size - len(model["vocab"])
    if model["type"] == "BPE":
        dead = _with_descendants(model, dead, first_new_id)
        model["merges"] = [m for m in model["merges"] if not {m[0], m[1], m[0] + m[1]} & dead]
    kept = sorted((i, p) for p, i in model["vocab"].items() if i >= first_new_id and p not in dead)
    model["vocab"] = {p: i for p, i in model["vocab"].items() if i < first_new_id}
    model["vocab"].update({piece: first_new_id + offset for offset, (_, piece) in enumerate(kept)})
    return size - len(model["vocab"])


def _with_descendants(model: dict[str, Any], dead: set[str], first_new_id: int) -> set[str]:
    """`dead` plus every new piece whose merge needs a dead piece (merges come in build order). An old piece that a
    new piece also builds (a split SentencePiece's convention adds, `_splits`) stays, and so do its old merges."""
    dead = set(dead)
    for a, b in merge_pairs(model):
        if (a in dead or b in dead) and model["vocab"][a + b] >= first_new_id:
            dead.add(a + b)
    return dead


def append_unigram(state: dict[str, Any], new_state: dict[str, Any], natives: dict[str, str], wanted: set[str]) -> int:
    vocab = state["model"]["vocab"]
    present = {piece for piece, _ in vocab}
    scores = dict(map(tuple, new_state["model"]["vocab"]))
    for piece, native in natives.items():
        if piece in wanted and native not in present:
            vocab.append([native, scores[piece]])
            present.add(native)
    return 0


def append_wordpiece(state: dict[str, Any], natives: dict[str, str], wanted: set[str]) -> int:
    vocab = state["model"]["vocab"]
    index = next_id(state)
    for piece, native in natives.items():
        if piece in wanted and native not in vocab:
            vocab[native], index = index, index + 1
    return 0
