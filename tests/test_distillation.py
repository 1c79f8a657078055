"""DistillationTrainer and its plain functions on tiny models: the teacher is the original model, old rows stay."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import vocabshift
from conftest import make_model
from vocabshift import errors
from vocabshift.embeddings import original_embeddings
from vocabshift.errors import InvalidArgumentError, TrainingSetupError
from vocabshift.record import add_cpt_entry
from vocabshift.training import pack_texts
from vocabshift.training.distill.collator import DistillationCollator
from vocabshift.training.distill.losses import next_token_loss
from vocabshift.training.distill.objective import distillation_loss, teacher_targets
from vocabshift.training.distill.pieces import first_pieces, piece_tree
from vocabshift.training.distill.schedule import TeacherSchedule
from vocabshift.training.distill.teacher import Teacher, native_bf16
from vocabshift.training.distill.trainer import DistillationTrainer
from vocabshift.training.distill.weights import DistillationWeights


def _extended(architecture, tokenizers_en, tokenizers_ru, mode="extend"):
    family = "bytelevel" if architecture == "qwen2-tied" else "sentencepiece"
    source = tokenizers_en[family]
    original = make_model(architecture, source)
    model = copy.deepcopy(original)
    tokenizer = model.extend_vocabulary(tokenizers_ru[family], source_tokenizer=source, mode=mode)
    return original, model, tokenizer, source


def _args(tmp_path, **overrides):
    options = dict(max_steps=3, per_device_train_batch_size=2, learning_rate=1e-2, lr_scheduler_type="constant",
                   save_strategy="no", report_to=[], logging_steps=1, use_cpu=True, seed=0)
    return TrainingArguments(str(tmp_path), **{**options, **overrides})


def test_same_tokenizer_gives_zero_losses(tokenizers_en, en_lines):
    tokenizer = tokenizers_en["bytelevel"]
    model = make_model("qwen2-tied", tokenizer)
    batch = DistillationCollator(tokenizer, tokenizer, max_length=32)(en_lines[:3])
    teacher = Teacher(model, old_rows=len(tokenizer), frozen_old_rows=True)
    weights = DistillationWeights(hidden=1, chunk=1, next_piece=1, piece_tree=0, next_token=0, teacher_share=1)
    loss, parts = distillation_loss(model, teacher_targets(teacher, batch, weights), batch, weights,
                                    first_pieces=torch.arange(len(tokenizer)))
    assert parts["hidden"] == 0.0 and parts["chunk"] == 0.0 and abs(parts["next_piece"]) < 1e-6


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_teacher_is_the_original_model(tokenizers_en, tokenizers_ru, ru_lines, mode):
    original, model, tokenizer, source = _extended("llama-untied", tokenizers_en, tokenizers_ru, mode)
    record = vocabshift.get_record(model)
    batch = DistillationCollator(tokenizer, source, max_length=24)(ru_lines[:2])
    teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=mode == "extend")
    got = teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
    with torch.no_grad():
        want = original(input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"],
                        output_hidden_states=True)
    assert torch.allclose(got.hidden, want.hidden_states[-1], atol=1e-5)
    assert torch.allclose(got.logits, want.logits, atol=1e-5)


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
def test_trainer_changes_only_new_rows(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, architecture):
    _, model, tokenizer, source = _extended(architecture, tokenizers_en, tokenizers_ru)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    new_ids = torch.tensor(vocabshift.get_record(model).new_ids)
    texts = [{"text": t} for t in pack_texts(ru_lines[:200], tokenizer, max_length=32)]
    trainer = DistillationTrainer(model=model, args=_args(tmp_path), train_dataset=texts, processing_class=tokenizer,
                                  teacher_tokenizer=source, max_length=32,
                                  weights=DistillationWeights(hidden=1, chunk=1, next_piece=1, piece_tree=1,
                                                              next_token=1, teacher_share=1, gate=False,
                                                              adaptive_share=False),
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()
    old = torch.ones(model.config.vocab_size, dtype=torch.bool)
    old[new_ids] = False
    for name, parameter in model.named_parameters():
        if parameter.shape[0] == model.config.vocab_size:
            assert torch.equal(parameter[old], before[name][old]) and not torch.equal(parameter, before[name])
        else:
            assert torch.equal(parameter, before[name]), name
    logged = [entry for entry in trainer.state.log_history if "distill/hidden" in entry]
    assert len(logged) == 3 and all(entry["distill/chunk"] >= 0 <= entry["distill/next_piece"] for entry in logged)
    assert all(entry["distill/piece_tree"] > 0 and "distill/source" not in entry for entry in logged)
    cpt = vocabshift.get_record(model).cpt[-1]
    chosen = "bfloat16" if native_bf16(torch.device("cpu")) else None  # teacher_dtype="auto", the default
    assert cpt["objective"] == {"name": "distillation", "hidden": 1, "chunk": 1, "next_piece": 1, "piece_tree": 1,
                                "next_token": 1, "layer": -1, "teacher_share": 1, "gate": False,
                                "adaptive_share": False, "source": 1.0, "teacher_dtype": chosen,
                                "source_read": False}  # the replay is on, but English is cut as before: nothing read
    card = vocabshift.model_card(model, language="ru", license="mit", base_model="org/tiny").text
    whole = f'"source": 1.0, "teacher_dtype": {json.dumps(chosen)}, "source_read": false}}'  # the objective's end
    assert whole in card


def test_trainer_without_the_callback_or_teacher_is_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    with pytest.raises(TrainingSetupError, match="needs EmbeddingOnlyCallback"):
        DistillationTrainer(model=model, args=_args(tmp_path), train_dataset=ru_lines[:8],
                            processing_class=tokenizer, teacher_tokenizer=source)


def test_the_callback_given_as_its_class(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """callbacks=[EmbeddingOnlyCallback], the class, is the callback with its defaults (the Trainer instantiates
    it); DistillationTrainer said it needs an EmbeddingOnlyCallback in callbacks."""
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1), train_dataset=ru_lines[:8],
                                  processing_class=tokenizer, teacher_tokenizer=source,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback])
    trainer.train()
    entry = vocabshift.get_record(model).cpt[-1]
    assert entry["rows"] == "new" and entry["objective"]["name"] == "distillation"


@pytest.mark.parametrize(("student", "teacher", "error", "match"), [
    ("source", "source", "TokenizerMismatchError", "processing_class is not .* but the original tokenizer"),
    ("tokenizer", "tokenizer", "TokenizerMismatchError", "teacher_tokenizer is not .* but the extended tokenizer"),
    ("tokenizer", "other", "TokenizerMismatchError", r"teacher_tokenizer is not the tokenizer the model was extended"),
    ("tokenizer", None, "InvalidTokenizerError", "teacher_tokenizer is a NoneType"),
    ("tokenizer", "nowhere/", "TokenizerLoadError", "teacher_tokenizer"),
    (42, "source", "InvalidTokenizerError", "processing_class is a int"),
])
def test_tokenizers_that_do_not_fit_the_record_are_refused(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, student,
                                                             teacher, error, match):
    """Swapped tokenizers trained without a word (no teacher signal, or new rows that never see a token)."""
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    given = {"source": source, "tokenizer": tokenizer, "other": tokenizers_en["sentencepiece"]}
    with pytest.raises(getattr(errors, error), match=match):
        DistillationTrainer(model=model, args=_args(tmp_path), train_dataset=ru_lines[:8],
                            processing_class=given.get(student, student), teacher_tokenizer=given.get(teacher, teacher),
                            callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])


def test_tokenizers_given_as_folders(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    tokenizer.save_pretrained(tmp_path / "student")
    source.save_pretrained(tmp_path / "teacher")
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1), train_dataset=ru_lines[:8],
                                  processing_class=str(tmp_path / "student"), teacher_tokenizer=tmp_path / "teacher",
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()


def test_replace_mode_after_reload_needs_a_teacher_model(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    original, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru, mode="replace")
    model.save_pretrained(tmp_path / "m")
    reloaded = type(model).from_pretrained(tmp_path / "m")
    with pytest.raises(TrainingSetupError, match="pass teacher_model="):
        DistillationTrainer(model=reloaded, args=_args(tmp_path), train_dataset=ru_lines[:8],
                            processing_class=tokenizer, teacher_tokenizer=source,
                            callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer = DistillationTrainer(model=reloaded, args=_args(tmp_path, max_steps=1), train_dataset=ru_lines[:8],
                                  processing_class=tokenizer, teacher_tokenizer=source, teacher_model=original,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()


def test_replace_mode_keeps_the_original_rows_on_the_model(tokenizers_en, tokenizers_ru):
    """What the teacher reads in replace mode travels with the model object (and its copies), never in its state
    dict or in a table of the process: a model loaded again has none (the test above)."""
    original, model, _, _ = _extended("llama-untied", tokenizers_en, tokenizers_ru, mode="replace")
    kept = original_embeddings(model)
    assert kept is not None and torch.equal(kept.input, original.get_input_embeddings().weight)
    assert torch.equal(kept.head, original.get_output_embeddings().weight) and kept.bias is None
    assert kept.input.shape[0] != model.get_input_embeddings().weight.shape[0]
    assert set(model.state_dict()) == set(original.state_dict())
    assert torch.equal(original_embeddings(copy.deepcopy(model)).input, kept.input)
    assert original_embeddings(_extended("llama-untied", tokenizers_en, tokenizers_ru)[1]) is None  # extend mode


def test_the_callback_is_the_one_writer_of_the_record_entry(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """Without EmbeddingOnlyCallback (a teacher_model given) no entry is written, and an earlier run's stays as it
    was: the trainer only describes its objective to the callback, which writes the entry."""
    original, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    add_cpt_entry(model, {"steps": 7, "objective": {"name": "next_token"}})
    DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1), train_dataset=ru_lines[:8],
                        processing_class=tokenizer, teacher_tokenizer=source, teacher_model=original).train()
    assert vocabshift.get_record(model).cpt == [{"steps": 7, "objective": {"name": "next_token"}, "propagations": 0}]


def test_a_callback_reused_in_a_plain_trainer_records_its_loss(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """Distillation for the first steps, then cross-entropy with the same callback: the second run's entry said
    distillation, the objective the first trainer had described to the callback."""
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    callback = vocabshift.EmbeddingOnlyCallback(rows="new")
    DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1), train_dataset=ru_lines[:8],
                        processing_class=tokenizer, teacher_tokenizer=source, max_length=24,
                        callbacks=[callback]).train()
    blocks = [{"input_ids": ids, "labels": ids} for ids in tokenizer(ru_lines[:8], return_tensors="pt",
                                                                       padding=True)["input_ids"]]
    Trainer(model=model, args=_args(tmp_path, max_steps=1), train_dataset=blocks, callbacks=[callback]).train()
    assert [entry["objective"]["name"] for entry in vocabshift.get_record(model).cpt] == ["distillation", "next_token"]


def test_all_rows_in_extend_mode_keep_a_frozen_teacher(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    original, model, tokenizer, source = _extended("llama-untied", tokenizers_en, tokenizers_ru)
    trainer = DistillationTrainer(model=model, args=_args(tmp_path), train_dataset=ru_lines[:8],
                                  processing_class=tokenizer, teacher_tokenizer=source, max_length=24,
                                  teacher_dtype=None, callbacks=[vocabshift.EmbeddingOnlyCallback(rows="all")])
    trainer.train()
    batch = DistillationCollator(tokenizer, source, max_length=24)(ru_lines[:2])
    got = trainer.teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
    with torch.no_grad():
        want = original(input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"])
    assert torch.allclose(got.logits, want.logits, atol=1e-5)


def test_weights_are_checked():
    with pytest.raises(InvalidArgumentError, match="Every weight is 0"):
        DistillationWeights(hidden=0, chunk=0, next_piece=0, piece_tree=0, next_token=0)
    with pytest.raises(InvalidArgumentError, match="chunk=-1 is invalid"):
        DistillationWeights(chunk=-1)
    with pytest.raises(InvalidArgumentError, match="layer='last' is invalid"):
        DistillationWeights(layer="last")
    for share in (0, 1.5, True):
        with pytest.raises(InvalidArgumentError, match=f"teacher_share={share!r} is invalid"):
            DistillationWeights(teacher_share=share)
    with pytest.raises(InvalidArgumentError, match="teacher_share=0.5 needs next_token > 0"):
        DistillationWeights(teacher_share=0.5, next_token=0)
    for name in ("gate", "adaptive_share"):
        with pytest.raises(InvalidArgumentError, match=f"{name}=1 is invalid"):
            DistillationWeights(**{name: 1})
    baseline = DistillationWeights.next_token_only()
    assert not baseline.uses_teacher and baseline.next_token == 1


def test_schedule_reads_the_share_of_a_stream():
    """Whatever the batch size, the teacher reads the share of the sequences trained on (the first of a batch)."""
    def counts(share, size, batches):
        schedule = TeacherSchedule(DistillationWeights(teacher_share=share, adaptive_share=False))
        return [schedule.count(size) for _ in range(batches)]

    assert counts(0.25, 4, 3) == [1, 1, 1]
    assert counts(0.25, 1, 9) == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert counts(0.5, 2, 3) == [1, 1, 1]
    assert counts(0.3, 4, 5) == [2, 1, 1, 1, 1]  # 6 of 20, from the first
    assert counts(0.3, 10, 3) == [3, 3, 3]  # 0.3 * 10 is not above 3
    assert counts(1.0, 3, 2) == [3, 3]
    assert TeacherSchedule(DistillationWeights.next_token_only()).count(4) == 0


def test_adaptive_share_follows_the_teacher_lead():
    """The share is the configured one until a lead is known, then that share times the running lead over the
    largest it has been, never below a sixteenth; a negative or missing lead changes nothing else."""
    schedule = TeacherSchedule(DistillationWeights(teacher_share=0.5))
    assert schedule.share == 0.5
    schedule.update(2.0)
    assert schedule.share == 0.5 and schedule.lead == 2.0
    schedule.update(0.0)  # the running mean moves a tenth of the way: 1.8 of the best 2.0
    assert schedule.lead == pytest.approx(1.8) and schedule.share == pytest.approx(0.45)
    for _ in range(60):
        schedule.update(-1.0)
    assert schedule.lead < 0 and schedule.share == pytest.approx(0.5 / 16)
    schedule.update(None)
    assert schedule.share == pytest.approx(0.5 / 16)
    fixed = TeacherSchedule(DistillationWeights(teacher_share=0.5, adaptive_share=False))
    fixed.update(-1.0)
    assert fixed.share == 0.5


def test_adaptive_share_drops_to_the_floor_once_the_student_models_the_text_better():
    """Whatever the next-piece lead, a running text lead at or below 0 leaves a sixty-fourth of the share, and the
    share comes back when the teacher's text lead does."""
    schedule = TeacherSchedule(DistillationWeights(teacher_share=0.5))
    schedule.update(2.0, 0.2)
    assert schedule.share == 0.5 and schedule.text_lead == pytest.approx(0.2)
    schedule.update(2.0, -1.0)  # the running mean moves a tenth of the way: 0.9 * 0.2 - 0.1
    assert schedule.text_lead == pytest.approx(0.08) and schedule.share == 0.5
    schedule.update(None, -3.0)
    assert schedule.text_lead < 0 and schedule.share == pytest.approx(0.5 / 64) and schedule.lead == 2.0
    for _ in range(30):
        schedule.update(2.0, 1.0)
    assert schedule.text_lead > 0 and schedule.share == 0.5


