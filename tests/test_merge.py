"""Tokenizer merge (extend mode) for every family: ids kept, tokens inside the model, round trips, reports."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from conftest import FAMILIES
from vocabshift.errors import IncompatibleTokenizerError
from vocabshift.vocab import merge_tokenizers, train_tokenizer
from vocabshift.vocab.forms import backend_state, token_forms


@pytest.fixture(scope="module")
def merged(tokenizers_en, tokenizers_ru, ru_held, en_held):
    return {
        family: merge_tokenizers(tokenizers_en[family], tokenizers_ru[family], target_texts=ru_held,
                                 source_texts=en_held)
        for family in FAMILIES
    }


def _round_trip(tokenizer, text):
    return tokenizer.decode(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("family", FAMILIES)
def test_old_ids_keep_their_tokens_and_new_ones_follow(tokenizers_en, merged, family):
    old, (new, report) = tokenizers_en[family], merged[family]
    old_vocab, new_vocab = old.get_vocab(), new.get_vocab()
    assert all(new_vocab[token] == index for token, index in old_vocab.items())
    assert sorted(set(new_vocab.values()) - set(old_vocab.values())) == list(range(len(old), len(new)))
    assert report.tokens_added == len(new) - len(old) > 0
    assert new.all_special_tokens == old.all_special_tokens
    assert [new.convert_tokens_to_ids(t) for t in old.all_special_tokens] == old.all_special_ids


@pytest.mark.parametrize("family", FAMILIES)
def test_new_tokens_live_in_the_model_not_as_added_tokens(tokenizers_en, merged, family):
    old, (new, _) = tokenizers_en[family], merged[family]
    assert new.added_tokens_decoder.keys() == old.added_tokens_decoder.keys()
    assert new.backend_tokenizer.get_vocab_size(with_added_tokens=False) > old.backend_tokenizer.get_vocab_size(
        with_added_tokens=False
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_old_pipeline_stays(tokenizers_en, merged, family):
    old, new = backend_state(tokenizers_en[family]), backend_state(merged[family][0])
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert new[part] == old[part]
    assert merged[family][0].chat_template == tokenizers_en[family].chat_template


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_on_both_languages(tokenizers_en, tokenizers_ru, merged, en_held, ru_held, family):
    """Lossless families round-trip exactly. Lossy ones (lower-casing, unknown characters) round-trip like the
    tokenizer that covers the language, on every line that tokenizer covers without unknown tokens."""
    new = merged[family][0]
    lossless = family in ("bytelevel", "sentencepiece")
    for texts, covering in ((en_held, tokenizers_en[family]), (ru_held, tokenizers_ru[family])):
        for text in texts:
            if lossless:
                assert _round_trip(new, text) == text
            elif covering.unk_token_id not in covering.encode(text, add_special_tokens=False):
                assert _round_trip(new, text) == _round_trip(covering, text)


@pytest.mark.parametrize("family", FAMILIES)
def test_survives_save_and_reload(merged, ru_held, en_held, tmp_path, family):
    new = merged[family][0]
    new.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert len(reloaded) == len(new)
    texts = ru_held[:50] + en_held[:50]
    assert reloaded(texts)["input_ids"] == new(texts)["input_ids"]


@pytest.mark.parametrize("family", ["bytelevel", "sentencepiece"])
def test_report_figures(merged, family):
    report = merged[family][1]
    assert report.target_tokens_per_word_after < 0.7 * report.target_tokens_per_word_before
    assert report.source_lines_changed <= 0.01


def test_every_added_bpe_token_is_reachable(merged):
    tokenizer = merged["bytelevel"][0]
    model = tokenizer.backend_tokenizer.model
    for token, index in tokenizer.get_vocab().items():
        if index >= 700:
            assert [t.value for t in model.tokenize(token)] == [token]


def test_specials_after_the_vocabulary_keep_their_ids(tokenizers_en, tokenizers_ru):
    """Llama-3 keeps its special tokens after the BPE vocabulary; appending must not renumber them."""
    state = backend_state(tokenizers_en["bytelevel"])
    vocab = state["model"]["vocab"]
    specials = [entry for entry in state["added_tokens"]]
    for entry in specials:
        del vocab[entry["content"]]
    shift = {piece: index - len(specials) for piece, index in vocab.items()}
    state["model"]["vocab"] = shift
    top = len(shift)
    for offset, entry in enumerate(specials):
        entry["id"] = top + offset
    old = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)), eos_token="<|im_end|>")
    new, _ = merge_tokenizers(old, tokenizers_ru["bytelevel"])
    for entry in specials:
        assert new.convert_tokens_to_ids(entry["content"]) == entry["id"]
    assert len(set(new.get_vocab().values())) == len(new)


def test_added_tokens_of_the_new_tokenizer_are_left_out_with_a_warning(tokenizers_en, ru_lines, caplog):
    """A language tag added to the new tokenizer would vanish without a word: the warning names it and the fix."""
    old = tokenizers_en["bytelevel"]
    new = train_tokenizer(ru_lines, like=old, vocab_size=800)
    with caplog.at_level("WARNING", logger="vocabshift"):
        merge_tokenizers(old, new)
    assert not caplog.records  # trained like the old one: its specials are the old ones
    new.add_special_tokens({"additional_special_tokens": ["<|ru|>"]})
    with caplog.at_level("WARNING", logger="vocabshift"):
        merged, _ = merge_tokenizers(old, new)
    assert "<|ru|>" not in merged.get_vocab()
    assert "added tokens ['<|ru|>'] are left out" in caplog.text and "then extend with that tokenizer" in caplog.text


def test_a_new_tokenizer_that_normalizes_letters_otherwise_is_warned_about(tokenizers_en, ru_lines, caplog):
    """A tokenizer trained with `normalizers.NFD()` (the tokenizers tutorial's) spells 'й' as 'и' + U+0306; the merged
    tokenizer keeps the model's NFC, so such pieces are never produced: the warning names both and the fix."""
    old = tokenizers_en["bytelevel"]
    new = train_tokenizer(ru_lines, like=old, vocab_size=800)
    state = json.loads(new.backend_tokenizer.to_str())
    state["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]}
    new = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)))
    with caplog.at_level("WARNING", logger="vocabshift"):
        merge_tokenizers(old, new)
    assert "normalizer decomposes letters and lowercases, the model's tokenizer's changes no letter" in caplog.text
    assert "like=<the model's tokenizer>" in caplog.text


