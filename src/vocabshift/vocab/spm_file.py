"""A SentencePiece model file (`tokenizer.model`) in step with the `tokenizer.json` beside it, or none at all.

Llama-2, Mistral and Gemma ship both files. `sentencepiece`, slow tokenizers and llama.cpp's converter read
tokenizer.model and ignore tokenizer.json, so one that does not hold the vocabulary of tokenizer.json silently gives
them another vocabulary. transformers 5 saves a fast tokenizer as tokenizer.json alone (it neither copies nor updates
the tokenizer.model it was loaded with), so vocabshift writes tokenizer.model itself where it can be in step, and
never one that is not:

- extend mode (`attach_sentencepiece`): the source's file with the new pieces appended, scored so that
  `sentencepiece` cuts text as tokenizer.json does, which is checked on text before the file goes with the tokenizer;
- saving (`save_sentencepiece`): that file while the tokenizer is unchanged, or the file a loaded tokenizer came
  with where it holds exactly its vocabulary. Otherwise none (one the tokenizer's own save wrote is removed), with a
  warning that says why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as BackendTokenizer

from .._typing import Tokenizer
from ._splice import merge_pairs
from .forms import SPIECE, backend_state
from .spm_proto import BPE, CONTROL, UNIGRAM, USER_DEFINED, Piece, SentencePieceModel, parse_model

__all__ = ["FILE", "attach_sentencepiece", "save_sentencepiece", "sentencepiece_mismatch"]

logger = logging.getLogger(__name__)

FILE = "tokenizer.model"
_ATTRIBUTE = "_vocabshift_sentencepiece"
_KINDS = {BPE: "BPE", UNIGRAM: "Unigram"}  # SentencePiece model type -> tokenizer.json model type
_CHECK_LINES = 4000  # lines of the caller's text the extended file is checked on (new pieces' text besides)
_PIECES_PER_LINE = 16
_EXACT = 2**24  # float32 holds every integer below this, so BPE scores down to -_EXACT stay distinct


class _LeftOut(Exception):
    """Why no tokenizer.model can be written; raised and caught in this module only, then warned about."""


@dataclass(frozen=True)
class _Checked:
    """An extended tokenizer.model, and the key of the tokenizer state it was checked against."""

    data: bytes
    key: str


def attach_sentencepiece(source: Tokenizer, target: Tokenizer, *, mode: str, lines: Sequence[str]) -> None:
    """Give `target` the SentencePiece model of `source` with `target`'s new pieces, for `save_sentencepiece`.

    Nothing happens when `source` was loaded without a SentencePiece file (`vocab_file`). Otherwise the file is
    built and checked with `sentencepiece`: it must cut `lines` and the new pieces' text as `target` does, wherever
    the source's file cuts them as `source` does. When that fails, or the file cannot be built (replace mode, an
    entry sentencepiece cannot hold, sentencepiece not installed), a warning says why and `target` gets none.
    """
    found = _vocab_file(source)
    if found is None:
        return
    model, original = found
    try:
        if mode != "extend":
            raise _LeftOut("in replace mode the vocabulary is the new tokenizer's, not the source's with pieces "
                           "appended")
        state = backend_state(target)
        data = model.extended(_new_pieces(model, state))
        texts = [*lines[:_CHECK_LINES], *_piece_lines(state, len(model.pieces))]
        _check_encoding(original, data, source, target, texts)
    except _LeftOut as reason:
        logger.warning(
            "The source tokenizer has a %s, but none is written for the new vocabulary: %s. Folders saved with "
            "vocabshift.save_pretrained_atomic hold tokenizer.json alone then, which transformers and llama.cpp's "
            "converter read; sentencepiece and slow tokenizers need a tokenizer.model.", FILE, reason)
        return
    setattr(target, _ATTRIBUTE, _Checked(data, _key(state)))


def save_sentencepiece(tokenizer: Tokenizer, folder: str | os.PathLike, *, like: Tokenizer | None = None,
                       shown_as: str | os.PathLike | None = None) -> None:
    """After `tokenizer.save_pretrained(folder)`: write its tokenizer.model in step, or make sure there is none.

    The file is the one `attach_sentencepiece` checked (while the tokenizer is unchanged), else the one `tokenizer`
    (or `like`, e.g. the model it was made from) was loaded with, if it holds exactly `tokenizer`'s vocabulary.
    A tokenizer.model that `save_pretrained` wrote and that disagrees with tokenizer.json is removed. `shown_as`:
    the folder the warning names, where `folder` is a temporary one renamed into place afterwards.
    """
    path = Path(folder) / FILE
    data, reason = _file_for(tokenizer, like)
    if data is not None:
        path.write_bytes(data)
        return
    if path.is_file():
        left = sentencepiece_mismatch(folder)
        if left is None:
            return
        path.unlink()
        reason = reason or f"the {FILE} that save_pretrained wrote disagrees with tokenizer.json ({left})"
    if reason is not None:
        logger.warning("%s holds no %s: %s. sentencepiece, slow tokenizers and llama.cpp's converter would read the "
                       "wrong vocabulary from it; transformers reads tokenizer.json.", shown_as or folder, FILE, reason)


def sentencepiece_mismatch(folder: str | os.PathLike) -> str | None:
    """Why the tokenizer.model in `folder` disagrees with its tokenizer.json, or None (also when there is none).

    In step means: its pieces are tokenizer.json's tokens, id for id; tokenizer.json may have added tokens beyond
    them (as Gemma-3's image token), but no model piece. A tokenizer.model in another format (tiktoken) is not
    read by the SentencePiece paths and is not judged, nor is a tokenizer.json that does not load.
    """
    path, tokenizer_json = Path(folder) / FILE, Path(folder) / "tokenizer.json"
    if not path.is_file() or not tokenizer_json.is_file():
        return None
    try:
        model = parse_model(path.read_bytes())
    except ValueError:
        return None
    try:
        state = json.loads(BackendTokenizer.from_file(str(tokenizer_json)).to_str())
    except Exception:  # tokenizers' bare Exception: the tokenizer's own loader names the damage (inspect, push, gguf)
        return None
    return _mismatch(model.pieces, state, extension=False)


def _file_for(tokenizer: Tokenizer, like: Tokenizer | None) -> tuple[bytes | None, str | None]:
    """The tokenizer.model to write for `tokenizer`, or None and why (None when there is nothing to say)."""
    checked = getattr(tokenizer, _ATTRIBUTE, None)
    if isinstance(checked, _Checked):
        if checked.key == _key(backend_state(tokenizer)):
            return checked.data, None
        return None, "the tokenizer was changed after extend_vocabulary checked its tokenizer.model"
    for owner in (tokenizer, like):
        found = _vocab_file(owner)
        if found is not None:
            reason = _mismatch(found[0].pieces, backend_state(tokenizer), extension=False)
            if reason is None:
                return found[1], None
            whose = "the tokenizer" if owner is tokenizer else "its source"
            return None, f"the {FILE} {whose} was loaded with disagrees with its tokenizer.json ({reason})"
    return None, None


def _vocab_file(tokenizer: Any) -> tuple[SentencePieceModel, bytes] | None:
    """The SentencePiece model `tokenizer` was loaded with (its `vocab_file`, else the tokenizer.model of the folder
    it was loaded from: transformers 5's GemmaTokenizer keeps no `vocab_file`), parsed, and its bytes."""
    path = getattr(tokenizer, "vocab_file", None)
    folder = getattr(tokenizer, "name_or_path", None)
    if path is None and isinstance(folder, (str, os.PathLike)) and str(folder) and os.path.isdir(folder):
        path = Path(folder) / FILE
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        return None
    data = Path(path).read_bytes()
    try:
        return parse_model(data), data
    except ValueError:  # another format under that name (a tiktoken tokenizer.model)
        return None


def _tokens(state: dict[str, Any]) -> tuple[dict[int, str], dict[int, bool]]:
    """tokenizer.json's id -> token (model entries and added tokens), and added id -> whether it is special."""
    vocab = state["model"]["vocab"]
    tokens = dict(enumerate(piece for piece, _ in vocab)) if isinstance(vocab, list) else {i: p for p, i in
                                                                                             vocab.items()}
    added = {entry["id"]: bool(entry["special"]) for entry in state.get("added_tokens", [])}
    tokens.update({entry["id"]: entry["content"] for entry in state.get("added_tokens", [])})
    return tokens, added


def _mismatch(pieces: Sequence[Piece], state: dict[str, Any], *, extension: bool) -> str | None:
    """Why `pieces` are not tokenizer.json's tokens id for id (with `extension`, only its first ids)."""
    tokens, added = _tokens(state)
    beyond = [index for index in tokens if index >= len(pieces) and index not in added]
    if beyond and not extension:
        return f"it holds {len(pieces):,} pieces, tokenizer.json {len(tokens):,} tokens"
    for index, piece in enumerate(pieces):
        if tokens.get(index) != piece.text:
            return f"its piece {index} is {piece.text!r}, tokenizer.json's token {index} {tokens.get(index)!r}"
    return None


def _new_pieces(model: SentencePieceModel, state: dict[str, Any]) -> list[Piece]:
    """The entries of tokenizer.json after the file's pieces, as pieces of the file's model type."""
    kind = state["model"]["type"]
    if _KINDS.get(model.model_type) != kind:
        raise _LeftOut(f"its model type ({_KINDS.get(model.model_type, model.model_type)}) is not tokenizer.json's "
                       f"{kind}")
    if bool(state["model"].get("byte_fallback")) != model.byte_fallback:
        raise _LeftOut("byte fallback is on in only one of tokenizer.model and tokenizer.json")
    reason = _mismatch(model.pieces, state, extension=True)
    if reason is not None:
        raise _LeftOut(f"the source's {FILE} is not its tokenizer.json's vocabulary ({reason})")
    tokens, added = _tokens(state)
    old, last = len(model.pieces), max(tokens)
    if len(tokens) != last + 1:
        raise _LeftOut("tokenizer.json leaves ids without a token")
    plain = [tokens[i] for i in range(old, last + 1) if added.get(i) is False]
    if plain:  # the source's, which the check skips: its own file, without them, cuts their text otherwise
        raise _LeftOut(f"tokenizer.json has added tokens that are not special beyond the source's pieces (e.g. "
                       f"{plain[0]!r}), which sentencepiece would match as user-defined pieces, unlike tokenizer.json")
    scores = _bpe_scores(model, state, tokens, added) if kind == "BPE" else {
        index: float(score) for index, (_, score) in enumerate(state["model"]["vocab"])}
    pieces = [Piece(tokens[i], 0.0, CONTROL if added[i] else USER_DEFINED) if i in added else
              Piece(tokens[i], scores[i]) for i in range(old, last + 1)]
    seen = {piece.text for piece in model.pieces}
    for piece in pieces:
        if not piece.text or piece.text in seen:
            raise _LeftOut(f"sentencepiece cannot hold the entry {piece.text!r} (empty, or twice in the vocabulary)")
        seen.add(piece.text)
    return pieces


def _bpe_scores(model: SentencePieceModel, state: dict[str, Any], tokens: dict[int, str], added: dict[int, bool]
                ) -> dict[int, float]:
    """Scores of the new BPE pieces that rank them as tokenizer.json's merges do.

    SentencePiece's BPE joins the adjacent pair whose joined text is the piece of highest score; tokenizer.json joins
    the pair of its earliest merge. New merges follow the old ones, so the new pieces score below every old piece,
    in the order of the first merge that builds each. A single character is built by no merge: its score is never
    compared.
    """
    first: dict[str, int] = {}
    for rank, (left, right) in enumerate(merge_pairs(state["model"])):
        first.setdefault(left + right, rank)
    new = {index: token for index, token in tokens.items() if index >= len(model.pieces) and index not in added}
    unbuilt = sorted(token for token in new.values() if len(token) > 1 and token not in first)
    if unbuilt:
        raise _LeftOut(f"{len(unbuilt):,} new pieces (e.g. {unbuilt[0]!r}) are built by no merge of tokenizer.json, "
                       "where sentencepiece would build them")
    order = sorted((first.get(token, len(first)), index) for index, token in new.items())
    floor = math.floor(min(piece.score for piece in model.pieces)) - 1
    if floor - len(order) <= -_EXACT:
        raise _LeftOut("the old pieces' scores leave no room for distinct scores of the new pieces")
    return {index: float(floor - position) for position, (_, index) in enumerate(order)}


def _piece_lines(state: dict[str, Any], old: int) -> list[str]:
    """The new model pieces' text, a few pieces a line: text that exercises every new piece."""
    tokens, added = _tokens(state)
    texts = [tokens[i].replace(SPIECE, " ") for i in sorted(tokens) if i >= old and i not in added]
    return [line for start in range(0, len(texts), _PIECES_PER_LINE)
            if (line := "".join(texts[start : start + _PIECES_PER_LINE]).strip())]


def _check_encoding(original: bytes, data: bytes, source: Tokenizer, target: Tokenizer, lines: list[str]) -> None:
    """`sentencepiece` with `data` cuts each line as `target` does, wherever with `original` it cuts it as `source`
    does (a difference the source's own two files have is not the new pieces')."""
    try:
        import sentencepiece
    except ImportError:
        raise _LeftOut("checking it needs the sentencepiece package: pip install sentencepiece") from None
    try:
        before_model = sentencepiece.SentencePieceProcessor(model_proto=original)
        after_model = sentencepiece.SentencePieceProcessor(model_proto=data)
    except (RuntimeError, OSError) as error:
        raise _LeftOut(f"sentencepiece cannot load it ({error})") from None
    before = [e.ids for e in source.backend_tokenizer.encode_batch(lines, add_special_tokens=False)]
    after = [e.ids for e in target.backend_tokenizer.encode_batch(lines, add_special_tokens=False)]
    rows = zip(lines, before, before_model.encode(lines), after, after_model.encode(lines))
    for line, was, model_was, now, model_now in rows:
        if was == model_was and now != model_now:
            raise _LeftOut(f"sentencepiece would cut {line[:60]!r} into {model_now[:12]}..., tokenizer.json into "
                           f"{now[:12]}...")


def _key(state: dict[str, Any]) -> str:
    """What decides the ids of a text: normalizer, pre-tokenizer, model and added tokens."""
    parts = [state.get(name) for name in ("normalizer", "pre_tokenizer", "model", "added_tokens")]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
