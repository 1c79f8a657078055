"""Canonical token forms, segmentation in word position and alignment, across the three tokenizer families."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from conftest import FAMILIES
from vocabshift.errors import TokenizerMismatchError, UnsupportedTokenizerError
from vocabshift.vocab import align, detect_family, token_forms
from vocabshift.vocab.forms import TokenForm, backend_state, native_string
from vocabshift.vocab.segment import Segmenter

EXPECTED_FAMILY = {"bytelevel": "bytelevel", "sentencepiece": "sentencepiece", "unigram": "sentencepiece",
                   "wordpiece": "wordpiece"}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_is_detected(tokenizers_en, family):
    assert detect_family(backend_state(tokenizers_en[family])) == EXPECTED_FAMILY[family]


def test_unsupported_family_is_refused():
    state = {"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Whitespace"}, "normalizer": None}
    with pytest.raises(UnsupportedTokenizerError, match="byte-level BPE .* SentencePiece-style .* WordPiece"):
        detect_family(state)


def _form(tokenizer, token: str) -> TokenForm:
    return token_forms(tokenizer)[tokenizer.convert_tokens_to_ids(token)]


def test_forms_of_each_family(tokenizers_en):
    assert _form(tokenizers_en["bytelevel"], "Ġthe") == TokenForm(b"the", True)
    assert _form(tokenizers_en["sentencepiece"], "\u2581the") == TokenForm(b"the", True)
    assert _form(tokenizers_en["sentencepiece"], "<0xE2>") == TokenForm(b"\xe2", False, fallback=True)
    assert _form(tokenizers_en["unigram"], "\u2581the") == TokenForm(b"the", True)
    assert _form(tokenizers_en["wordpiece"], "the") == TokenForm(b"the", True)
    continuation = next(t for t in tokenizers_en["wordpiece"].get_vocab() if t.startswith("##") and len(t) > 3)
    assert _form(tokenizers_en["wordpiece"], continuation) == TokenForm(continuation[2:].encode(), False)
    assert _form(tokenizers_en["bytelevel"], "<|im_end|>") == TokenForm(b"<|im_end|>", False, True, True)
    assert _form(tokenizers_en["wordpiece"], "[CLS]").special


def test_same_text_has_the_same_key_across_families(tokenizers_en):
    """' the' is one key whether written Ġthe, ▁the or the (WordPiece word start)."""
    keys = {_form(tokenizers_en[f], t).key for f, t in [("bytelevel", "Ġthe"), ("sentencepiece", "\u2581the"),
                                                         ("unigram", "\u2581the"), ("wordpiece", "the")]}
    assert keys == {(b"the", True)}


@pytest.mark.parametrize("family", ["bytelevel", "sentencepiece", "wordpiece"])
def test_native_string_inverts_forms(tokenizers_en, family):
    """Writing a form back in its own family gives the original token string, for every model token."""
    tokenizer = tokenizers_en[family]
    forms = token_forms(tokenizer)
    for token, index in tokenizer.get_vocab().items():
        if not forms[index].added:
            assert native_string(forms[index], EXPECTED_FAMILY[family]) == token


def test_byte_level_partial_characters_survive():
    """A byte-level token holding half of a Cyrillic letter keeps its raw byte, not U+FFFD."""
    form = TokenForm(b"\xd0", True)
    assert native_string(form, "bytelevel") == "ĠÐ"
    assert native_string(TokenForm(b"\xd0"), "sentencepiece") == "<0xD0>"
    assert native_string(form, "wordpiece") is None


@pytest.mark.parametrize("family", ["bytelevel", "sentencepiece"])
def test_word_start_segmentation_matches_encoding_after_a_space(tokenizers_en, ru_held, family):
    """A word-start form is cut exactly as the tokenizer cuts the word after a space in running text."""
    tokenizer = tokenizers_en[family]
    segmenter = Segmenter(tokenizer)
    words = sorted({w for line in ru_held[:50] for w in line.split() if w.isalpha()})[:200]
    for word in words:
        expected = tokenizer.encode("a " + word, add_special_tokens=False)
        prefix = tokenizer.encode("a", add_special_tokens=False)
        assert segmenter.segment(TokenForm(word.encode(), True)) == expected[len(prefix):]


def test_continuation_segmentation_adds_no_word_marker(tokenizers_en):
    for family in ("bytelevel", "sentencepiece"):
        tokenizer = tokenizers_en[family]
        ids = Segmenter(tokenizer).segment(TokenForm("ования".encode()))
        assert ids and not any(token_forms(tokenizer)[i].word_start for i in ids)
    wordpiece = tokenizers_en["wordpiece"]
    pieces = wordpiece.convert_ids_to_tokens(Segmenter(wordpiece).segment(TokenForm(b"ing")))
    assert pieces and all(p.startswith("##") for p in pieces)


def test_partial_bytes_segment_through_bytes(tokenizers_en):
    byte_level = Segmenter(tokenizers_en["bytelevel"]).segment(TokenForm(b"\xd0\xbf\xd1"))
    assert b"".join(token_forms(tokenizers_en["bytelevel"])[i].surface for i in byte_level) == b"\xd0\xbf\xd1"
    fallback = tokenizers_en["sentencepiece"]
    assert fallback.convert_ids_to_tokens(Segmenter(fallback).segment(TokenForm(b"\xd0"))) == ["<0xD0>"]
    assert Segmenter(tokenizers_en["wordpiece"]).segment(TokenForm(b"\xd0")) == []


@pytest.mark.parametrize("family", ["unigram", "wordpiece"])
def test_text_the_source_cannot_represent_has_no_decomposition(tokenizers_en, family):
    """Unigram's unk (an `unk_id`, not an `unk_token`) went into decompositions: ' в' was ['▁', '<unk>'], so the new
    token's row was composed from the unk row."""
    segmenter = Segmenter(tokenizers_en[family])
    assert segmenter.segment(TokenForm("в".encode(), True)) == []
    assert segmenter.segment(TokenForm("aв".encode(), True)) == []
    assert segmenter.segment(TokenForm(b"a", True)) != []


