"""The plain functions under the callback, in a custom training loop."""

from __future__ import annotations

import torch

import vocabshift
from test_training_callback import blocks, extended
from vocabshift.training import freeze_for_embedding_training


def train(model, guard, batches, *, restore):
    optimizer = torch.optim.AdamW(guard.parameters, lr=1e-2, weight_decay=0.1)
    for batch in batches:
        ids = batch["input_ids"][None]
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        if restore:
            guard.restore()
        optimizer.zero_grad()


def test_custom_loop_keeps_old_rows_only_with_restore(tokenizers_en, tokenizers_ru, ru_lines):
    """Masked gradients alone let AdamW's weight decay move old rows; restore() puts them back bit for bit."""
    outcomes = []
    for restore in (True, False):
        model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
        before = model.lm_head.weight.detach().clone()
        guard = freeze_for_embedding_training(model, rows="new")
        assert [p.requires_grad for p in model.parameters()].count(True) == 2
        train(model, guard, blocks(tokenizer, ru_lines, count=3), restore=restore)
        guard.remove()
        old = torch.ones(len(before), dtype=torch.bool)
        old[vocabshift.get_record(model).new_ids] = False
        outcomes.append(torch.equal(model.lm_head.weight[old], before[old]))
        assert not torch.equal(model.lm_head.weight[~old], before[~old])
    assert outcomes == [True, False]


def test_explicit_rows_train_only_those_rows(tokenizers_en, tokenizers_ru, ru_lines):
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    batches = blocks(tokenizer, ru_lines, count=3)
    rows = sorted({int(i) for b in batches for i in b["input_ids"]})[:5]
    before = model.get_input_embeddings().weight.detach().clone()
    guard = freeze_for_embedding_training(model, rows=rows)
    train(model, guard, batches, restore=True)
    changed = (model.get_input_embeddings().weight != before).any(dim=1).nonzero().squeeze(1).tolist()
    assert changed == rows
