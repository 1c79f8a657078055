"""Build the tokenizer for replace mode: the new tokenizer's vocabulary with the model's conventions.

The new tokenizer brings its normalizer, pre-tokenizer, model and decoder. The model's own conventions stay: its
added and special tokens (appended when the new tokenizer lacks them, so their rows can be copied), the roles of
its special tokens (bos, eos, pad, ...), its post-processor (with ids remapped) and its chat template.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from .._disk import scratch_folder
from .._typing import Tokenizer
from ..errors import IncompatibleTokenizerError
from .forms import backend_state

__all__ = ["replacement_tokenizer"]

_MODEL_SETTINGS = ("model_max_length", "extra_special_tokens", "padding_side", "truncation_side")
_SIDES = ("padding_side", "truncation_side")  # a class default (LlamaTokenizer, GemmaTokenizer pad left) is unsaved


def replacement_tokenizer(source: Tokenizer, new: Tokenizer) -> Tokenizer:
    """`new` with the added tokens, special-token roles, post-processor and chat template of `source`."""
    state = _merged_state(source, new)
    with scratch_folder() as old_dir, scratch_folder() as new_dir:
        source.save_pretrained(old_dir)
        new.save_pretrained(new_dir)
        if state is not None:
            Path(new_dir, "tokenizer.json").write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
        _take_settings(Path(old_dir), Path(new_dir), {key: getattr(source, key) for key in _SIDES})
        return AutoTokenizer.from_pretrained(new_dir)


def _merged_state(source: Tokenizer, new: Tokenizer) -> dict[str, Any] | None:
    """`new`'s tokenizer.json with `source`'s missing added tokens appended and `source`'s post-processor (its ids
    looked up again); None when that is `new`'s own, as for an extended sibling (parsing and writing the JSON of a
    65k vocabulary costs about 0.5 s)."""
    old_state = backend_state(source)
    backend = new.backend_tokenizer
    present = {token.content for token in backend.get_added_tokens_decoder().values()}
    if all(entry["content"] in present for entry in old_state.get("added_tokens", [])):
        processor = _remap(old_state.get("post_processor"), backend.get_vocab(with_added_tokens=True))
        if processor == (None if backend.post_processor is None else json.loads(backend.post_processor.__getstate__())):
            return None
    state = backend_state(new)
    _append_added_tokens(state, old_state)
    state["post_processor"] = _remap(old_state.get("post_processor"), _ids_by_content(state))
    return state


def _append_added_tokens(state: dict[str, Any], old_state: dict[str, Any]) -> None:
    present = {entry["content"] for entry in state.get("added_tokens", [])}
    vocab = state["model"]["vocab"]
    model_ids = range(len(vocab)) if isinstance(vocab, list) else vocab.values()
    next_id = max([*model_ids, *(e["id"] for e in state.get("added_tokens", [])), -1]) + 1
    for entry in sorted(old_state.get("added_tokens", []), key=lambda e: e["id"]):
        if entry["content"] not in present:
            state.setdefault("added_tokens", []).append({**entry, "id": next_id})
            present.add(entry["content"])
            next_id += 1


def _ids_by_content(state: dict[str, Any]) -> dict[str, int]:
    vocab = state["model"]["vocab"]
    ids = {piece: i for i, (piece, _) in enumerate(vocab)} if isinstance(vocab, list) else dict(vocab)
    ids.update({entry["content"]: entry["id"] for entry in state.get("added_tokens", [])})
    return ids


def _new_id(token: str, ids: dict[str, int]) -> int:
    if token not in ids:
        raise IncompatibleTokenizerError(
            f"The model's post-processor uses {token!r}, which the replacement tokenizer lacks: add it to "
            "new_tokenizer as a special token."
        )
    return ids[token]


def _remap(node: Any, ids: dict[str, int]) -> Any:
    """The old post-processor with every special token id looked up again by its content."""
    if isinstance(node, list):
        if len(node) == 2 and isinstance(node[0], str) and isinstance(node[1], int):  # Bert/Roberta [token, id]
            return [node[0], _new_id(node[0], ids)]
        return [_remap(item, ids) for item in node]
    if not isinstance(node, dict):
        return node
    if "tokens" in node and "ids" in node:  # TemplateProcessing special token entry
        return {**node, "ids": [_new_id(token, ids) for token in node["tokens"]]}
    return {key: _remap(value, ids) for key, value in node.items()}


def _take_settings(old_dir: Path, new_dir: Path, sides: dict[str, str]) -> None:
    """Copy the special-token roles, model settings and chat templates (named ones too) of the old tokenizer, and its
    padding and truncation sides (`sides`, as the old tokenizer has them: its class may set them, not its file)."""
    old = json.loads((old_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    new = json.loads((new_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    new = {key: value for key, value in new.items() if not key.endswith("_token")}
    new.update({k: v for k, v in old.items() if k.endswith("_token") or k in _MODEL_SETTINGS or k == "chat_template"})
    new.update(sides)
    (new_dir / "tokenizer_config.json").write_text(json.dumps(new, ensure_ascii=False, indent=2), encoding="utf-8")
    for template in old_dir.glob("chat_template*"):
        shutil.copy(template, new_dir / template.name)
    named = old_dir / "additional_chat_templates"  # the named templates (e.g. tool_use) beside the default one
    if named.is_dir():
        shutil.copytree(named, new_dir / named.name, dirs_exist_ok=True)