def test_teacher_share_scores_the_first_sequences(tokenizers_en, tokenizers_ru, ru_lines):
    """With teacher_share=0.5 the teacher objectives are those of the first half of the batch alone (the teacher
    reads only it), while next_token still scores the whole batch."""
    _, model, tokenizer, source = _extended("llama-untied", tokenizers_en, tokenizers_ru)
    record, rows = vocabshift.get_record(model), model.get_input_embeddings().weight.shape[0]
    tree, pieces = piece_tree(record, rows), first_pieces(record, rows)
    teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=True)
    collate = DistillationCollator(tokenizer, source, max_length=24)
    texts = sorted(ru_lines[:4], key=len)  # shortest first: the first half may need less teacher width than the batch

    def losses(batch, share=1.0):
        weights = DistillationWeights(hidden=1, chunk=1, next_piece=1, piece_tree=1, next_token=1,
                                      teacher_share=share, gate=False, adaptive_share=False)
        count = TeacherSchedule(weights).count(len(batch["input_ids"]))
        targets = teacher_targets(teacher, batch, weights, tree=tree, count=count)
        return distillation_loss(model, targets, batch, weights, first_pieces=pieces, tree=tree, count=count)[1]

    half, whole = losses(collate(texts), share=0.5), losses(collate(texts))
    alone = losses(collate(texts[:2]))
    assert set(half) == set(alone) and half["next_token"] == pytest.approx(whole["next_token"], rel=1e-5)
    for name in ("hidden", "chunk", "next_piece", "piece_tree"):
        assert half[name] == pytest.approx(alone[name], rel=1e-4, abs=1e-6), name
        assert half[name] != pytest.approx(whole[name], rel=1e-3), name


