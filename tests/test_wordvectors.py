"""fastText training, caching and loading; corpus checks; which tokens have a vector."""

from __future__ import annotations

import gzip
import shutil
import zipfile

import numpy as np
import pytest
import torch

import vocabshift
from vocabshift import word_vector_training
from vocabshift.corpus import corpus_fingerprint
from vocabshift.errors import (
    CorpusError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTokenizerError,
    WordVectorsError,
    WordVectorsNotFoundError,
)
from vocabshift.vocab.forms import TokenForm, native_string, token_forms


def test_token_level_vectors_are_keyed_by_token_strings(token_vectors_ru, tokenizers_ru):
    vectors, tokenizer = token_vectors_ru["bytelevel"], tokenizers_ru["bytelevel"]
    assert vectors.level == "token" and vectors.family == "bytelevel" and vectors.dim == 16
    vocabulary = set(tokenizer.get_vocab())
    assert set(vectors.words) <= vocabulary and len(vectors) > 0.5 * len(vocabulary)
    forms = token_forms(tokenizer)
    found, mask, level = vectors.token_vectors(forms, "bytelevel")
    assert level == "token"
    for form, has in zip(forms, mask):
        assert has == (not form.special and native_string(form, "bytelevel") in vectors.words)
    assert not mask[[i for i, form in enumerate(forms) if form.special]].any()
    assert np.all(found[~mask] == 0) and np.all(np.abs(found[mask]).sum(axis=1) > 0)


def test_training_is_cached_by_corpus_and_settings(tmp_path, ru_lines, tokenizers_ru, monkeypatch):
    tokenizer = tokenizers_ru["unigram"]
    first = vocabshift.train_word_vectors(ru_lines[:1500], tokenizer=tokenizer, dim=8, min_count=3, cache_dir=tmp_path)
    monkeypatch.setattr(word_vector_training, "_train", _refuse_training)
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(ru_lines[:1500]) + "\n", encoding="utf-8")
    again = vocabshift.train_word_vectors(path, tokenizer=tokenizer, dim=8, min_count=3, cache_dir=tmp_path)
    assert again.source == first.source and again.words == first.words
    np.testing.assert_array_equal(again.vectors, first.vectors)
    assert corpus_fingerprint(path) == corpus_fingerprint(ru_lines[:1500])
    with pytest.raises(AssertionError, match="retrained"):  # other settings: another model
        vocabshift.train_word_vectors(path, tokenizer=tokenizer, dim=9, min_count=3, cache_dir=tmp_path)


def test_the_tokenizer_may_be_a_path(tmp_path, ru_lines, tokenizers_ru, monkeypatch):
    """As every tokenizer argument of vocabshift: a saved folder loads (here: the same tokenizer, so the cached model),
    and another type is refused by name (it was an AttributeError)."""
    tokenizer = tokenizers_ru["unigram"]
    first = vocabshift.train_word_vectors(ru_lines[:1500], tokenizer=tokenizer, dim=8, min_count=3, cache_dir=tmp_path)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    monkeypatch.setattr(word_vector_training, "_train", _refuse_training)
    again = vocabshift.train_word_vectors(ru_lines[:1500], tokenizer=tmp_path / "tokenizer", dim=8, min_count=3,
                                          cache_dir=tmp_path)
    assert again.level == "token" and again.words == first.words
    with pytest.raises(InvalidTokenizerError, match="tokenizer is a int; pass a fast tokenizer"):
        vocabshift.train_word_vectors(ru_lines[:1500], tokenizer=42, cache_dir=tmp_path)


def _refuse_training(*args, **kwargs):
    raise AssertionError("retrained a cached model")


def test_loading_without_metadata_detects_the_level(token_vectors_ru, multilingual_vectors, tokenizers_ru, tmp_path):
    forms = token_forms(tokenizers_ru["sentencepiece"])
    for vectors, expected in ((token_vectors_ru["sentencepiece"], "token"), (multilingual_vectors, "word")):
        copy = tmp_path / f"{expected}.bin"
        shutil.copy(vectors.source, copy)
        loaded = vocabshift.load_word_vectors(copy)
        assert loaded.level == "auto" and loaded.family is None
        found, mask, level = loaded.token_vectors(forms, "sentencepiece")
        assert level == expected
        np.testing.assert_array_equal(found, vectors.token_vectors(forms, "sentencepiece")[0])


def test_word_level_vectors_compose_unseen_words(multilingual_vectors):
    assert multilingual_vectors.level == "word"
    keys = ["и", "the", "совершенноневиданноеслово", None]
    vectors, found = multilingual_vectors.lookup(keys, compose=True)
    assert found.tolist() == [True, True, True, False]
    assert not multilingual_vectors.lookup(keys)[1][2]  # only composed from character n-grams
    forms = [TokenForm("при".encode(), True), TokenForm(b"\xd0"), TokenForm(b"<s>", special=True)]
    assert multilingual_vectors.token_keys(forms, "bytelevel", "word") == ["при", None, None]