@pytest.mark.parametrize("family", FAMILIES)
def test_alignment_of_two_tokenizers(tokenizers_en, tokenizers_ru, family):
    source, target = tokenizers_en[family], tokenizers_ru[family]
    alignment = align(source, target)
    source_forms, target_forms = token_forms(source), token_forms(target)
    assert alignment.shared and alignment.new_ids
    assert len(alignment.shared) + len(alignment.new_ids) == len(target)
    for t, s in alignment.shared:
        assert target_forms[t].key == source_forms[s].key
    source_keys = {f.key for f in source_forms}
    assert all(target_forms[t].key not in source_keys for t in alignment.new_ids)
    assert len(alignment.decompositions) == len(alignment.new_ids)
    assert all(0 <= i < len(source) for pieces in alignment.decompositions for i in pieces)


def test_alignment_keeps_source_ids_in_extend_mode(tokenizers_en, tokenizers_ru):
    from vocabshift.vocab import merge_tokenizers

    source = tokenizers_en["bytelevel"]
    merged, _ = merge_tokenizers(source, tokenizers_ru["bytelevel"])
    alignment = align(source, merged, keep_source_ids=True)
    assert alignment.shared == [(i, i) for i in range(len(source))]
    assert alignment.new_ids == list(range(len(source), len(merged)))


def test_keep_source_ids_refuses_a_target_that_does_not_extend_the_source(tokenizers_en, tokenizers_ru):
    """It paired every source id with itself whatever the target held: a silently wrong alignment."""
    from vocabshift.vocab import merge_tokenizers

    source = tokenizers_en["bytelevel"]
    with pytest.raises(TokenizerMismatchError, match=r"keep_source_ids=True, but target does not extend source: id "
                       r"\d+ is '.*' in source \(700 tokens\) and is '.*' in target\. Pass as target the tokenizer "
                       r"merge_tokenizers\(source, new\) returned"):
        align(source, tokenizers_ru["bytelevel"], keep_source_ids=True)
    merged, _ = merge_tokenizers(source, tokenizers_ru["bytelevel"])
    with pytest.raises(TokenizerMismatchError, match=r"id 700 is '.*' in source \(\d+ tokens\) and does not exist "
                       r"\(700 tokens\) in target"):  # the two swapped
        align(merged, source, keep_source_ids=True)


@pytest.mark.integration
def test_smollm2_tokenizer_forms_and_decompositions(smollm2_dir):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    forms = token_forms(tokenizer)
    assert detect_family(backend_state(tokenizer)) == "bytelevel"
    assert len(forms) == 49152
    assert [forms[i].special for i in range(3)] == [True, True, True]
    assert forms[tokenizer.convert_tokens_to_ids("Ġthe")] == TokenForm(b"the", True)
    segmenter = Segmenter(tokenizer)
    for word in ["привет", "документация", "Vietnam", "đường"]:
        expected = tokenizer.encode(" " + word, add_special_tokens=False)
        assert segmenter.segment(TokenForm(word.encode(), True)) == expected
