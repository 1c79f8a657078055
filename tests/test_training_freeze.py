"""The plain functions under the callback, in a custom training loop: only the trainable rows move, and only they
take optimizer state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import vocabshift
from conftest import DEVICES
from test_training_callback import blocks, extended
from vocabshift.errors import InvalidArgumentError, TrainingSetupError
from vocabshift.training import EmbeddingOnlyCallback
from vocabshift.training.cpt import embedding_parameters, freeze_for_embedding_training
from vocabshift.training.cpt.freeze import check_rows


def train(model, parameters, batches):
    optimizer = torch.optim.AdamW(parameters, lr=1e-2, weight_decay=0.1)
    device = parameters[0].device
    for batch in batches:
        ids = batch["input_ids"][None].to(device)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return optimizer


def old_mask(model):
    old = torch.ones(model.get_input_embeddings().weight.shape[0], dtype=torch.bool)
    old[vocabshift.get_record(model).new_ids] = False
    return old


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied", "gemma3-tied"])
def test_custom_loop_trains_only_new_rows(tokenizers_en, tokenizers_ru, ru_lines, architecture, device):
    """AdamW with weight decay over the split rows: old rows and body bit-identical, state for the new rows only."""
    model, tokenizer = extended(architecture, tokenizers_en, tokenizers_ru)
    model.to(device)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with freeze_for_embedding_training(model, rows="new") as trainable:
        count, hidden = len(vocabshift.get_record(model).new_ids), model.config.hidden_size
        assert [tuple(p.shape) for p in trainable.parameters] == [(count, hidden)] * len(embedding_parameters(model))
        optimizer = train(model, trainable.parameters, blocks(tokenizer, ru_lines, count=3))
        moments = [t for state in optimizer.state.values() for t in state.values() if t.dim() == 2]
        assert sum(t.numel() for t in moments) == 2 * count * hidden * len(trainable.parameters)
    assert set(dict(model.named_parameters())) == set(before)  # folded: a plain model again
    old = old_mask(model).to(device)
    for name, parameter in model.named_parameters():
        if any(parameter is p for p in embedding_parameters(model)):
            assert torch.equal(parameter[old], before[name][old]), f"old rows of {name} moved"
            assert not torch.equal(parameter[~old], before[name][~old]), f"new rows of {name} did not train"
        else:
            assert torch.equal(parameter, before[name]), f"body parameter {name} moved"


def test_explicit_rows_train_only_those_rows(tokenizers_en, tokenizers_ru, ru_lines):
    """Non-contiguous ids, old and new ones mixed."""
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    batches = blocks(tokenizer, ru_lines, count=3)
    seen = sorted({int(i) for b in batches for i in b["input_ids"]})
    rows = seen[:3] + seen[-3:]
    before = model.get_input_embeddings().weight.detach().clone()
    with freeze_for_embedding_training(model, rows=rows) as trainable:
        assert trainable.ids.tolist() == rows
        train(model, trainable.parameters, batches)
    changed = (model.get_input_embeddings().weight != before).any(dim=1).nonzero().squeeze(1).tolist()
    assert changed == rows


@pytest.mark.parametrize("form", [tuple, range, torch.tensor, np.array, lambda ids: [np.int64(i) for i in ids[::-1]]])
def test_row_ids_in_any_integer_collection(form):
    """A range, a 1-D integer tensor or array, numpy ints, any order and repeats: the same sorted ids as a list."""
    ids = [7, 3, 3, 9]
    given = range(3, 10) if form is range else form(ids)
    assert check_rows(given) == ([3, 4, 5, 6, 7, 8, 9] if form is range else [3, 7, 9])
    assert EmbeddingOnlyCallback(rows=given).rows == check_rows(given)


@pytest.mark.parametrize("rows", [torch.tensor([1.0, 2.0]), torch.tensor([True]), torch.ones(2, 2, dtype=torch.long),
                                  np.array([1.5]), {"a": 1}, b"ab", set(), 3])
def test_rows_that_are_no_row_ids_are_refused(rows):
    with pytest.raises(InvalidArgumentError, match="is invalid: pass 'new', 'all' or a"):
        EmbeddingOnlyCallback(rows=rows)


def test_rows_all_trains_the_whole_matrices(tokenizers_en, tokenizers_ru, ru_lines):
    """Control for the tests above: with rows='all' nothing is split and old rows move too."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    before = [p.detach().clone() for p in embedding_parameters(model)]
    trainable = freeze_for_embedding_training(model, rows="all")
    assert trainable.ids is None and not trainable.is_split
    assert all(a is b for a, b in zip(trainable.parameters, embedding_parameters(model)))
    train(model, trainable.parameters, blocks(tokenizer, ru_lines, count=2))
    trainable.fold()
    old = old_mask(model)
    assert all(not torch.equal(p[old], b[old]) for p, b in zip(embedding_parameters(model), before))


def test_a_model_with_split_rows_is_not_extended_again(tokenizers_en, tokenizers_ru, ru_lines):
    """Its matrices hold zeros at the rows that train: extending it built the new rows from those zeros and the resized
    matrices kept them, so the trained rows were lost (their norm 0.0 afterwards)."""
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    trainable = freeze_for_embedding_training(model, rows="new")
    train(model, trainable.parameters, blocks(tokenizer, ru_lines)[:2])
    trained = [p.detach().clone() for p in trainable.parameters]
    again = tokenizers_ru["bytelevel"]
    with pytest.raises(TrainingSetupError, match=r"rows are split off for training .* Fold them back first"):
        model.extend_vocabulary(again, source_tokenizer=tokenizer)
    assert trainable.is_split and all(torch.equal(p, t) for p, t in zip(trainable.parameters, trained))
    trainable.fold()
    new_ids = vocabshift.get_record(model).new_ids
    model.extend_vocabulary(again, source_tokenizer=tokenizer)
    assert torch.equal(model.get_input_embeddings().weight[new_ids], trained[0])  # what the rows learned is kept