def test_a_zero_row_is_no_vector():
    """A word whose row is zero (a padding word's in a .vec file) has no direction: methods fall back for it, as for
    a word without a row, instead of ranking every neighbor equal."""
    vectors = vocabshift.WordVectors(["<pad>", "кот", "пёс"], np.array([[0.0, 0.0], [1.0, 0.5], [0.5, 1.0]]))
    found = vectors.lookup(["<pad>", "кот", "нет", None])[1]
    assert found.tolist() == [False, True, False, False]


def test_vec_files_load_and_bad_ones_are_refused(tmp_path):
    path = tmp_path / "small.vec"
    path.write_text("2 3\nкот 0.1 0.2 0.3\ncat 0.1 0.2 0.25\n", encoding="utf-8")
    vectors = vocabshift.load_word_vectors(path, level="word")
    assert vectors.words == ["кот", "cat"] and vectors.dim == 3
    path.write_text("2 3\nкот 0.1 0.2 0.3\ncat 0.1 0.2\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match=r"line 3 has 2 values, but the vectors have dimension 3"):
        vocabshift.load_word_vectors(path)
    path.write_text("2 3\nкот 0.1 0.2 0.3\nкот 0.9 0.9 0.9\n", encoding="utf-8")  # a repeated word: its first row
    np.testing.assert_allclose(vocabshift.load_word_vectors(path).lookup(["кот"])[0], [[0.1, 0.2, 0.3]])
    path.write_bytes("\ufeff2 3\nкот 0.1 0.2 0.3\ncat 0.1 0.2 0.25\n".encode())  # with a byte-order mark
    assert vocabshift.load_word_vectors(path, level="word").words == ["кот", "cat"]
    with pytest.raises(WordVectorsError, match=r"shape \(2, 4\) for 3 words"):
        vocabshift.WordVectors(["a", "b", "c"], np.zeros((2, 4)))
    with pytest.raises(WordVectorsNotFoundError, match="does not exist") as error:
        vocabshift.load_word_vectors(tmp_path / "missing.bin")
    assert isinstance(error.value, FileNotFoundError)
    (tmp_path / "broken.bin").write_bytes(b"not a model")
    with pytest.raises(WordVectorsError, match="is not a fastText .bin model"):
        vocabshift.load_word_vectors(tmp_path / "broken.bin")


def test_bad_corpora_are_refused_with_the_fix(tmp_path, ru_lines):
    with pytest.raises(CorpusError, match="holds no text"):
        vocabshift.train_word_vectors([], cache_dir=tmp_path)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(CorpusError, match="holds no text"):
        vocabshift.train_word_vectors(blank, cache_dir=tmp_path)
    legacy = tmp_path / "cp1251.txt"
    legacy.write_bytes("\n".join(ru_lines[:5]).encode("cp1251", errors="replace"))
    with pytest.raises(CorpusError, match=r"not UTF-8 text: line \d+ has byte 0x.*iconv -f cp1251"):
        vocabshift.train_word_vectors(legacy, cache_dir=tmp_path)
    wide = tmp_path / "utf16.txt"
    wide.write_bytes("hello world\n".encode("utf-16-le"))
    with pytest.raises(CorpusError, match="NUL characters"):
        vocabshift.train_word_vectors(wide, cache_dir=tmp_path)
    with pytest.raises(CorpusError, match=r"item 2 is a bytes, not str"):
        vocabshift.train_word_vectors(["текст", "текст".encode()], cache_dir=tmp_path)
    with pytest.raises(CorpusError, match="is not a file"):
        vocabshift.train_word_vectors(tmp_path / "nowhere.txt", cache_dir=tmp_path)
    assert not list(tmp_path.glob("*.bin")), "a refused corpus left a model behind"


def test_vectors_from_a_tensor_of_any_dtype():
    """An embedding matrix as it comes from a model (bfloat16, a parameter) is read as float32 rows."""
    matrix = torch.nn.Parameter(torch.arange(6, dtype=torch.bfloat16).view(2, 3))
    vectors = vocabshift.WordVectors(["a", "b"], matrix)
    assert vectors.vectors.dtype == np.float32 and vectors.vectors.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e40])  # 1e40 overflows float32
