"""Chunk alignment of two tokenizations and the distillation collator, on every tokenizer family."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import torch

from conftest import FAMILIES, make_model
from vocabshift.errors import InvalidArgumentError
from vocabshift.training import pack_texts
from vocabshift.training.distill._chunks import align_chunks, token_boundaries
from vocabshift.training.distill.collator import DistillationCollator, default_collator
from vocabshift.vocab import merge_tokenizers

TEXTS = [
    "Привет, мир! Hello world.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "中国 🙂 и ёжик  123,45 — «кавычки»",
    "Параметр --output задаёт файл; см. man 1 ls.",
]


def test_boundaries_skip_the_inside_of_a_character_cut_into_bytes():
    # byte-level: "Я" cut into two byte tokens with the same offsets, then "ма"
    positions, last = token_boundaries(np.array([[0, 1], [0, 1], [1, 3]]))
    assert positions.tolist() == [1, 3] and last.tolist() == [1, 2]


def test_zero_width_token_joins_the_chunk_before_it():
    positions, last = token_boundaries(np.array([[0, 0], [0, 0], [0, 2], [2, 2], [2, 4]]))
    assert positions.tolist() == [0, 2, 4] and last.tolist() == [1, 3, 4]


def test_hand_checked_chunks():
    # student "При|вет| мир"   teacher "П|ри|в|ет| м|ир"
    student = [[0, 3], [3, 6], [6, 10]]
    teacher = [[0, 1], [1, 3], [3, 4], [4, 6], [6, 8], [8, 10]]
    chunks = align_chunks(np.array(student), np.array(teacher))
    assert chunks.student_ends.tolist() == [0, 1, 2] and chunks.teacher_ends.tolist() == [1, 3, 5]
    assert chunks.student_chunks.tolist() == [0, 1, 2] and chunks.teacher_chunks.tolist() == [0, 0, 1, 1, 2, 2]


def test_tokens_after_the_last_shared_boundary_have_no_chunk():
    chunks = align_chunks(np.array([[0, 4]]), np.array([[0, 2], [2, 5]]))
    assert len(chunks) == 0 and chunks.student_chunks.tolist() == [-1] and chunks.teacher_chunks.tolist() == [-1, -1]


def _chars(offsets, tokens):
    return {c for t in tokens for c in range(*offsets[t])}


@pytest.fixture(scope="module")
def students(tokenizers_en, tokenizers_ru):
    return {family: merge_tokenizers(tokenizers_en[family], tokenizers_ru[family])[0] for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_chunks_cover_the_same_text_on_both_sides(tokenizers_en, students, family):
    teacher, student = tokenizers_en[family], students[family]
    longer = 0
    for text in TEXTS:
        sides = [tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
                 for tok in (student, teacher)]
        chunks = align_chunks(np.array(sides[0]), np.array(sides[1]))
        assert (chunks.student_chunks >= 0).all() and (chunks.teacher_chunks >= 0).all(), text  # every token
        covered = set()
        for c in range(len(chunks)):
            mine = [_chars(sides[0], np.flatnonzero(chunks.student_chunks == c)),
                    _chars(sides[1], np.flatnonzero(chunks.teacher_chunks == c))]
            assert mine[0] == mine[1], (text, c)
            assert not mine[0] & covered
            covered |= mine[0]
        assert covered == _chars(sides[1], range(len(sides[1]))) == _chars(sides[0], range(len(sides[0])))
        longer += len(chunks) < max(map(len, sides))
    assert longer  # some chunks span several tokens of one side


@pytest.mark.parametrize("family", FAMILIES)
def test_collator_cuts_both_sides_at_one_boundary(tokenizers_en, students, family):
    teacher, student = tokenizers_en[family], students[family]
    if student.bos_token_id is None and student.eos_token_id is None:
        pytest.skip("no bos/eos to start a sequence")
    texts = [TEXTS[1], TEXTS[3]]
    batch = DistillationCollator(student, teacher, max_length=8)(texts)
    for row, text in enumerate(texts):
        s_len, t_len = int(batch["attention_mask"][row].sum()), int(batch["teacher_attention_mask"][row].sum())
        assert 2 <= s_len <= 8
        ends = [tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"][length - 2][1]
                for tok, length in ((student, s_len), (teacher, t_len))]
        assert ends[0] == ends[1] > 0  # both sides stop after the same text
        count = int(batch["chunk_mask"][row].sum())
        assert batch["chunk_ends"][row, count - 1] == s_len - 1
        assert batch["teacher_chunk_ends"][row, count - 1] == t_len - 1
        assert (batch["chunk_ids"][row, :s_len] >= 0).all() and (batch["chunk_ids"][row, s_len:] == -1).all()
        assert (batch["labels"][row, s_len:] == -100).all() and (batch["labels"][row, :s_len] >= 0).all()


def test_same_tokenizer_gives_one_chunk_per_token(tokenizers_en):
    tokenizer = tokenizers_en["bytelevel"]
    batch = DistillationCollator(tokenizer, tokenizer, max_length=64)(["Hello world.", "The cat sat on the mat."])
    assert torch.equal(batch["input_ids"], batch["teacher_input_ids"])
    assert torch.equal(batch["chunk_ends"], batch["teacher_chunk_ends"])
    lengths = batch["attention_mask"].sum(1)
    assert torch.equal(batch["chunk_mask"].sum(1), lengths)


def test_collator_refuses_bad_input(tokenizers_en):
    tokenizer = tokenizers_en["bytelevel"]
    with pytest.raises(InvalidArgumentError, match="max_length=1 is invalid"):
        DistillationCollator(tokenizer, tokenizer, max_length=1)
    with pytest.raises(InvalidArgumentError, match="keys \\['input_ids'\\] and no 'text' string: the trainer "
                                                   "tokenizes raw text itself"):
        DistillationCollator(tokenizer, tokenizer)([{"input_ids": [1, 2]}])
    with pytest.raises(InvalidArgumentError, match="neither a bos nor an eos"):
        DistillationCollator(tokenizers_en["wordpiece"], tokenizer)


def test_pack_texts_fills_sequences_in_order(tokenizers_en, en_lines):
    tokenizer = tokenizers_en["bytelevel"]
    packed = pack_texts(en_lines[:200], tokenizer, max_length=128)
    assert "".join(packed).replace("\n", "") == "".join(en_lines[:200])  # lines too long for one are cut in pieces
    lengths = [len(ids) for ids in tokenizer(packed, add_special_tokens=False)["input_ids"]]
    assert len(packed) < 200 and max(lengths) <= 128


@pytest.mark.parametrize("family", ["bytelevel", "sentencepiece"])
def test_pack_texts_cuts_long_texts_into_pieces_the_collator_reads_whole(tokenizers_en, en_lines, family, caplog):
    """A whole document on one line: the collator would read its first max_length tokens and drop the rest (99% of
    a 3,000-token line at 16 tokens, without a word); pack_texts cuts it at token starts into pieces that fit."""
    tokenizer, document = tokenizers_en[family], " ".join(en_lines[:60])
    packed = pack_texts([document, *en_lines[60:70]], tokenizer, max_length=64)
    assert len(packed) > 10 and "".join(packed).replace("\n", "") == document + "".join(en_lines[60:70])
    collator = DistillationCollator(tokenizer, tokenizer, max_length=64)
    kept = int(collator([{"text": text} for text in packed])["attention_mask"].sum()) - len(packed)
    total = sum(map(len, tokenizer(packed, add_special_tokens=False)["input_ids"]))
    assert kept >= 0.98 * total  # a piece may cut its first word differently; the collator drops what overflows
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        DistillationCollator(tokenizer, tokenizer, max_length=64)([document, *en_lines[60:70]] * 2)
    assert len(caplog.records) == 1  # once per collator
    assert re.search("[0-9]+ of 22 texts in a batch are longer than max_length=64 tokens: the collator reads the first "
                     "max_length of each and drops the rest. Pass the texts through "
                     r"vocabshift.training.pack_texts\(", caplog.text)


def test_pack_texts_cuts_token_blocks_for_plain_training(tokenizers_en, en_lines):
    """`blocks=True`: the lines' tokens, each line followed by eos, in whole blocks of exactly max_length."""
    tokenizer = tokenizers_en["bytelevel"]
    blocks = pack_texts(en_lines[:50], tokenizer, max_length=32, blocks=True)
    stream = [i for line in en_lines[:50] for i in (*tokenizer(line, add_special_tokens=False)["input_ids"],
                                                       tokenizer.eos_token_id)]
    assert blocks.dtype == torch.int64 and blocks.device.type == "cpu"
    assert blocks.shape == (len(stream) // 32, 32) and blocks.flatten().tolist() == stream[: blocks.numel()]
    with pytest.raises(InvalidArgumentError, match="fewer than one block of 32"):
        pack_texts(["short"], tokenizer, max_length=32, blocks=True)


def test_the_teacher_reads_no_more_tokens_than_its_positions(tokenizers_en, tokenizers_ru):
    """The old tokenization of a text can be several times as long as the new one: `DistillationTrainer`'s collator
    cuts both sides where the teacher's positions end, and refuses student sequences longer than the model's."""
    source = tokenizers_en["bytelevel"]
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=source)
    model.config.max_position_embeddings = 24
    text = [" ".join(TEXTS[:2]) * 3]
    assert DistillationCollator(tokenizer, source, max_length=16)(text)["teacher_input_ids"].shape[1] > 24
    collator = default_collator(model, None, tokenizer, source, 16)
    assert collator.max_teacher_length == 24 and collator(text)["teacher_input_ids"].shape[1] <= 24
    with pytest.raises(InvalidArgumentError, match=r"max_length=32 is longer than the 24 positions of model \(Llama"):
        default_collator(model, None, tokenizer, source, 32)
