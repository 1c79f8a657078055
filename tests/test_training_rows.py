"""Split trainable rows (cpt/rows.py): the model stays a transformers model, saves and loads plain, folds back."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, XGLMConfig, XGLMForCausalLM

import vocabshift
from conftest import DEVICES
from test_training_callback import blocks, extended
from test_training_freeze import old_mask, train
from vocabshift.errors import TrainingSetupError, UnsupportedModelError
from vocabshift.training.cpt import embedding_parameters, freeze_for_embedding_training

ARCHITECTURES = ["llama-untied", "qwen2-tied", "gemma3-tied", "gpt2-tied"]


def sample(tokenizer, lines, device):
    ids = tokenizer("\n".join(lines[:40]), add_special_tokens=False)["input_ids"][:48]
    return torch.tensor(ids, device=device).view(2, 24)


def moved_pair(architecture, tokenizers_en, tokenizers_ru, device, *, scattered=False):
    """A split model whose trainable rows were scaled by 1.5, and a plain copy with the same rows.

    The trainable rows are the new ones (one range), or with `scattered` every third new row and every fifth old one.
    """
    model, tokenizer = extended(architecture, tokenizers_en, tokenizers_ru)
    model.to(device).eval()
    reference = copy.deepcopy(model)
    new_ids = vocabshift.get_record(model).new_ids
    rows = sorted(new_ids[::3] + list(range(0, new_ids[0], 5))) if scattered else new_ids
    trainable = freeze_for_embedding_training(model, rows=rows)
    with torch.no_grad():
        for parameter in trainable.parameters:
            parameter.mul_(1.5)
        for weight in embedding_parameters(reference):
            weight[torch.tensor(rows, device=device)] *= 1.5
    return model, reference, trainable, tokenizer


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("architecture, scattered", [(a, False) for a in ARCHITECTURES] + [("llama-untied", True),
                                                                                           ("qwen2-tied", True)])
def test_split_model_behaves_like_the_plain_model(tokenizers_en, tokenizers_ru, ru_lines, architecture, scattered,
                                                  device):
    model, reference, trainable, tokenizer = moved_pair(architecture, tokenizers_en, tokenizers_ru, device,
                                                        scattered=scattered)
    config = model.config.to_dict()
    ids = sample(tokenizer, ru_lines, device)
    old_rows = vocabshift.get_record(model).old_num_rows
    assert (ids >= old_rows).any() and (ids < old_rows).any()  # both kinds of rows are looked up
    with torch.no_grad():
        expected, split = (m(input_ids=ids, output_hidden_states=True) for m in (reference, model))
        torch.testing.assert_close(split.logits, expected.logits)
        torch.testing.assert_close(model(inputs_embeds=model.get_input_embeddings()(ids)).logits, split.logits)
        hidden = expected.hidden_states[-1]
        torch.testing.assert_close(model.get_output_embeddings()(hidden), reference.get_output_embeddings()(hidden))
    state, plain = model.state_dict(), reference.state_dict()
    assert list(state) == list(plain) and all(torch.equal(state[k], plain[k]) for k in plain)
    assert model.config.to_dict() == config
    trainable.fold()


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
def test_saved_while_split_loads_as_a_plain_model(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, architecture):
    model, reference, trainable, tokenizer = moved_pair(architecture, tokenizers_en, tokenizers_ru, "cpu")
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert not any("trainable_rows" in name for name in loaded.state_dict())
    assert loaded.config.tie_word_embeddings == model.config.tie_word_embeddings
    ids = sample(tokenizer, ru_lines, "cpu")
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, reference(input_ids=ids).logits)
    trainable.fold()


def test_loading_a_plain_state_dict_splits_it_again(tokenizers_en, tokenizers_ru, ru_lines):
    """What resuming from a Trainer checkpoint does: the saved rows go into the trainable rows."""
    model, reference, trainable, tokenizer = moved_pair("llama-untied", tokenizers_en, tokenizers_ru, "cpu")
    plain = {k: v.clone() for k, v in reference.state_dict().items()}
    with torch.no_grad():
        for parameter in trainable.parameters:
            parameter.zero_()
    model.load_state_dict(plain)
    state = model.state_dict()
    assert all(torch.equal(state[k], plain[k]) for k in plain)
    ids = sample(tokenizer, ru_lines, "cpu")
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits)
    trainable.fold()


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
def test_fold_writes_the_rows_back_and_removes_the_split(tokenizers_en, tokenizers_ru, ru_lines, architecture):
    model, reference, trainable, tokenizer = moved_pair(architecture, tokenizers_en, tokenizers_ru, "cpu")
    names = [name for name, _ in reference.named_parameters()]
    trainable.fold()
    trainable.fold()  # a second call does nothing
    assert [name for name, _ in model.named_parameters()] == names and not trainable.is_split
    assert all(not m._forward_hooks and "forward" not in vars(m) for m in model.modules())
    assert not model._state_dict_hooks and not model._load_state_dict_pre_hooks
    assert all(torch.equal(a, b) for a, b in zip(embedding_parameters(model), embedding_parameters(reference)))
    assert all(p.requires_grad for p in embedding_parameters(model))
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert tied == (architecture != "llama-untied")


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
def test_bfloat16_model_trains_float32_rows_and_keeps_old_rows(tokenizers_en, tokenizers_ru, ru_lines, architecture):
    """Master weights: the rows train in float32; the bfloat16 matrices keep their old rows bit for bit."""
    model, tokenizer = extended(architecture, tokenizers_en, tokenizers_ru)
    model.to(torch.bfloat16)
    before = [p.detach().clone() for p in embedding_parameters(model)]
    new_ids = torch.tensor(vocabshift.get_record(model).new_ids)
    trainable = freeze_for_embedding_training(model, rows="new")
    assert all(p.dtype == torch.float32 for p in trainable.parameters)
    assert all(torch.equal(p, b[new_ids].float()) for p, b in zip(trainable.parameters, before))
    optimizer = train(model, trainable.parameters, blocks(tokenizer, ru_lines, count=3))
    assert all(t.dtype == torch.float32 for state in optimizer.state.values() for t in state.values() if t.dim())
    trained = [p.detach().clone() for p in trainable.parameters]
    trainable.fold()
    old = old_mask(model)
    for weight, start, rows in zip(embedding_parameters(model), before, trained):
        assert weight.dtype == torch.bfloat16 and torch.equal(weight[old], start[old])
        assert torch.equal(weight[new_ids], rows.bfloat16()) and not torch.equal(weight[new_ids], start[new_ids])


def test_refuses_what_it_cannot_compose(tokenizers_en, tokenizers_ru):
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    model.get_input_embeddings().max_norm = 1.0
    before = model.get_input_embeddings().weight.detach().clone()
    with pytest.raises(UnsupportedModelError, match="max_norm.*rows='all'"):
        freeze_for_embedding_training(model, rows="new")
    assert torch.equal(model.get_input_embeddings().weight, before) and "trainable_rows" not in dict(
        model.named_parameters())
    model.get_input_embeddings().max_norm = None
    trainable = freeze_for_embedding_training(model, rows="new")
    with pytest.raises(TrainingSetupError, match="already has split trainable rows: fold"):
        freeze_for_embedding_training(model, rows="new")
    trainable.fold()


def test_a_lookup_scaled_by_a_float_composes(tokenizers_en, tokenizers_ru, ru_lines):
    """XGLM's (and BioGPT's, TrOCR's) embed_scale is a float, not a buffer: the first forward of the split model raised
    a raw AttributeError ('float' object has no attribute 'to')."""
    source = tokenizers_en["sentencepiece"]
    torch.manual_seed(0)
    model = XGLMForCausalLM(XGLMConfig(vocab_size=len(source), d_model=32, ffn_dim=64, num_layers=1,
                                       attention_heads=2, scale_embedding=True)).eval()
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=source, method="mean")
    ids = sample(tokenizer, ru_lines, "cpu")
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with freeze_for_embedding_training(model, rows="new"):
            torch.testing.assert_close(model(input_ids=ids).logits, expected)


class NormedEmbedding(torch.nn.Embedding):
    """A lookup followed by a norm (as Inkling's): the split rows would skip the norm."""

    def __init__(self, weight):
        super().__init__(*weight.shape)
        self.weight = weight
        self.norm = torch.nn.LayerNorm(weight.shape[1])

    def forward(self, input_ids):
        return self.norm(super().forward(input_ids))


def test_refuses_a_lookup_that_does_more_than_scale(tokenizers_en, tokenizers_ru):
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    model.model.embed_tokens = NormedEmbedding(model.model.embed_tokens.weight)  # it trained the rows without the norm
    with pytest.raises(UnsupportedModelError, match=r"NormedEmbedding .*does more than scale.*rows='all'"):
        freeze_for_embedding_training(model, rows="new")
    assert "trainable_rows" not in dict(model.named_parameters())
    freeze_for_embedding_training(model, rows="all")
