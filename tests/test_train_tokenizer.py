"""`train_tokenizer` input checks, `vocabshift tokenizer`, and same-script targets in extend mode."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import vocabshift
from conftest import make_model
from vocabshift.cli import main
from vocabshift.errors import (
    CorpusError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTokenizerError,
    TokenizerLoadError,
)


@pytest.mark.parametrize(
    ("texts", "error", "match"),
    [
        ("corpus.txt", CorpusError, "texts is a str \\('corpus.txt'\\), not a collection of lines"),
        (Path("corpus.txt"), CorpusError, "texts is a PosixPath"),
        ([], CorpusError, "texts holds no text \\(0 items"),
        (["", "  "], CorpusError, "texts holds no text \\(2 items, all empty\\)"),
        (["ok", b"bytes"], CorpusError, "texts holds a bytes"),
        (42, CorpusError, "texts is a int: pass an iterable of strings"),
    ],
)
def test_bad_texts_are_refused(tokenizers_en, texts, error, match):
    with pytest.raises(error, match=match):
        vocabshift.train_tokenizer(texts, like=tokenizers_en["bytelevel"], vocab_size=1000)


@pytest.mark.parametrize(("family", "size"), [("bytelevel", 256), ("sentencepiece", 300)])
def test_vocab_size_below_the_alphabet_is_refused(tokenizers_en, ru_lines, family, size):
    with pytest.raises(InvalidArgumentError, match=f"vocab_size={size!r} is invalid: .* pass an int above"):
        vocabshift.train_tokenizer(ru_lines[:50], like=tokenizers_en[family], vocab_size=size)


@pytest.mark.parametrize("size", [True, "8k", 16000.0])
def test_vocab_size_that_is_no_int_is_refused_before_the_corpus_is_read(tokenizers_en, size):
    def never_read():
        raise AssertionError("the corpus was read")
        yield "text"

    with pytest.raises(InvalidArgumentTypeError, match=f"vocab_size={size!r} is a .*: pass an int"):
        vocabshift.train_tokenizer(never_read(), like=tokenizers_en["bytelevel"], vocab_size=size)


def test_byte_level_training_keeps_characters_whole(tokenizers_en, ru_lines, ru_held):
    """Digits are isolated on the text, not on byte-level characters: '²' stands for byte 0xB2 (the end of 'в')."""
    new = vocabshift.train_tokenizer(ru_lines, like=tokenizers_en["bytelevel"], vocab_size=2000)
    assert any("Ð²" in piece for piece in new.get_vocab())
    assert vocabshift.tokens_per_word(new, ru_held) < 2.5 < vocabshift.tokens_per_word(tokenizers_en["bytelevel"],
                                                                                       ru_held)
    assert len(new("2024", add_special_tokens=False)["input_ids"]) == 4  # like the old one, digit by digit


def test_bad_like_and_min_frequency(tokenizers_en, ru_lines, tmp_path):
    with pytest.raises(InvalidTokenizerError, match="like is a NoneType"):
        vocabshift.train_tokenizer(ru_lines[:50], like=None, vocab_size=1000)
    with pytest.raises(TokenizerLoadError, match="like=.*missing. does not exist"):
        vocabshift.train_tokenizer(ru_lines[:50], like=str(tmp_path / "missing"), vocab_size=1000)
    with pytest.raises(InvalidArgumentError, match="min_frequency=0 is invalid"):
        vocabshift.train_tokenizer(ru_lines[:50], like=tokenizers_en["bytelevel"], vocab_size=1000, min_frequency=0)


def test_like_may_be_a_folder_and_nothing_reaches_stdout(tokenizers_en, ru_lines, tmp_path, capfd):
    tokenizers_en["sentencepiece"].save_pretrained(tmp_path / "old")
    new = vocabshift.train_tokenizer(ru_lines, like=str(tmp_path / "old"), vocab_size=1000)
    assert len(new) == 1000
    assert capfd.readouterr().out == ""


def test_cli_trains_a_tokenizer_like_the_models(tokenizers_en, ru_lines, tmp_path, capfd):
    tokenizers_en["bytelevel"].save_pretrained(tmp_path / "model")
    (tmp_path / "ru.txt").write_text("\n".join(ru_lines), encoding="utf-8")
    assert main(["tokenizer", str(tmp_path / "model"), str(tmp_path / "ru.txt"), str(tmp_path / "ru"),
                 "--vocab-size", "900"]) == 0
    assert capfd.readouterr().out.strip() == f"{tmp_path / 'ru'}: 900 tokens trained on {len(ru_lines):,} lines"
    assert len(vocabshift.vocab.load.load_tokenizer(str(tmp_path / "ru"), argument="t")) == 900
    assert main(["tokenizer", str(tmp_path / "model"), str(tmp_path / "ru.txt"), str(tmp_path / "ru"),
                 "--vocab-size", "800"]) == 0  # a run again replaces its own output (it holds no config.json)
    assert len(vocabshift.vocab.load.load_tokenizer(str(tmp_path / "ru"), argument="t")) == 800
    capfd.readouterr()
    assert main(["tokenizer", str(tmp_path / "model"), str(tmp_path / "missing.txt"), str(tmp_path / "x")]) == 1
    assert "does not exist" in capfd.readouterr().err and not (tmp_path / "x").exists()


def test_same_script_target_is_measured_warned_and_can_be_kept_exact(tokenizers_en, en_lines, en_held, caplog):
    """An English tokenizer extended with more English tokens: the script filter cannot tell them apart."""
    old = tokenizers_en["bytelevel"]
    new = vocabshift.train_tokenizer(en_lines, like=old, vocab_size=1500)
    model = make_model("qwen2-tied", old)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        tokenizer = model.extend_vocabulary(new, source_tokenizer=old, source_texts=en_held)
    report = vocabshift.get_record(model).tokenizer_report
    assert report["source_lines_changed"] > 0.5 and report["source_lines_checked"] == len(en_held)
    assert "keep_source_segmentation=True" in caplog.text
    kept = make_model("qwen2-tied", old)
    tokenizer = kept.extend_vocabulary(new, source_tokenizer=old, source_texts=en_held,
                                       keep_source_segmentation=True)
    report = vocabshift.get_record(kept).tokenizer_report
    assert report["source_lines_changed"] == 0 and report["tokens_dropped_for_source"] > 0
    assert tokenizer(en_held)["input_ids"] == old(en_held)["input_ids"]
    assert report["tokens_added"] > 0


def test_target_texts_keep_the_source_segmentation_unless_told_not_to(tokenizers_en, en_lines, en_held):
    """With target_texts, extend mode leaves out the new tokens that are not the target's (here English tokens,
    judged by the lines they were trained on against held-out ones: most are not); keep_source_segmentation=False
    keeps them."""
    old = tokenizers_en["bytelevel"]
    new = vocabshift.train_tokenizer(en_lines, like=old, vocab_size=1500)
    records = {}
    for keep in (None, False):
        model = make_model("qwen2-tied", old)
        model.extend_vocabulary(new, source_tokenizer=old, source_texts=en_held, target_texts=en_lines,
                                keep_source_segmentation=keep)
        records[keep] = vocabshift.get_record(model)
    assert records[None].keep_source_segmentation and not records[False].keep_source_segmentation
    kept, full = records[None].tokenizer_report, records[False].tokenizer_report
    assert kept["tokens_dropped_for_source"] > 0 == full["tokens_dropped_for_source"]
    assert kept["source_lines_changed"] < full["source_lines_changed"] / 2
    assert "--keep-source-segmentation" not in records[None].command  # on with --target-texts
    assert records[False].command[-1] == "--no-keep-source-segmentation"


def test_source_text_options_are_checked(tokenizers_en, tokenizers_ru):
    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    with pytest.raises(CorpusError, match="source_texts is a str"):
        model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"],
                                source_texts="english.txt")
    with pytest.raises(InvalidArgumentError, match="keep_source_segmentation=True works in mode='extend' only"):
        model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"],
                                mode="replace", keep_source_segmentation=True)
    with pytest.raises(InvalidArgumentError, match="keep_source_segmentation='yes' is invalid"):
        model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"],
                                keep_source_segmentation="yes")


def test_a_corpus_that_runs_out_of_pieces_is_named(tokenizers_en, ru_lines, caplog):
    """Asked for more tokens than the texts hold, the trainer stops early: the user hears how many they got."""
    with caplog.at_level("WARNING", logger="vocabshift"):
        small = vocabshift.train_tokenizer(ru_lines[:20], like=tokenizers_en["bytelevel"], vocab_size=50_000)
    assert len(small) < 50_000 and f"vocab_size=50000 was asked, the texts gave {len(small)} tokens" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="vocabshift"):
        vocabshift.train_tokenizer(ru_lines, like=tokenizers_en["bytelevel"], vocab_size=800)
    assert not caplog.records


def test_llama2_digits_stay_apart_from_the_word_marker(ru_lines):
    """Llama-2's Metaspace prepends `▁` to every piece: digits isolated before it came out as '▁0'...'▁9' tokens,
    which Llama-2 never has ('2024' after a space is '▁', '2', '0', '2', '4')."""
    from transformers import AutoTokenizer

    from vocabshift_testing.real_tokenizers import real_tokenizer_dir

    like = AutoTokenizer.from_pretrained(real_tokenizer_dir("llama2"))
    new = vocabshift.train_tokenizer(ru_lines[:1500], like=like, vocab_size=1200)
    assert not [token for token in new.get_vocab() if token[:1] == "\u2581" and token[1:2].isdigit()]
    assert new.tokenize("мир 2024")[-5:] == like.tokenize("мир 2024")[-5:] == ["\u2581", "2", "0", "2", "4"]


def test_a_wordpiece_that_spells_digits_learns_continuation_digits(en_lines, ru_lines):
    """Digits isolated while training left no '##0'...'##9': every number of two digits or more became [UNK],
    where `like` spells it '2', '##0', '##2', '##4'."""
    from conftest import make_tokenizer

    like = make_tokenizer("wordpiece", en_lines[:1500], 800)
    assert like.tokenize("2024") == ["2", "##0", "##2", "##4"]
    new = vocabshift.train_tokenizer(ru_lines, like=like, vocab_size=1200)
    assert "[UNK]" not in new.tokenize("в 2024 году 15 человек")
