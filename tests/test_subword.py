"""`subword`'s tied mean shift: exactly which rows it moves, and the options it refuses."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import vocabshift
from conftest import ARCHITECTURES, make_model
from vocabshift.errors import MethodOptionError


def _extend(architecture, tokenizers_en, tokenizers_ru, **options):
    family = ARCHITECTURES[architecture][0]
    source, new = tokenizers_en[family], tokenizers_ru[family]
    model = make_model(architecture, source)
    old = model.get_input_embeddings().weight.detach()[: len(source)].clone()
    model.extend_vocabulary(new, source_tokenizer=source, method="subword", **options)
    record = vocabshift.get_record(model)
    return model, old, record


def _new_rows(model, record, output=False):
    layer = model.get_output_embeddings() if output else model.get_input_embeddings()
    return layer.weight.detach()[torch.tensor(record.new_ids)]


def test_tied_composed_rows_move_by_the_shift_times_the_mean_row(tokenizers_en, tokenizers_ru):
    plain, old, record = _extend("qwen2-tied", tokenizers_en, tokenizers_ru)
    shifted, _, shifted_record = _extend("qwen2-tied", tokenizers_en, tokenizers_ru, tied_mean_shift=0.25)
    composed = torch.tensor([len(p) > 1 for p in record.decomposition_lists()])
    assert composed.sum() > 100 and record.diagnostics["tied_mean_shift"] == 0.0
    assert shifted_record.diagnostics["tied_mean_shift"] == 0.25
    difference = _new_rows(plain, record) - _new_rows(shifted, shifted_record)
    torch.testing.assert_close(difference[composed], (0.25 * old.mean(dim=0)).expand(int(composed.sum()), -1))
    assert torch.equal(difference[~composed], torch.zeros_like(difference[~composed]))
    assert shifted.get_output_embeddings().weight.data_ptr() == shifted.get_input_embeddings().weight.data_ptr()


def test_untied_rows_ignore_the_shift(tokenizers_en, tokenizers_ru):
    plain, _, record = _extend("llama-untied", tokenizers_en, tokenizers_ru)
    asked, _, asked_record = _extend("llama-untied", tokenizers_en, tokenizers_ru, tied_mean_shift=0.25)
    assert asked_record.diagnostics["tied_mean_shift"] == 0.0
    for output in (False, True):
        assert torch.equal(_new_rows(plain, record, output), _new_rows(asked, asked_record, output))


@pytest.mark.parametrize(("value", "match"), [(-0.1, "from 0 \\(off\\) to 1"), (1.5, "from 0 \\(off\\) to 1"),
                                              (math.nan, "pass a finite number")])  # every float option's check
def test_shift_outside_zero_one_is_refused(tokenizers_en, tokenizers_ru, value, match):
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("qwen2-tied", source)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(MethodOptionError, match=f"tied_mean_shift.*{match}"):
        model.extend_vocabulary(new, source_tokenizer=source, method="subword", tied_mean_shift=value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
