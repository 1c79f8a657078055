"""Segment a token form with another tokenizer: the decomposition of a new token into old ids.

The old tokenizer segments the token's text *in its word position*: a word-start token as it would appear after a
space, a continuation piece as it would appear inside a word. To get that without the usual tricks (a dummy prefix
that may merge with the text), the old tokenizer is rebuilt with every "add a prefix space" switch turned off and
without its post-processor; byte-level text that is not valid UTF-8 goes straight to the model in byte form.
"""

from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

from .._typing import Tokenizer as FastTokenizer
from .forms import TokenForm, backend_state, byte_alphabet, detect_family, native_string

__all__ = ["Segmenter"]


def _without_prefixes(node: Any) -> Any:
    """A normalizer/pre-tokenizer tree with prefix-space insertion switched off and `Prepend` normalizers dropped."""
    if isinstance(node, list):
        return [_without_prefixes(item) for item in node
                if not (isinstance(item, dict) and item.get("type") == "Prepend")]
    if not isinstance(node, dict):
        return node
    node = {key: _without_prefixes(value) for key, value in node.items()}
    if node.get("type") == "Prepend":
        return None
    if "add_prefix_space" in node:
        node["add_prefix_space"] = False
    if node.get("type") == "Metaspace":
        node["prepend_scheme"] = "never"
    return node


class Segmenter:
    """Segments token forms with a (source) tokenizer, the way that tokenizer would cut their text in context."""

    def __init__(self, tokenizer: FastTokenizer, state: dict[str, Any] | None = None) -> None:
        state = state or backend_state(tokenizer)
        self.family = detect_family(state)
        state = {
            **state,
            "normalizer": _without_prefixes(state.get("normalizer")),
            "pre_tokenizer": _without_prefixes(state.get("pre_tokenizer")),
            "post_processor": None,
        }
        self._backend = Tokenizer.from_str(json.dumps(state))
        model = state["model"]
        self._unk = model.get("unk_id") if model["type"] == "Unigram" else (
            self._backend.token_to_id(model["unk_token"]) if model.get("unk_token") else None)
        self._byte_fallback = bool(model.get("byte_fallback"))
        self._prefix = model.get("continuing_subword_prefix") or "##"
        self._max_chars = model.get("max_input_chars_per_word", 100)

    def segment(self, form: TokenForm) -> list[int]:
        """Old ids for the text of `form` in its word position; `[]` when the old tokenizer cannot represent it."""
        if not form.surface:
            return []
        try:
            text = form.surface.decode("utf-8")
        except UnicodeDecodeError:
            return self._segment_bytes(form.surface)
        if self.family == "wordpiece" and not form.word_start:
            return self._wordpiece_continuation(text)
        ids = self._backend.encode(text, add_special_tokens=False).ids
        return [] if self._unk in ids else ids  # a part it cannot represent: no pieces spell the token

    def _segment_bytes(self, raw: bytes) -> list[int]:
        if self.family == "bytelevel":
            alphabet = byte_alphabet()
            pieces = self._backend.model.tokenize("".join(alphabet[b] for b in raw))
            return [piece.id for piece in pieces]
        if self.family == "sentencepiece" and self._byte_fallback:
            found = [self._backend.token_to_id(native_string(TokenForm(bytes([b]), fallback=True), "sentencepiece")
                                               or "") for b in raw]
            ids = [i for i in found if i is not None]
            return ids if len(ids) == len(found) else []
        return []

    def _wordpiece_continuation(self, text: str) -> list[int]:
        """Greedy longest-match-first over `##` pieces, as WordPiece segments the inside of a word."""
        normalizer = self._backend.normalizer
        text = normalizer.normalize_str(text) if normalizer else text
        if not text or len(text) > self._max_chars or any(c.isspace() for c in text):
            return []
        ids, start = [], 0
        while start < len(text):
            for end in range(len(text), start, -1):
                found = self._backend.token_to_id(self._prefix + text[start:end])
                if found is not None:
                    ids.append(found)
                    start = end
                    break
            else:
                return []
        return ids