def test_different_model_kinds_are_refused(tokenizers_en, tokenizers_ru):
    with pytest.raises(IncompatibleTokenizerError, match="Cannot extend a BPE tokenizer with the Unigram"):
        merge_tokenizers(tokenizers_en["bytelevel"], tokenizers_ru["unigram"])


@pytest.mark.parametrize(("old", "new"), [("sentencepiece", "bytelevel"), ("bytelevel", "sentencepiece")])
def test_bpe_of_another_spelling_round_trips(tokenizers_en, tokenizers_ru, en_held, ru_held, old, new):
    """A byte-level BPE merged into a SentencePiece BPE with byte fallback: 'э', which the old vocabulary lacks, was
    spelled as its byte pieces and joined into a piece '▁<0xD1><0x8D>лемент', so 'элемент' came back from decode as
    '<0xD1><0x8D>лемент', silently. No new piece may read as byte-piece text."""
    merged, report = merge_tokenizers(tokenizers_en[old], tokenizers_ru[new])
    assert report.tokens_added > 0
    assert not [piece for piece in merged.get_vocab() if len(piece) > 6 and "<0x" in piece]
    for text in [*en_held, *ru_held, "Укажите элементы для включения"]:
        assert _round_trip(merged, text) == text


@pytest.mark.parametrize(("old", "new"), [("sentencepiece", "bytelevel"), ("bytelevel", "sentencepiece")])
def test_bpe_of_another_spelling_adds_the_pieces_no_merge_of_its_own_spelling_builds(tokenizers_en, tokenizers_ru,
                                                                                    old, new):
    """A piece whose merge has a part the old model cannot spell (byte-level 'ĠÐ', half of ' н'), or that no merge
    builds (a SentencePiece letter, two bytes in byte-level BPE), was left out, and not counted as dropped."""
    merged, report = merge_tokenizers(tokenizers_en[old], tokenizers_ru[new])
    have = {form.text for form in token_forms(merged)}
    letters = {form.text for form in token_forms(tokenizers_ru[new])
               if form.text.strip() and all("\u0400" <= char <= "\u04ff" for char in form.text.strip())}
    assert {" н", "Я"} & letters and {" н", "Я"} & letters <= have
    assert {text for text in letters if len(text) == 1} <= have
    if old == "sentencepiece":
        assert letters <= have and report.tokens_dropped == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_train_tokenizer_like_gives_a_mergeable_tokenizer(tokenizers_en, ru_lines, family):
    old = tokenizers_en[family]
    new = train_tokenizer(ru_lines, like=old, vocab_size=800)
    assert backend_state(new)["model"]["type"] == backend_state(old)["model"]["type"]
    assert backend_state(new)["pre_tokenizer"] == backend_state(old)["pre_tokenizer"]
    merged, report = merge_tokenizers(old, new)
    assert report.tokens_added > 0


@pytest.mark.parametrize("family", ["bytelevel", "sentencepiece"])
def test_japanese_keeps_its_kanji_and_its_kana_words(tokenizers_en, en_held, family):
    """Japanese writes words in kanji and in kana, two scripts: only the pieces of the one with more letters were
    added (kanji words such as '日本語' left out beside 'ます', or the other way round)."""
    lines = ["私は日本語を勉強します。", "日本語の本を読みます。", "東京で日本語を話します。", "毎日日本語で書きます。",
             "東京の大学で勉強しました。", "日本語が好きです。"]
    source = tokenizers_en[family]
    new = train_tokenizer(lines * 4, like=source, vocab_size=len(source) + 60, min_frequency=1)
    merged, _ = merge_tokenizers(source, new, source_texts=en_held)
    words = {form.text for form in token_forms(new) if len(form.text.strip()) > 1 and form.text.strip().isalpha()}
    assert {word.strip()[0] for word in words} >= {"日", "東", "し"}  # kanji and kana words
    assert words <= {form.text for form in token_forms(merged)}
    assert merged(en_held, add_special_tokens=False)["input_ids"] == source(en_held, add_special_tokens=False)[
        "input_ids"]


@pytest.mark.parametrize("data", [b"\xf4\x90", b"\xf4\x90\x80", b"\xf7\xbf\xbf"], ids=["f490", "f49080", "f7bfbf"])
def test_bytes_past_the_last_code_point_are_bound_to_no_script(data):
    """A byte-level token ending in the start of a character above U+10FFFF: chr() raised ValueError."""
    from vocabshift.vocab.stats import bound_to_script

    assert not bound_to_script(data, frozenset({"CYRILLIC"}))
