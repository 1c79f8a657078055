"""Resuming into another training setup than the checkpoint's is refused before any step, never a crash."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import vocabshift
from conftest import ROOT, kill_once_written, make_model, make_tokenizer, read_lines
from test_training_callback import arguments, blocks, extended
from vocabshift.errors import TrainingSetupError
from vocabshift.training import pack_texts
from vocabshift.training.cpt._resume import MARKER
from vocabshift.training.distill.trainer import PROGRESS, DistillationTrainer


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


def test_a_resumed_run_says_where_it_resumed(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """The Trainer's train_loss of a resumed run is the mean over the steps after the checkpoint, beside steps and
    tokens_seen of the whole run: the entry says where it resumed (it read as the whole run's mean)."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [vocabshift.EmbeddingOnlyCallback()])
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    trainer = Trainer(model=model, args=arguments(tmp_path / "second", max_steps=4),
                      train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train(resume_from_checkpoint=str(checkpoint))
    entry = vocabshift.get_record(model).cpt[-1]
    losses = {log["step"]: log["loss"] for log in trainer.state.log_history if "loss" in log}
    assert (entry["steps"], entry["resumed_from_step"], entry["tokens_seen"]) == (4, 2, 4 * 4 * 32)
    assert entry["train_loss"] == pytest.approx((losses[3] + losses[4]) / 2)


@pytest.mark.parametrize(("saved", "resumed"), [("new", "all"), ("all", "new")])
def test_resume_with_other_rows_is_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, saved, resumed):
    """new -> all crashed the process (fused AdamW on moments of other shapes); all -> new trained silently."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows=saved)])
    with pytest.raises(TrainingSetupError, match=rf"rows='{saved}'.*trains rows='{resumed}'.*Resume with"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, resumed, checkpoint, output=tmp_path / "first")


@pytest.mark.parametrize(("saved", "resumed"), [("new", "all"), ("all", "new")])
def test_resume_from_elsewhere_is_checked_by_its_marker(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, saved,
                                                        resumed):
    """A checkpoint outside output_dir: the callback reads the marker of the folder the Trainer resumes from."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows=saved)])
    with pytest.raises(TrainingSetupError, match=rf"rows='{saved}'.*trains rows='{resumed}'.*Resume with"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, resumed, checkpoint)


@pytest.mark.parametrize(("saved", "resumed"), [("new", "all"), ("all", "new")])
def test_resume_without_a_marker_is_checked_by_the_optimizer_state(tokenizers_en, tokenizers_ru, ru_lines, tmp_path,
                                                                   saved, resumed):
    """A marker deleted: the loaded moments' shapes tell, before the first step."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines,
                             [vocabshift.EmbeddingOnlyCallback(rows=saved)])
    (checkpoint / MARKER).unlink()
    with pytest.raises(TrainingSetupError, match=r"optimizer state loaded from the checkpoint .* other parameters"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, resumed, checkpoint)


@pytest.mark.parametrize(("saved", "resumed", "lacks"), [("adamw_torch", "sgd", "'dampening', 'momentum'"),
                                                      ("adafactor", "adamw_torch", "'betas'")])
def test_resume_with_another_optimizer_is_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, saved, resumed,
                                                  lacks):
    """adamw -> sgd failed at the first step with a raw KeyError('momentum'); adafactor -> adamw was refused as if
    the checkpoint had trained other rows (its moments have other shapes)."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    args = arguments(tmp_path / "first", max_steps=2, save_strategy="steps", save_steps=2, optim=saved)
    Trainer(model=model, args=args, train_dataset=blocks(tokenizer, ru_lines),
            callbacks=[vocabshift.EmbeddingOnlyCallback()]).train()
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    args = arguments(tmp_path / "first", max_steps=4, save_strategy="steps", save_steps=2, optim=resumed)
    trainer = Trainer(model=model, args=args, train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    with pytest.raises(TrainingSetupError, match=rf"saved by another optimizer than this run's \w+ \(its settings "
                                                 rf"lack {lacks}.*Resume with the optim the checkpoint was saved with"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "first" / "checkpoint-2"))
    assert sorted(p.name for p in (tmp_path / "first").iterdir()) == ["checkpoint-2"]


def test_resume_from_a_checkpoint_of_another_model_is_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """A checkpoint of another run whose model has other rows (here: the model extended once more) ended in an
    IndexError inside the hook that splits the rows on load."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [vocabshift.EmbeddingOnlyCallback()])
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    larger = vocabshift.train_tokenizer(ru_lines, like=tokenizer, vocab_size=len(tokenizer) + 300)
    more = model.extend_vocabulary(larger, source_tokenizer=tokenizer)
    trainer = Trainer(model=model, args=arguments(tmp_path / "second", max_steps=4),
                      train_dataset=blocks(more, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    rows = model.get_input_embeddings().weight.shape[0]
    with pytest.raises(TrainingSetupError, match=rf"model.embed_tokens.weight in the weights being loaded has [0-9]+ "
                       rf"rows, the model {rows}: they were saved from another model"):
        trainer.train(resume_from_checkpoint=str(checkpoint))


@pytest.mark.parametrize(("text", "why"), [('{"rows": ', "JSONDecodeError: Expecting value"), ("[]", "a JSON list")])
def test_a_damaged_marker_is_named(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, text, why):
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [vocabshift.EmbeddingOnlyCallback()])
    (checkpoint / MARKER).write_text(text, encoding="utf-8")
    with pytest.raises(TrainingSetupError, match=rf"{MARKER}' cannot be read \({why}.*it is damaged. Resume from "
                       "another checkpoint, or delete the file"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, "new", checkpoint, output=tmp_path / "first")


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


def test_a_resumed_distillation_ends_where_the_uninterrupted_one_does(tokenizers_en, tokenizers_ru, ru_lines,
                                                                       tmp_path):
    """Which sequences the teacher and the source replay read depends on the run so far (the teacher's schedule,
    the replay's place): each checkpoint keeps both, so the resumed run takes the same steps."""

    def run(output, resume=None):
        model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
        texts = [{"text": t} for t in pack_texts(ru_lines[:200], tokenizer, max_length=32)]
        DistillationTrainer(model=model, args=arguments(output, max_steps=6, save_strategy="steps", save_steps=3),
                            train_dataset=texts, processing_class=tokenizer,
                            teacher_tokenizer=tokenizers_en["sentencepiece"], max_length=32,
                            source_texts=read_lines("ru", 50, skip=2000),  # cut differently: the replay reads
                            callbacks=[vocabshift.EmbeddingOnlyCallback()],
                            ).train(resume_from_checkpoint=resume)
        return model.state_dict()

    whole = run(tmp_path / "whole")
    saved = json.loads((tmp_path / "whole" / "checkpoint-3" / PROGRESS).read_text())
    assert saved["schedule"]["credit"] > 0 and saved["source"]["next"] == 1 and saved["source"]["calls"] == 3
    assert saved["source"]["last"] > 0  # the logged loss carries the last read's term on from the checkpoint
    resumed = run(tmp_path / "resumed", str(tmp_path / "whole" / "checkpoint-3"))
    assert list(resumed) == list(whole)
    for name, value in whole.items():
        assert torch.equal(resumed[name], value), name


@pytest.mark.parametrize(("text", "why"), [("{", "JSONDecodeError: Expecting property name"),
                                           ('{"schedule": 5}', "TypeError"), ('{"source": null}', "KeyError")])
def test_a_damaged_distillation_progress_file_is_named(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, text, why):
    def trainer(output):
        model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
        texts = [{"text": t} for t in pack_texts(ru_lines[:100], tokenizer, max_length=32)]
        return DistillationTrainer(model=model, args=arguments(output, max_steps=3, save_strategy="steps",
                                                               save_steps=1), train_dataset=texts,
                                   processing_class=tokenizer, teacher_tokenizer=tokenizers_en["sentencepiece"],
                                   max_length=32, callbacks=[vocabshift.EmbeddingOnlyCallback()])

    trainer(tmp_path / "run").train()
    (tmp_path / "run" / "checkpoint-2" / PROGRESS).write_text(text, encoding="utf-8")
    with pytest.raises(TrainingSetupError, match=rf"{PROGRESS}' cannot be read \({why}.*where the teacher's schedule "
                       "and the source replay stood.*or delete the file to resume with both from their start"):
        trainer(tmp_path / "run").train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))