def test_teacher_share_counts_over_single_sequence_batches(tokenizers_en, tokenizers_ru, ru_lines):
    """Four batches of one sequence (the teacher reads the first) give the loss and gradient of one batch of four
    (the teacher reads its first sequence): the share acts with one sequence per device and gradient accumulation."""
    _, model, tokenizer, source = _extended("llama-untied", tokenizers_en, tokenizers_ru)
    record, rows = vocabshift.get_record(model), model.get_input_embeddings().weight.shape[0]
    tree, pieces = piece_tree(record, rows), first_pieces(record, rows)
    teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=True)
    collate = DistillationCollator(tokenizer, source, max_length=24)
    weights = DistillationWeights(teacher_share=0.25, adaptive_share=False)
    weight = model.get_input_embeddings().weight

    def loss(batch, schedule):
        count = schedule.count(len(batch["input_ids"]))
        return distillation_loss(model, teacher_targets(teacher, batch, weights, tree=tree, count=count), batch,
                                 weights, first_pieces=pieces, tree=tree, count=count)

    def loss_and_grad(batches):
        weight.grad = None
        schedule = TeacherSchedule(weights)
        losses = [loss(batch, schedule)[0] / len(batches) for batch in batches]
        sum(losses).backward()
        return sum(losses).item(), weight.grad.clone()

    whole, whole_grad = loss_and_grad([collate(ru_lines[:4])])
    single, single_grad = loss_and_grad([collate([line]) for line in ru_lines[:4]])
    assert single == pytest.approx(whole, rel=1e-5)
    assert torch.allclose(single_grad, whole_grad, atol=1e-6, rtol=1e-4)
    schedule = TeacherSchedule(weights)
    schedule.count(1)  # the first sequence of the stream: the teacher reads it
    assert set(loss(collate(ru_lines[1:2]), schedule)[1]) == {"next_token"}


