"""The replacement tokenizer skips rewriting tokenizer.json only when the rewrite would change nothing."""

from __future__ import annotations

import copy

import pytest

from conftest import FAMILIES
from vocabshift.vocab.forms import backend_state
from vocabshift.vocab.replace import _append_added_tokens, _ids_by_content, _merged_state, _remap, replacement_tokenizer


def rewritten_state(source, new) -> dict:
    """What the rewrite produces: new's state, source's missing added tokens appended, its post-processor remapped."""
    state, old_state = backend_state(new), backend_state(source)
    _append_added_tokens(state, old_state)
    state["post_processor"] = _remap(old_state.get("post_processor"), _ids_by_content(state))
    return state


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rewrite_is_skipped_exactly_when_it_changes_nothing(family, tokenizers_en, tokenizers_ru):
    source = tokenizers_en[family]
    extended = copy.deepcopy(source)
    extended.add_tokens(["привет", "мир"])  # an extension of source: its added tokens and post-processor kept
    marked = copy.deepcopy(source)
    marked.add_special_tokens({"additional_special_tokens": ["<|user|>"]})  # a chat marker that new lacks
    for new, old in ((extended, source), (tokenizers_ru[family], source), (source, marked)):
        merged = _merged_state(old, new)
        assert (merged or backend_state(new)) == rewritten_state(old, new)
        assert (merged is None) == (rewritten_state(old, new) == backend_state(new))
    assert _merged_state(source, extended) is None
    assert _merged_state(marked, source) is not None


def test_named_chat_templates_are_kept(tokenizers_en, tokenizers_ru):
    """An instruct tokenizer's named templates (tool_use beside the default one) are saved apart from
    tokenizer_config.json, in additional_chat_templates/: they were left out, only the default one was kept."""
    source = copy.deepcopy(tokenizers_en["bytelevel"])
    source.chat_template = {"default": "{{ messages[0]['content'] }}", "tool_use": "{{ tools }}"}
    for new in (tokenizers_ru["bytelevel"], copy.deepcopy(source)):
        assert replacement_tokenizer(source, new).chat_template == source.chat_template


def test_the_padding_side_of_the_source_class_is_kept(tokenizers_ru):
    """Llama-2's and Gemma's tokenizer classes pad on the left without saying so in tokenizer_config.json: the
    replacement tokenizer (TokenizersBackend, which pads on the right) took the sides from that file only, so batched
    generation with the replaced model padded on the wrong side."""
    from transformers import AutoTokenizer

    from vocabshift_testing.real_tokenizers import real_tokenizer_dir

    source = AutoTokenizer.from_pretrained(real_tokenizer_dir("llama2"))
    assert source.padding_side == "left"
    replaced = replacement_tokenizer(source, tokenizers_ru["sentencepiece"])
    assert (replaced.padding_side, replaced.truncation_side) == (source.padding_side, source.truncation_side)