def test_a_plain_trainer_refuses_a_checkpoint_saved_without_the_callback(tokenizers_en, tokenizers_ru, ru_lines,
                                                                         tmp_path, monkeypatch):
    """transformers loads the optimizer state before any callback event of `train()`: the callback's load hook
    refuses the checkpoint while its weights load, before torch's own ValueError."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [])
    loaded = []
    load = Trainer._load_optimizer_and_scheduler
    monkeypatch.setattr(Trainer, "_load_optimizer_and_scheduler",
                        lambda self, folder: (loaded.append(folder), load(self, folder))[1])
    with pytest.raises(TrainingSetupError, match=r"saved without EmbeddingOnlyCallback \(its optimizer state holds "
                       r"\d+ parameters, this run trains 2\).*rows='new'.*new run"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, "new", checkpoint)
    assert loaded == []


def test_a_plain_trainer_refuses_other_rows_before_loading_the_optimizer_state(tokenizers_en, tokenizers_ru,
                                                                              ru_lines, tmp_path, monkeypatch):
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [vocabshift.EmbeddingOnlyCallback()])
    monkeypatch.setattr(Trainer, "_load_optimizer_and_scheduler", lambda self, folder: pytest.fail("loaded"))
    with pytest.raises(TrainingSetupError, match="rows='new'.*trains rows='all'"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, "all", checkpoint)


def test_a_damaged_optimizer_state_is_named(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [vocabshift.EmbeddingOnlyCallback()])
    state = checkpoint / "optimizer.pt"
    state.write_bytes(state.read_bytes()[:1000])
    with pytest.raises(TrainingSetupError, match=r"optimizer.pt' cannot be read \(RuntimeError\).*damaged.*another "
                       "checkpoint"):
        _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, "new", checkpoint)


def test_a_checkpoint_saved_without_the_callback_resumes_when_it_trained_the_same_parameters(
        tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """A plain run whose body its user froze trained what rows='all' trains: its optimizer state fits."""

    class Freeze(TrainerCallback):
        def on_init_end(self, args, state, control, model=None, **kwargs):
            for parameter in model.parameters():
                parameter.requires_grad_(False)
            model.get_input_embeddings().weight.requires_grad_(True)
            model.get_output_embeddings().weight.requires_grad_(True)

    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [Freeze()])
    assert not (checkpoint / MARKER).exists()
    assert _resume(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, "all", checkpoint).global_step == 4


CHILD_TRAIN = """
import sys, time
sys.path.insert(0, sys.argv[3])
from vocabshift.training.cpt import callback
written = callback.write_marker
def stall(folder, setup):
    if str(folder).endswith("checkpoint-2"):
        open(sys.argv[2], "w").write(str(folder))
        time.sleep(120)
    written(folder, setup)