def test_trainer_runs_the_teacher_on_a_share_of_micro_batches(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, max_steps=2, per_device_train_batch_size=1,
                                                          gradient_accumulation_steps=4),
                                  train_dataset=ru_lines[:16], processing_class=tokenizer, teacher_tokenizer=source,
                                  max_length=24, weights=DistillationWeights(adaptive_share=False),
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    calls = []
    teacher_call = Teacher.__call__

    def counting(self, *args, **kwargs):
        calls.append(len(args[0]))
        return teacher_call(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Teacher, "__call__", counting)
        trainer.train()
    assert calls == [1, 1]  # one micro-batch of each step's four
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logs and all("distill/next_piece" in e and "distill/teacher_share" in e for e in logs)


def test_evaluation_scores_the_students_cross_entropy(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """eval_dataset works as with a Trainer: eval_loss is the student's next-token cross-entropy, and evaluation
    neither runs the teacher nor moves its schedule."""
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    held_out = ru_lines[100:104]
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1),
                                  train_dataset=ru_lines[:8], eval_dataset=held_out, processing_class=tokenizer,
                                  teacher_tokenizer=source, max_length=24,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Teacher, "__call__", lambda *args, **kwargs: pytest.fail("the teacher ran in evaluation"))
        before = vars(trainer.schedule).copy()
        evaluated = trainer.evaluate()
    assert vars(trainer.schedule) == before
    batch = trainer.data_collator(held_out)
    model.eval()
    with torch.no_grad():
        expected = next_token_loss(model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits,
                                   batch["labels"])
    assert evaluated["eval_loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert any("eval_loss" in entry for entry in trainer.state.log_history[:-1])  # eval_strategy ran in train()


def test_named_eval_datasets_are_evaluated_by_name(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """A dict of eval datasets: the Trainer evaluates each by its name (a string, which evaluate() checks as a name,
    not as texts), in train() and in evaluate(name)."""
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    named = {"ru": ru_lines[100:104], "more": ru_lines[104:106]}
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1),
                                  train_dataset=ru_lines[:8], eval_dataset=named, processing_class=tokenizer,
                                  teacher_tokenizer=source, max_length=24,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()
    assert {"eval_ru_loss", "eval_more_loss"} <= {key for entry in trainer.state.log_history for key in entry}
    assert trainer.evaluate("ru")["eval_loss"] == pytest.approx(trainer.evaluate(named["ru"])["eval_loss"])


@pytest.mark.parametrize(("architecture", "options"), [("qwen2-tied", {"neftune_noise_alpha": 5.0}),
                                                      ("gpt2-tied", {})])  # GPT-2: dropout 0.1
def test_the_teacher_reads_without_dropout_or_noise_while_the_student_trains(tokenizers_en, tokenizers_ru, ru_lines,
                                                                            tmp_path, architecture, options):
    """The model itself as teacher ran in train mode: NEFTune's noise on its input embeddings and dropout made its
    targets random (two reads of one batch differed by up to 2 in logits)."""
    _, model, tokenizer, source = _extended(architecture, tokenizers_en, tokenizers_ru)
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, max_steps=1, **options), train_dataset=ru_lines[:8],
                                  processing_class=tokenizer, teacher_tokenizer=source, max_length=24,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    batch = trainer.data_collator(ru_lines[:2])
    reads = []

    class Read(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # the Trainer has put the model in train mode
            modes = [m.training for m in model.modules()]
            for _ in range(2):
                reads.append(trainer.teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1,
                                             logits=True).logits)
            assert all(modes) and [m.training for m in model.modules()] == modes  # the student trains on

    trainer.add_callback(Read())
    trainer.train()
    model.eval()
    expected = trainer.teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
    assert len(reads) == 2 and all(torch.equal(read, expected.logits) for read in reads)


