"""Canonical token forms: what each token id stands for, independent of the tokenizer family.

A token's canonical form is the UTF-8 bytes it stands for, whether it carries a word-start marker (a leading space
in byte-level BPE, `▁` in SentencePiece, the absence of `##` in WordPiece), and whether it is an added or special
token. Two tokens from different tokenizers with equal forms stand for the same text in the same word position.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from .._typing import Tokenizer
from ..errors import UnsupportedTokenizerError

__all__ = ["BYTE_PIECE", "Family", "TokenForm", "backend_state", "byte_alphabet", "detect_family", "native_bytes",
           "native_string", "token_forms"]

Family = Literal["bytelevel", "sentencepiece", "wordpiece"]
BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # a SentencePiece byte-fallback piece
SPIECE = "\u2581"
_MAX_HOLES = 4096  # ids without a token accepted however small the vocabulary


@dataclass(frozen=True)
class TokenForm:
    """What one token stands for.

    Attributes:
        data (`bytes`): the UTF-8 bytes of the token, without its word-start marker.
        word_start (`bool`): the token carries a word-start marker (it is preceded by a space in running text).
        special (`bool`): a special token (bos, eos, chat markers, ...), matched by its content only.
        added (`bool`): an added token (matched on raw text before the tokenizer's model).
        fallback (`bool`): a SentencePiece byte-fallback piece (`<0xNN>`); it has the key of the character it
            encodes, but rows of ordinary pieces are preferred when both exist.
    """

    data: bytes
    word_start: bool = False
    special: bool = False
    added: bool = False
    fallback: bool = False

    @property
    def surface(self) -> bytes:
        """The bytes the token contributes to running text, its leading space included."""
        return (b" " if self.word_start else b"") + self.data

    @property
    def text(self) -> str:
        """`surface` decoded as UTF-8, with U+FFFD for partial characters (as `tokenizer.decode` shows it)."""
        return self.surface.decode("utf-8", errors="replace")

    @property
    def key(self) -> tuple[Any, ...]:
        """Equality key across tokenizers: specials match by content, other tokens by (bytes, word start)."""
        return ("special", self.data) if self.special else (self.data, self.word_start)


@functools.lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters (byte-level BPE)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> tuple[frozenset[str], dict[int, str]]:
    """The alphabet's characters, and a `str.translate` table from them to the latin-1 character of their byte."""
    return frozenset(byte_alphabet().values()), {ord(char): chr(byte) for byte, char in byte_alphabet().items()}


def backend_state(tokenizer: Tokenizer) -> dict[str, Any]:
    """The `tokenizer.json` content of a fast tokenizer, as a dict."""
    return json.loads(tokenizer.backend_tokenizer.to_str())


def _components(node: Any) -> list[dict[str, Any]]:
    """A normalizer / pre-tokenizer / decoder and, recursively, the members of its Sequence."""
    if not isinstance(node, dict):
        return []
    members = node.get("normalizers") or node.get("pretokenizers") or node.get("decoders") or []
    return [node] + [part for member in members for part in _components(member)]


def detect_family(state: dict[str, Any]) -> Family:
    """The family of a tokenizer from its `tokenizer.json` state.

    Raises:
        `UnsupportedTokenizerError`: for a tokenizer of none of the three families.
    """
    model = state["model"]
    if model["type"] == "WordPiece":
        return "wordpiece"
    parts = _components(state.get("normalizer")) + _components(state.get("pre_tokenizer"))
    types = {part.get("type") for part in parts}
    if "ByteLevel" in types:
        return "bytelevel"
    replaces_space = any(p.get("type") == "Replace" and p.get("content") == SPIECE for p in parts)
    if "Metaspace" in types or replaces_space:
        return "sentencepiece"
    raise UnsupportedTokenizerError(
        f"Tokenizer with model {model['type']!r} and pre-tokenizer/normalizer types {sorted(filter(None, types))} "
        "is not supported: vocabshift handles byte-level BPE (GPT-2, Llama-3, Qwen), SentencePiece-style "
        "(Llama-2, Mistral, Gemma) and WordPiece (BERT) tokenizers. Train the new tokenizer in one of these families."
    )


def _model_strings(state: dict[str, Any]) -> dict[int, str]:
    vocab = state["model"]["vocab"]
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        return {index: piece for index, (piece, _score) in enumerate(vocab)}
    return {index: piece for piece, index in vocab.items()}


def _model_form(piece: str, family: Family, state: dict[str, Any]) -> TokenForm:
    if family == "bytelevel":
        alphabet, table = _byte_decoder()
        raw = piece.translate(table).encode("latin-1") if alphabet.issuperset(piece) else piece.encode()  # else plain
        return TokenForm(raw[1:], True) if raw.startswith(b" ") else TokenForm(raw)
    if family == "wordpiece":
        prefix = state["model"].get("continuing_subword_prefix") or "##"
        if piece.startswith(prefix) and len(piece) > len(prefix):
            return TokenForm(piece[len(prefix):].encode())
        return TokenForm(piece.encode(), True)
    byte = BYTE_PIECE.match(piece)
    if byte and state["model"].get("byte_fallback"):
        return TokenForm(bytes([int(byte.group(1), 16)]), fallback=True)
    raw = piece.replace(SPIECE, " ").encode()
    return TokenForm(raw[1:], True) if raw.startswith(b" ") else TokenForm(raw)


def token_forms(tokenizer: Tokenizer, state: dict[str, Any] | None = None) -> list[TokenForm]:
    """The canonical form of every id of a fast tokenizer, indexed by id (`len(tokenizer)` entries).

    Ids that are holes in the vocabulary get an empty special form so that they never match anything.
    """
    state = state or backend_state(tokenizer)
    family = detect_family(state)
    strings = _model_strings(state)
    added = {entry["id"]: entry for entry in state.get("added_tokens", [])}
    size = max([*strings, *added, -1]) + 1
    _check_density(tokenizer, size, len(strings.keys() | added.keys()))
    forms = []
    for index in range(size):
        if index in added:
            entry = added[index]
            forms.append(TokenForm(entry["content"].encode(), False, bool(entry["special"]), True))
        elif index in strings:
            forms.append(_model_form(strings[index], family, state))
        else:
            forms.append(TokenForm(b"<hole %d>" % index, special=True))
    return forms


def _check_density(tokenizer: Tokenizer, size: int, count: int) -> None:
    """Refuse ids that run far past the tokens: every table here is indexed by id, so an id edited to a billion would
    take memory for a billion forms (a real vocabulary leaves a few holes, for reserved or removed tokens)."""
    if size - count > max(count, _MAX_HOLES):
        raise UnsupportedTokenizerError(
            f"The tokenizer {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__!r} has {count:,} "
            f"tokens but ids up to {size - 1:,}: {size - count:,} ids hold no token, too sparse a vocabulary to "
            "index by id (is its tokenizer.json edited by hand?). Number its tokens 0 to N-1, as tokenizers train "
            "them."
        )


def native_bytes(piece: str, family: Family) -> bytes:
    """The bytes a (non-added) BPE model piece of `family` stands for in running text, its leading space included."""
    if family == "bytelevel":
        alphabet, table = _byte_decoder()
        return piece.translate(table).encode("latin-1") if alphabet.issuperset(piece) else piece.encode()
    byte = BYTE_PIECE.match(piece)
    return bytes([int(byte.group(1), 16)]) if byte else piece.replace(SPIECE, " ").encode()


def native_string(form: TokenForm, family: Family) -> str | None:
    """How a (non-added) token form is written in a tokenizer model of `family`, or None if it cannot be."""
    if family == "bytelevel":
        return form.surface.decode("latin-1").translate(byte_alphabet())  # latin-1: one character per byte
    if family == "sentencepiece" and (form.fallback or not _is_utf8(form.data)):
        return f"<0x{form.surface[0]:02X}>" if len(form.surface) == 1 else None
    try:
        text = form.data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if family == "sentencepiece":
        return form.text.replace(" ", SPIECE) if form.surface else None
    if not text or any(c.isspace() for c in text):
        return None
    return text if form.word_start else "##" + text


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
