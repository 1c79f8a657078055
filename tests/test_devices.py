"""Everything runs where the model lives: extend_vocabulary and every method, training, evaluation, the probe.

With an accelerator (cuda, mps; marked `device`, run by scripts/check_gpu.sh) the model moves there. On the CPU the
default device is set to `meta` while the model stays on the CPU: anything that allocates without naming a device
(what breaks, or quietly moves work to the CPU, when the model lives on a GPU) then fails.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from transformers import Trainer

import vocabshift
from conftest import DEVICES, make_model
from test_training_callback import arguments, assert_only_new_rows_changed, blocks, extended, snapshot
from test_training_freeze import old_mask, train
from vocabshift.training.cpt import embedding_parameters, freeze_for_embedding_training, row_norms

ACCELERATORS = DEVICES[1:]
FAMILY = "sentencepiece"


@contextlib.contextmanager
def elsewhere(device: str):
    """On the CPU: `meta` as the default device, so that implicit allocations fail. On accelerators: nothing."""
    with torch.device("meta") if device == "cpu" else contextlib.nullcontext():
        yield


def on(model, device: str) -> bool:
    return {p.device.type for p in model.parameters()} == {torch.device(device).type}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", vocabshift.list_methods())
def test_extend_computes_where_the_model_lives(tokenizers_en, tokenizers_ru, method_options, method, device):
    source, new = tokenizers_en[FAMILY], tokenizers_ru[FAMILY]
    reference = make_model("llama-untied", source)
    model = copy.deepcopy(reference).to(device)
    options = method_options(method, FAMILY)  # helper models and word vectors are made outside the trap
    reference.extend_vocabulary(new, source_tokenizer=source, method=method, **options)
    with elsewhere(device):
        model.extend_vocabulary(new, source_tokenizer=source, method=method, **options)
    assert on(model, device)
    for rows, expected in zip(embedding_parameters(model), embedding_parameters(reference)):
        if device == "cpu":
            assert torch.equal(rows, expected)
        elif method != "hyperofa":  # its dropout draws from the device's generator
            torch.testing.assert_close(rows.cpu(), expected, rtol=1e-3, atol=1e-3)
        assert torch.isfinite(rows).all()


@pytest.mark.parametrize("device", DEVICES)
def test_replace_mode_computes_where_the_model_lives(tokenizers_en, tokenizers_ru, device):
    source, new = tokenizers_en[FAMILY], tokenizers_ru[FAMILY]
    reference = make_model("qwen2-tied", source)
    model = copy.deepcopy(reference).to(device)
    reference.extend_vocabulary(new, source_tokenizer=source, mode="replace", pad_to_multiple_of=64)
    with elsewhere(device):
        model.extend_vocabulary(new, source_tokenizer=source, mode="replace", pad_to_multiple_of=64)
    assert on(model, device)
    torch.testing.assert_close(model.get_input_embeddings().weight.cpu(), reference.get_input_embeddings().weight)


@pytest.mark.parametrize("device", DEVICES)
def test_training_evaluation_and_probe_where_the_model_lives(tokenizers_en, tokenizers_ru, ru_lines, device):
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.to(device)
    before = [p.detach().clone() for p in embedding_parameters(model)]
    base = make_model("llama-untied", tokenizers_en[FAMILY]).to(device)
    batches = blocks(tokenizer, ru_lines, count=2)  # data, on the CPU: the loop moves each batch
    with elsewhere(device):
        with freeze_for_embedding_training(model, rows="new") as trainable:
            train(model, trainable.parameters, batches)
            norms = row_norms(model, trainable.ids)
            assert set(model.state_dict()) == set(base.state_dict())
        scores = vocabshift.evaluate(model, tokenizer, ru_lines[:20]).scores[0]
        result = vocabshift.probe(base, tokenizers_ru[FAMILY], ru_lines[:300], ru_lines[300:320], methods=["mean"],
                                  objectives=["next_token", "distillation"],
                                  steps=2, eval_every=1, batch_size=2, context_length=32,
                                  source_tokenizer=tokenizers_en[FAMILY])
    assert on(model, device) and on(base, device)
    old = old_mask(model).to(device)
    assert all(torch.equal(p[old], b[old]) for p, b in zip(embedding_parameters(model), before))
    assert norms["embed_new_row_norm"] > 0 and 0 < scores.bits_per_byte < 20
    assert all(len(curve) == 3 for curve in result.curves.values())
    assert set(result.curves) == {"mean / next_token", "mean / distillation"}


@pytest.mark.parametrize("device", ACCELERATORS)
def test_trainer_on_an_accelerator(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, device):
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    before = snapshot(model)
    trainer = Trainer(model=model, args=arguments(tmp_path, use_cpu=False), train_dataset=blocks(tokenizer, ru_lines),
                      callbacks=[vocabshift.EmbeddingOnlyCallback()])
    trainer.train()
    assert on(model, device)
    assert_only_new_rows_changed(model.cpu(), before)
