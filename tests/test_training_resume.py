"""Resuming into another training setup than the checkpoint's is refused before any step, never a crash."""

from __future__ import annotations

import json

import pytest
from transformers import Trainer

import vocabshift
from test_training_callback import arguments, blocks, extended
from vocabshift.errors import TrainingSetupError
from vocabshift.training.distill_data import pack_texts
from vocabshift.training.distillation import DistillationTrainer
from vocabshift.training.resume import MARKER


def _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, callbacks):
    """Two steps with `callbacks`, saved after each; returns the folder of step 2."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    args = arguments(tmp_path / "first", max_steps=2, save_strategy="steps", save_steps=1)
    Trainer(model=model, args=args, train_dataset=blocks(tokenizer, ru_lines), callbacks=callbacks).train()
    return tmp_path / "first" / "checkpoint-2"


def _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, rows, checkpoint, *, output=None):
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    args = arguments(output or tmp_path / "second", max_steps=4, save_strategy="steps", save_steps=1)
    trainer = Trainer(model=model, args=args, train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback(rows=rows)])
    return trainer.train(resume_from_checkpoint=str(checkpoint))


def test_checkpoints_record_their_rows(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows="new")])
    marker = json.loads((checkpoint / MARKER).read_text())
    assert marker["rows"] == "new" and marker["trainable_rows"] > 0 and len(marker["shapes"]) == 2
    assert not list(checkpoint.glob("*.tmp"))


@pytest.mark.parametrize(("saved", "resumed"), [("new", "all"), ("all", "new")])
def test_resume_with_other_rows_is_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, saved, resumed):
    """new -> all crashed the process (fused AdamW on moments of other shapes); all -> new trained silently."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows=saved)])
    with pytest.raises(TrainingSetupError, match=rf"rows='{saved}'.*trains rows='{resumed}'.*Resume with"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, resumed, checkpoint, output=tmp_path / "first")


@pytest.mark.parametrize(("saved", "resumed"), [("new", "all"), ("all", "new")])
def test_resume_from_elsewhere_is_checked_by_the_optimizer_state(tokenizers_en, tokenizers_ru, ru_lines, tmp_path,
                                                                  saved, resumed):
    """A checkpoint outside output_dir: its marker is not where the callback looks, the loaded moments' shapes are."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows=saved)])
    with pytest.raises(TrainingSetupError, match=r"optimizer state loaded from the checkpoint .* other parameters"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, resumed, checkpoint)


def test_resume_with_other_explicit_rows_is_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows=[1, 2, 3])])
    with pytest.raises(TrainingSetupError, match=r"\[3 explicit ids\].*trains rows=\[3 explicit ids\]"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [4, 5, 6], checkpoint, output=tmp_path / "first")


def test_distillation_refuses_a_checkpoint_saved_without_the_callback(tokenizers_en, tokenizers_ru, ru_lines,
                                                                       tmp_path):
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [])
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    texts = [{"text": t} for t in pack_texts(ru_lines[:200], tokenizer, max_length=32)]
    trainer = DistillationTrainer(model=model, args=arguments(tmp_path / "second", max_steps=4),
                                  train_dataset=texts, processing_class=tokenizer,
                                  teacher_tokenizer=tokenizers_en["sentencepiece"], max_length=32,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback()])
    with pytest.raises(TrainingSetupError, match=r"saved without EmbeddingOnlyCallback.*new run"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