@pytest.mark.parametrize("precision", ["model", "teacher"])
def test_trainer_in_bf16_keeps_old_rows(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, precision):
    """A bf16 model with the Trainer's bf16, or a float32 model whose teacher runs in bfloat16 (teacher_dtype)."""
    _, model, tokenizer, source = _extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    if precision == "model":
        model = model.to(torch.bfloat16)
    before = model.get_input_embeddings().weight.detach().clone()
    new_ids = torch.tensor(vocabshift.get_record(model).new_ids)
    trainer = DistillationTrainer(model=model, args=_args(tmp_path, bf16=precision == "model"),
                                  train_dataset=ru_lines[:16], processing_class=tokenizer, teacher_tokenizer=source,
                                  max_length=24, teacher_dtype=torch.bfloat16 if precision == "teacher" else None,
                                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()
    after = model.get_input_embeddings().weight
    old = torch.ones(len(after), dtype=torch.bool)
    old[new_ids] = False
    assert after.dtype == before.dtype and torch.equal(after[old], before[old])
    assert not torch.equal(after[new_ids], before[new_ids])
    assert all(torch.isfinite(torch.tensor(e["loss"])) for e in trainer.state.log_history if "loss" in e)
    objective = vocabshift.get_record(model).cpt[-1]["objective"]
    assert objective["teacher_dtype"] == ("bfloat16" if precision == "teacher" else None)


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_teacher_in_bfloat16_gives_close_targets(tokenizers_en, tokenizers_ru, ru_lines, mode):
    _, model, tokenizer, source = _extended("llama-untied", tokenizers_en, tokenizers_ru, mode)
    record = vocabshift.get_record(model)
    batch = DistillationCollator(tokenizer, source, max_length=24)(ru_lines[:2])
    weights = DistillationWeights(hidden=1, chunk=1, next_piece=1, piece_tree=0, next_token=0, teacher_share=1)
    targets = {}
    for dtype in (None, torch.bfloat16):
        teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=mode == "extend", dtype=dtype)
        targets[dtype] = teacher_targets(teacher, batch, weights)
        out = teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
        assert out.logits.dtype == (dtype or torch.float32)  # the residual stream stays float32 under autocast
    full, half = targets[None], targets[torch.bfloat16]
    assert half.next_logps.dtype == torch.float32  # log probabilities are normalized in float32
    assert torch.allclose(half.next_logps.exp(), full.next_logps.exp(), atol=0.02)
    assert torch.allclose(half.chunk_logps, full.chunk_logps, rtol=0.05, atol=0.1)
    assert not torch.equal(half.next_logps, full.next_logps)  # it did run in bfloat16