callback.write_marker = stall
from test_training_resume import small_run
small_run(sys.argv[1]).train()
"""


def small_run(output):
    """A tiny extended model and its Trainer, built the same way in every process."""
    source = make_tokenizer("bytelevel", read_lines("en", 600), 700)
    model = make_model("qwen2-tied", source)
    new = make_tokenizer("bytelevel", read_lines("ru", 600), 900)
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source)
    ids = tokenizer("\\n".join(read_lines("ru", 200)), add_special_tokens=False)["input_ids"][:32 * 16]
    data = [{"input_ids": torch.tensor(ids[i:i + 32]), "labels": torch.tensor(ids[i:i + 32])}
            for i in range(0, 512, 32)]
    args = TrainingArguments(str(output), max_steps=3, per_device_train_batch_size=4, save_strategy="steps",
                             save_steps=1, report_to=[], use_cpu=True, disable_tqdm=True)
    return Trainer(model=model, args=args, train_dataset=data, callbacks=[vocabshift.EmbeddingOnlyCallback()])


def test_a_run_killed_while_saving_a_checkpoint_leaves_the_previous_one(tmp_path):
    """kill -9 while checkpoint-2 is written: checkpoint-1 is whole, records its rows, and the run resumes from it."""
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD_TRAIN, str(tmp_path / "run"), str(marker),
                              str(ROOT / "tests")], env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    kill_once_written(child, marker, timeout=240)  # while checkpoint-2 is saved
    first = tmp_path / "run" / "checkpoint-1"
    assert json.loads((first / MARKER).read_text())["rows"] == "new"  # whole, not half-written
    assert not (tmp_path / "run" / "checkpoint-2" / MARKER).exists() and not list(first.glob("*.tmp"))
    small_run(tmp_path / "run").train(resume_from_checkpoint=str(first))  # the run goes on from checkpoint-1
    assert (tmp_path / "run" / "checkpoint-3" / MARKER).exists()


def test_an_abandoned_trainer_leaves_no_resume_check_of_its_own(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """A Trainer built with the callback and never trained: its check of resumed checkpoints gives way to the next
    callback's (it would refuse this rows='new' checkpoint for rows='all'), and the model stays deep-copyable."""
    checkpoint = _checkpoint(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, [vocabshift.EmbeddingOnlyCallback()])
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    Trainer(model=model, args=arguments(tmp_path / "abandoned"), callbacks=[vocabshift.EmbeddingOnlyCallback("all")])
    copy.deepcopy(model)
    trainer = Trainer(model=model, args=arguments(tmp_path / "second", max_steps=4),
                      train_dataset=blocks(tokenizer, ru_lines), callbacks=[vocabshift.EmbeddingOnlyCallback()])
    assert trainer.train(resume_from_checkpoint=str(checkpoint)).global_step == 4
