"""The contract every registered method keeps, on every architecture, in both modes."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import vocabshift
from conftest import ARCHITECTURES, make_model
from vocabshift.methods.base import median_norm

MODES = ("extend", "replace")
CONTRACT_ARCHITECTURES = ("llama-untied", "qwen2-tied", "gpt2-tied", "bert-encoder")


def _scramble_global_rngs(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.randn(17)


def _extend(architecture, tokenizers_en, tokenizers_ru, method, mode, seed=0, options=None):
    family = ARCHITECTURES[architecture][0]
    source, new = tokenizers_en[family], tokenizers_ru[family]
    options = options(method, family) if options else {}
    model = make_model(architecture, source)
    before = {"input": model.get_input_embeddings().weight.detach().clone()}
    head = model.get_output_embeddings()
    if head is not None and head.weight is not model.get_input_embeddings().weight:
        before["output"] = head.weight.detach().clone()
    tokenizer = model.extend_vocabulary(new, method=method, mode=mode, source_tokenizer=source, seed=seed, **options)
    return model, tokenizer, source, before


def _after(model):
    after = {"input": model.get_input_embeddings().weight.detach()}
    head = model.get_output_embeddings()
    if head is not None and head.weight is not model.get_input_embeddings().weight:
        after["output"] = head.weight.detach()
    return after


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("architecture", CONTRACT_ARCHITECTURES)
@pytest.mark.parametrize("method", vocabshift.list_methods())
def test_method_contract(tokenizers_en, tokenizers_ru, method_options, method, architecture, mode):
    model, tokenizer, source, before = _extend(architecture, tokenizers_en, tokenizers_ru, method, mode,
                                               options=method_options)
    after = _after(model)
    record = vocabshift.get_record(model)
    new_ids = torch.tensor(record.new_ids)
    assert after.keys() == before.keys(), "tying changed"
    assert len(tokenizer) <= after["input"].shape[0] == model.config.vocab_size
    for side, old in before.items():
        rows = after[side]
        assert rows.dtype == old.dtype and torch.isfinite(rows).all()
        if mode == "extend":
            kept = torch.ones(old.shape[0], dtype=torch.bool)
            kept[new_ids[new_ids < old.shape[0]]] = False
            assert torch.equal(rows[: old.shape[0]][kept], old[kept]), "old rows changed"
        norms = rows[new_ids].norm(dim=1)
        median = median_norm(old[: len(source)])
        assert (norms >= 0.5 * median).all() and (norms <= 2 * median).all(), (norms.min(), norms.max(), median)
        for token in source.all_special_tokens:
            old_row = old[source.convert_tokens_to_ids(token)]
            assert torch.equal(rows[tokenizer.convert_tokens_to_ids(token)], old_row), f"{token} row not kept"


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
@pytest.mark.parametrize("method", vocabshift.list_methods())
def test_method_is_deterministic_under_global_rng_noise(tokenizers_en, tokenizers_ru, method_options, method,
                                                        architecture):
    _scramble_global_rngs(1)
    first = _after(_extend(architecture, tokenizers_en, tokenizers_ru, method, "extend", 7, method_options)[0])
    _scramble_global_rngs(2)
    second = _after(_extend(architecture, tokenizers_en, tokenizers_ru, method, "extend", 7, method_options)[0])
    for side in first:
        assert torch.equal(first[side], second[side])


@pytest.mark.parametrize("method", ["random", "multivariate"])
def test_seed_changes_random_rows(tokenizers_en, tokenizers_ru, method):
    first = _after(_extend("qwen2-tied", tokenizers_en, tokenizers_ru, method, "extend", seed=1)[0])
    second = _after(_extend("qwen2-tied", tokenizers_en, tokenizers_ru, method, "extend", seed=2)[0])
    assert not torch.equal(first["input"], second["input"])