def test_vectors_that_are_not_finite_are_refused_by_word(tmp_path, bad):
    """A NaN or infinite row ended in a raw IndexError inside FOCUS's neighbour search, or a MethodResultError that
    blamed OFA; it is refused where the vectors are made, naming the words."""
    with pytest.raises(WordVectorsError, match=r"hold NaN or infinite values .* in 1 rows: 'б' \(row 1\)"):
        vocabshift.WordVectors(["а", "б", "в"], np.array([[1.0, 2.0], [bad, 0.0], [3.0, 4.0]]))
    path = tmp_path / "bad.vec"
    path.write_text(f"2 3\nкот 0.1 0.2 0.3\ncat {bad} 0.2 0.25\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match=r"from .*bad.vec hold NaN or infinite values .* 'cat' \(row 1\)"):
        vocabshift.load_word_vectors(path)


@pytest.mark.parametrize("family", ["klingon", 5, "unigram"])
def test_a_family_that_is_none_of_the_tokenizer_families_is_refused(family):
    with pytest.raises(InvalidArgumentError, match=f"family={family!r} is invalid: pass one of 'bytelevel', "):
        vocabshift.WordVectors(["▁а"], [[1.0]], level="token", family=family)


def test_a_model_that_is_no_fasttext_model_is_refused():
    """It was read only when composing a vector of an unseen word: a raw AttributeError then."""
    with pytest.raises(InvalidArgumentTypeError, match=r"model is a str: pass the fastText model the vectors come "
                       r"from \(fasttext.load_model\(path\)\), or None"):
        vocabshift.WordVectors(["▁а"], [[1.0]], level="token", model="cc.ru.300.bin")


@pytest.mark.parametrize("share", [0.5, 0.9, 0.9999])
def test_a_cut_off_bin_model_is_refused(token_vectors_ru, tmp_path, share):
    """fastText loaded a cut-off .bin without complaint (garbage vectors): its size is checked against its header."""
    data = open(token_vectors_ru["bytelevel"].source, "rb").read()
    path = tmp_path / "cut.bin"
    path.write_bytes(data[: int(len(data) * share)])
    with pytest.raises(WordVectorsError, match=r"cut.bin' is truncated or damaged: its header declares [\d,]+ bytes, "
                       r"the file has [\d,]+\. It was cut off while downloading or copying: download it again"):
        vocabshift.load_word_vectors(path)
    (tmp_path / "text.bin").write_text("2 3\nкот 0.1 0.2 0.3\ncat 0.1 0.2 0.25\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match="text.bin' is not a fastText .bin model .* a text .vec file named .vec"):
        vocabshift.load_word_vectors(tmp_path / "text.bin")


def test_vec_files_cut_off_or_compressed(tmp_path):
    """A .vec holding fewer rows than its header declares was loaded silently; a .vec.gz (as fastText publishes
    cc.*.vec.gz) is read; an archive vocabshift does not read is named."""
    (tmp_path / "cut.vec").write_text("5 3\nа 1 2 3\nб 1 2 3\n", encoding="utf-8")
    with pytest.raises(WordVectorsError, match="cut.vec' declares 5 vectors in its first line but holds 2: it was cut"):
        vocabshift.load_word_vectors(tmp_path / "cut.vec")
    with gzip.open(tmp_path / "cc.vec.gz", "wt", encoding="utf-8") as handle:
        handle.write("2 3\nкот 0.1 0.2 0.3\ncat 0.1 0.2 0.25\n")
    vectors = vocabshift.load_word_vectors(tmp_path / "cc.vec.gz")
    assert vectors.words == ["кот", "cat"] and vectors.vectors[1].tolist() == pytest.approx([0.1, 0.2, 0.25])
    (tmp_path / "cut.vec.gz").write_bytes((tmp_path / "cc.vec.gz").read_bytes()[:-12])
    with pytest.raises(WordVectorsError, match="cut.vec.gz' cannot be decompressed .* download it again"):
        vocabshift.load_word_vectors(tmp_path / "cut.vec.gz")
    with zipfile.ZipFile(tmp_path / "cc.vec.zip", "w") as archive:
        archive.writestr("cc.vec", "кот 0.1 0.2 0.3\n")
    with pytest.raises(WordVectorsError, match="cc.vec.zip' is a zip archive: decompress it first"):
        vocabshift.load_word_vectors(tmp_path / "cc.vec.zip")


@pytest.mark.parametrize(("content", "problem"), [
    (b"{broken", r"it is no UTF-8 JSON \(JSONDecodeError: "),
    (b"\xff\xfe{}", r"it is no UTF-8 JSON \(UnicodeDecodeError: "),
    (b"[1, 2]", "it holds a list, not an object"),
    (b'{"level": "bogus"}', "its 'level' is 'bogus', none of token, word, auto"),
    (b'{"level": "token", "family": "klingon"}', "its 'family' is 'klingon', none of bytelevel, sentencepiece"),
], ids=["broken", "not UTF-8", "list", "level", "family"])
def test_metadata_beside_the_vectors_that_is_not_what_training_writes(tmp_path, content, problem):
    """Any <stem>.json beside the vectors is read as their metadata: a damaged one was a raw JSONDecodeError,
    AttributeError or UnicodeDecodeError, or accepted (an unknown family)."""
    path = tmp_path / "a.vec"
    path.write_text("2 3\nкот 0.1 0.2 0.3\ncat 0.1 0.2 0.25\n", encoding="utf-8")
    (tmp_path / "a.json").write_bytes(content)
    with pytest.raises(WordVectorsError, match=r"a.json', beside word_vectors='.*a.vec', is read as their metadata "
                       rf"\(what train_word_vectors writes\), but {problem}.*: delete or rename it"):
        vocabshift.load_word_vectors(path)