@pytest.mark.parametrize(("native", "model_dtype", "chosen"), [(True, torch.float32, torch.bfloat16),
                                                               (False, torch.float32, None),
                                                               (True, torch.bfloat16, None)])
def test_auto_teacher_dtype_is_bfloat16_only_for_a_float32_model_where_native(tokenizers_en, en_lines, monkeypatch,
                                                                               native, model_dtype, chosen):
    monkeypatch.setattr("vocabshift.training.distill.teacher.native_bf16", lambda device: native)
    tokenizer = tokenizers_en["bytelevel"]
    model = make_model("qwen2-tied", tokenizer).to(model_dtype)
    batch = DistillationCollator(tokenizer, tokenizer, max_length=16)(en_lines[:2])
    teacher = Teacher(model, old_rows=len(tokenizer), frozen_old_rows=True, dtype="auto")
    out = teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
    assert teacher.dtype == chosen and out.logits.dtype == (chosen or model_dtype)


def test_native_bf16_asks_the_device(monkeypatch):
    import torch.cpu

    assert not native_bf16(torch.device("meta"))  # no device but CUDA GPUs and CPUs is assumed native
    for avx512_bf16, amx, expected in [(True, False, True), (False, True, True), (False, False, False)]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda value=avx512_bf16: value)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda value=amx: value)
        assert native_bf16(torch.device("cpu")) is expected
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert not native_bf16(torch.device("cpu"))  # a torch without the probes: emulated, so the model's own dtype


def test_teacher_dtype_is_checked(tokenizers_en):
    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    for dtype in (torch.int8, "bfloat16"):
        with pytest.raises(InvalidArgumentError, match="teacher dtype"):
            Teacher(model, old_rows=10, frozen_old_rows=True, dtype=dtype)


def test_next_token_loss_is_the_mean_over_sequences_of_their_token_means():
    """Each sequence's cross-entropy of its next tokens (padding, labels -100, left out), averaged over sequences: a
    short sequence counts as much as a long one, and a sequence with nothing to predict not at all."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=generator, requires_grad=True)
    labels = torch.tensor([[1, 2, 3, 4, 5], [6, 0, -100, -100, -100], [3, -100, -100, -100, -100]])
    expected = torch.stack([torch.nn.functional.cross_entropy(logits[0, :4], labels[0, 1:]),
                            torch.nn.functional.cross_entropy(logits[1, :1], labels[1, 1:2])]).mean()
    loss = next_token_loss(logits, labels)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()
    assert logits.grad is not None and not logits.grad[2].any() and not logits.grad[:, -1].any()
