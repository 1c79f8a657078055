"""Source-language text read at the output head only (`distill/replay.py`) and its place in DistillationTrainer."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from transformers import TrainingArguments

import vocabshift
from conftest import make_model, make_tokenizer
from vocabshift.errors import CorpusError, InvalidArgumentError
from vocabshift.training import pack_texts
from vocabshift.training.distill.replay import READ_EVERY, SourceReplay, source_loss
from vocabshift.training.distill.trainer import DistillationTrainer
from vocabshift.training.distill.weights import DistillationWeights
from vocabshift.training.texts import join_texts


@pytest.fixture(scope="module")
def same_script(en_lines, ru_lines):
    """A target tokenizer whose new tokens are mostly Latin, as German's or Vietnamese's are on an English model."""
    return make_tokenizer("bytelevel", en_lines[1000:3000] + ru_lines[:500], 1200)


def _extended(tokenizers_en, target, architecture="qwen2-tied"):
    source = tokenizers_en["bytelevel" if architecture == "qwen2-tied" else "sentencepiece"]
    model = make_model(architecture, source)
    tokenizer = model.extend_vocabulary(target, source_tokenizer=source)
    return model, tokenizer, source


def test_replay_reads_packed_sequences_in_turn(tokenizers_en, en_lines):
    tokenizer = tokenizers_en["bytelevel"]
    replay = SourceReplay(tokenizer, en_lines[:40], max_length=16)
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    assert len(replay.sequences) > 2
    assert all(s[0] == prefix and 2 <= len(s) <= 16 for s in replay.sequences)
    seen = [replay.batch("cpu") for _ in range(len(replay.sequences))]
    assert [b["input_ids"].tolist() for b in seen] == [[s] for s in replay.sequences]  # in turn
    assert replay.batch("cpu")["input_ids"].tolist() == [replay.sequences[0]]  # then from the start
    assert torch.equal(seen[0]["labels"], seen[0]["input_ids"]) and bool(seen[0]["attention_mask"].all())
    assert [replay.due() for _ in range(2 * READ_EVERY)] == [True, *[False] * (READ_EVERY - 1)] * 2


def test_replay_defaults_to_the_shipped_english(tokenizers_en):
    tokenizer = tokenizers_en["bytelevel"]
    shipped = join_texts(list(vocabshift.corpus.shipped_english()), tokenizer, max_length=32)  # long lines whole
    assert len(SourceReplay(tokenizer, None, max_length=32).sequences) == len(shipped)


def test_a_read_counts_every_times_in_the_gradient_and_once_in_the_value(tokenizers_en, en_lines):
    replay = SourceReplay(tokenizers_en["bytelevel"], en_lines[:40], max_length=16)
    x = torch.tensor(2.0, requires_grad=True)
    base = torch.tensor(1.0)
    assert replay.weighed(base, None).item() == 1.0  # before the first read: nothing to carry
    read = replay.weighed(base, 3 * x)
    read.backward()
    assert read.item() == pytest.approx(7.0) and x.grad.item() == pytest.approx(3 * READ_EVERY)
    assert replay.weighed(base, None).item() == pytest.approx(7.0)  # between reads: the last read's term
    assert SourceReplay(tokenizers_en["bytelevel"], en_lines[:40], max_length=16).state_dict()["last"] is None
    assert replay.state_dict()["last"] == pytest.approx(6.0)


def test_the_logged_loss_has_no_jump_at_each_read(tokenizers_en, same_script, ru_lines, en_lines, tmp_path):
    model, tokenizer, source = _extended(tokenizers_en, same_script)
    texts = [{"text": t} for t in pack_texts(ru_lines[:120], tokenizer, max_length=32)]
    args = TrainingArguments(str(tmp_path), max_steps=2 * READ_EVERY, per_device_train_batch_size=2,
                             learning_rate=1e-3, lr_scheduler_type="constant", save_strategy="no", report_to=[],
                             use_cpu=True, seed=0, logging_steps=1)
    weights = dataclasses.replace(DistillationWeights.next_token_only(), source=2.0)
    trainer = DistillationTrainer(model=model, args=args, train_dataset=texts, processing_class=tokenizer,
                                  teacher_tokenizer=source, max_length=32, source_texts=en_lines[:200],
                                  weights=weights, callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "distill/next_token" in entry]
    assert len(logged) == 2 * READ_EVERY and sum("distill/source" in entry for entry in logged) == 2
    last = None
    for entry in logged:  # the loss is next_token + 2 x the last read's source loss, on every step
        last = entry.get("distill/source", last)
        assert entry["loss"] == pytest.approx(entry["distill/next_token"] + 2.0 * last, rel=1e-3)


@pytest.mark.parametrize("texts", ["one line", [], [b"bytes"]])
def test_replay_refuses_what_is_not_lines(tokenizers_en, texts):
    with pytest.raises(CorpusError, match="source_texts"):
        SourceReplay(tokenizers_en["bytelevel"], texts, max_length=16)


@pytest.mark.parametrize("architecture", ["qwen2-tied", "llama-untied"])
def test_source_loss_trains_the_rows_as_outputs_only(tokenizers_en, tokenizers_ru, en_lines, architecture):
    target = tokenizers_ru["bytelevel" if architecture == "qwen2-tied" else "sentencepiece"]
    model, tokenizer, _ = _extended(tokenizers_en, target, architecture)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    head = model.get_output_embeddings().weight.requires_grad_(True)
    model.get_input_embeddings().weight.requires_grad_(True)  # the same tensor when tied
    batch = SourceReplay(tokenizer, en_lines[:20], max_length=24).batch("cpu")
    loss = source_loss(model, batch)
    loss.backward()
    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=batch["input_ids"]).last_hidden_state
        plain = model(**batch).loss
    expected = torch.func.grad(lambda w: F.cross_entropy((hidden @ w.T)[0, :-1], batch["input_ids"][0, 1:]))(head)
    assert loss.item() == pytest.approx(plain.item(), rel=1e-5)
    assert torch.allclose(head.grad, expected, atol=1e-6)  # nothing through the body or the input lookup
    if architecture == "llama-untied":
        assert model.get_input_embeddings().weight.grad is None


def test_replay_moves_probability_off_new_tokens_in_the_source(tokenizers_en, same_script, ru_lines, en_lines,
                                                                tmp_path):
    model, tokenizer, source = _extended(tokenizers_en, same_script)
    old = len(source)
    english = en_lines[200:260]
    texts = [{"text": t} for t in pack_texts(ru_lines[:120], tokenizer, max_length=32)]

    def new_token_mass(weight):
        trained = copy.deepcopy(model)
        args = TrainingArguments(str(tmp_path / str(weight)), max_steps=32, per_device_train_batch_size=2,
                                 learning_rate=1e-2, lr_scheduler_type="constant", save_strategy="no", report_to=[],
                                 use_cpu=True, seed=0)
        trainer = DistillationTrainer(model=trained, args=args, train_dataset=texts, processing_class=tokenizer,
                                      teacher_tokenizer=source, max_length=32,
                                      source_texts=en_lines[:200] if weight else None,
                                      weights=DistillationWeights(source=weight),
                                      callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
        trainer.train()
        assert (trainer.source is None) == (weight == 0)
        assert vocabshift.get_record(trained).cpt[-1]["objective"]["source_read"] == (weight > 0)
        ids = source(english, add_special_tokens=False, return_tensors="pt", padding=True, truncation=True,
                     max_length=32)
        with torch.no_grad():
            probs = trained(**ids).logits.softmax(-1)
        return (probs[..., old:].sum(-1) * ids["attention_mask"]).sum() / ids["attention_mask"].sum()

    without, with_replay = new_token_mass(0.0), new_token_mass(1.0)
    assert with_replay < 0.97 * without  # held-out English, old cuts (0.82x here: 4 reads; equal batches otherwise)


def test_source_weight_is_checked():
    with pytest.raises(InvalidArgumentError, match="source=-1"):
        DistillationWeights(source=-1)
    assert DistillationWeights().source == 1 and DistillationWeights.next_token_only().source == 0


def test_replay_is_skipped_where_the_source_is_cut_as_before(tokenizers_en, tokenizers_ru, same_script, en_lines):
    for target, read in ((tokenizers_ru["bytelevel"], False), (same_script, True)):
        _, tokenizer, source = _extended(tokenizers_en, target)
        replay = SourceReplay(tokenizer, en_lines[:100], max_length=32)
        assert replay.cut_differently(source) is read  # Cyrillic tokens: English is cut as before


def test_source_texts_without_the_weight_are_refused(tokenizers_en, same_script, en_lines, tmp_path):
    model, tokenizer, source = _extended(tokenizers_en, same_script)
    args = TrainingArguments(str(tmp_path), max_steps=1, report_to=[], use_cpu=True)
    with pytest.raises(InvalidArgumentError, match="source_texts is given but weights.source is 0"):
        DistillationTrainer(model=model, args=args, train_dataset=en_lines[:8], processing_class=tokenizer,
                            teacher_tokenizer=source, source_texts=en_lines[:20],
                            weights=DistillationWeights(source=0.0),
                            callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
