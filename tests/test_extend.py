"""`model.extend_vocabulary`: heads, padding, special ids, save/reload, the record."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch
from tokenizers import AddedToken
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    BertConfig,
    CLIPVisionConfig,
    EncoderDecoderConfig,
    EncoderDecoderModel,
    GenerationConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
)

import vocabshift
from conftest import ARCHITECTURES, make_model, make_tokenizer
from vocabshift.errors import NoNewTokensError, TokenizerMismatchError, UnsupportedModelError
from vocabshift.inspection import record_summary
from vocabshift.vocab.load import fingerprint


def _pair(tokenizers_en, tokenizers_ru, architecture):
    family = ARCHITECTURES[architecture][0]
    return tokenizers_en[family], tokenizers_ru[family]


def _logits(model, ids):
    with torch.no_grad():
        output = model(input_ids=torch.tensor([ids]))
    return output.logits if hasattr(output, "logits") else output.last_hidden_state


@pytest.mark.parametrize("mode", ["extend", "replace"])
@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied", "gpt2-tied", "bert-encoder", "gemma3-tied"])
def test_save_and_reload_give_identical_logits(tokenizers_en, tokenizers_ru, ru_held, en_held, tmp_path, architecture,
                                               mode):
    source, new = _pair(tokenizers_en, tokenizers_ru, architecture)
    model = make_model(architecture, source)
    tokenizer = model.extend_vocabulary(new, mode=mode, source_tokenizer=source)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    auto = AutoModel if architecture == "bert-encoder" else AutoModelForCausalLM
    reloaded, reloaded_tokenizer = auto.from_pretrained(tmp_path).eval(), AutoTokenizer.from_pretrained(tmp_path)
    texts = ru_held[:20] + en_held[:20]
    assert reloaded_tokenizer(texts)["input_ids"] == tokenizer(texts)["input_ids"]
    assert fingerprint(reloaded_tokenizer) == vocabshift.get_record(model).tokenizer_sha256
    ids = reloaded_tokenizer.encode(ru_held[0])[:48]
    assert max(ids) >= len(source) or mode == "replace"
    assert torch.equal(_logits(model, ids), _logits(reloaded, ids))
    assert vocabshift.get_record(reloaded) == vocabshift.get_record(model)
    assert json.loads((tmp_path / "config.json").read_text())["vocabshift"]["mode"] == mode


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied"])
def test_tying_is_preserved(tokenizers_en, tokenizers_ru, architecture):
    source, new = _pair(tokenizers_en, tokenizers_ru, architecture)
    model = make_model(architecture, source)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    model.extend_vocabulary(new, source_tokenizer=source)
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    assert model.get_output_embeddings().out_features == model.config.vocab_size
    assert vocabshift.get_record(model).tied == tied


def test_a_per_token_tensor_besides_the_embeddings_is_refused_untouched(tokenizers_en, tokenizers_ru):
    """Marian/mBART/BART add `final_logits_bias`, one value per token outside the head: left at the old size, the
    extended model failed in its first forward (a raw size mismatch in torch)."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = MarianMTModel(MarianConfig(vocab_size=len(source), d_model=32, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, pad_token_id=0, decoder_start_token_id=0))
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(UnsupportedModelError, match=r"MarianMTModel has final_logits_bias of shape \(1, 700\), one "
                       r"value per token"):
        model.extend_vocabulary(new, source_tokenizer=source)
    assert model.config.vocab_size == len(source) and "vocabshift" not in model.config.to_dict()
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_rows_computed_inside_inference_mode_can_train(tokenizers_en, tokenizers_ru, mode):
    """extend_vocabulary inside `torch.inference_mode()` (after an evaluation, say) gives rows that take gradients."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = make_model("llama-untied", source)
    with torch.inference_mode():
        tokenizer = model.extend_vocabulary(new, source_tokenizer=source, mode=mode)
    parameters = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
    assert not any(p.is_inference() for p in model.parameters())
    ids = torch.tensor([tokenizer.encode("Привет, мир")])
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in parameters)


def test_source_texts_in_any_collection(tokenizers_en, tokenizers_ru, en_held):
    """source_texts as a generator is read once, as the list would be (target_texts always took any iterable)."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    lists = make_model("qwen2-tied", source)
    lists.extend_vocabulary(new, source_tokenizer=source, source_texts=en_held[:50])
    generated = make_model("qwen2-tied", source)
    generated.extend_vocabulary(new, source_tokenizer=source, source_texts=(line for line in en_held[:50]))
    assert vocabshift.get_record(generated).tokenizer_report == vocabshift.get_record(lists).tokenizer_report
    assert vocabshift.get_record(generated).tokenizer_report["source_lines_checked"] == 50


def test_untied_output_rows_get_their_own_initialization(tokenizers_en, tokenizers_ru):
    source, new = _pair(tokenizers_en, tokenizers_ru, "llama-untied")
    model = make_model("llama-untied", source)
    model.extend_vocabulary(new, source_tokenizer=source, method="subword")
    ids = torch.tensor(vocabshift.get_record(model).new_ids)
    head, inputs = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    assert not torch.equal(head[ids], inputs[ids])


def test_extend_keeps_old_token_logits_for_gemma_scaled_embeddings(tokenizers_en, tokenizers_ru, en_held):
    """Gemma multiplies embeddings by sqrt(hidden) in its embedding module: the module (and scale) must stay."""
    source, new = _pair(tokenizers_en, tokenizers_ru, "gemma3-tied")
    model = make_model("gemma3-tied", source)
    embedding_class = type(model.get_input_embeddings())
    ids = source.encode(en_held[0])[:32]
    before = _logits(model, ids)
    model.extend_vocabulary(new, source_tokenizer=source)
    assert type(model.get_input_embeddings()) is embedding_class
    assert float(model.get_input_embeddings().embed_scale) == pytest.approx(model.config.hidden_size**0.5)
    torch.testing.assert_close(_logits(model, ids)[..., : len(source)], before, rtol=0, atol=1e-5)


def test_padded_vocabulary_rows_stay_out_of_the_token_maps(tokenizers_en, tokenizers_ru):
    source, new = _pair(tokenizers_en, tokenizers_ru, "qwen2-tied")
    model = make_model("qwen2-tied", source, extra_rows=40)
    with torch.no_grad():  # padding rows far from the token rows: they must not leak into any statistic
        model.get_input_embeddings().weight[len(source):] = 100.0
    token_rows = model.get_input_embeddings().weight.detach()[: len(source)].clone()
    model.extend_vocabulary(new, source_tokenizer=source, method="mean")
    record = vocabshift.get_record(model)
    assert record.new_ids[0] == len(source) and record.old_num_rows == len(source) + 40
    rows = model.get_input_embeddings().weight[record.new_ids]
    torch.testing.assert_close(rows, token_rows.mean(dim=0).expand_as(rows))


def test_thousands_of_padding_rows_are_the_models_own(tokenizers_en, tokenizers_ru):
    """DeepSeek LLM / DeepSeekMoE: 102,400 rows for 100,015 tokens. Their own tokenizer was refused as 'not this
    model's tokenizer'."""
    source, new = _pair(tokenizers_en, tokenizers_ru, "qwen2-tied")
    model = make_model("qwen2-tied", source, extra_rows=2385)
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source)
    assert vocabshift.get_record(model).new_ids[0] == len(source) and len(tokenizer) == model.config.vocab_size


def test_padding_rows_beyond_the_new_tokens_are_kept(tokenizers_en, tokenizers_ru):
    source, new = _pair(tokenizers_en, tokenizers_ru, "qwen2-tied")
    model = make_model("qwen2-tied", source, extra_rows=1000)
    old = model.get_input_embeddings().weight.detach().clone()
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, pad_to_multiple_of=None)
    rows, end = model.get_input_embeddings().weight, vocabshift.get_record(model).new_ids[-1] + 1
    assert rows.shape[0] == old.shape[0] == len(tokenizer) > end  # the rows left get placeholder tokens
    assert torch.equal(rows[end:], old[end:])


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_special_token_beyond_the_rows_gets_the_mean_row(tokenizers_en, tokenizers_ru, mode):
    """A source special token past the embedding rows (as Gemma-3's image token): replace mode raised IndexError."""
    source, new = _pair(tokenizers_en, tokenizers_ru, "llama-untied")
    model = make_model("llama-untied", source)
    old = model.get_input_embeddings().weight.detach().clone()
    source = copy.deepcopy(source)
    source.add_special_tokens({"additional_special_tokens": ["<image>"]})
    assert source.convert_tokens_to_ids("<image>") == old.shape[0]
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, mode=mode)
    weight = model.get_input_embeddings().weight
    torch.testing.assert_close(weight[tokenizer.convert_tokens_to_ids("<image>")], old.mean(dim=0))
    pairs = torch.tensor(vocabshift.get_record(model).shared_pairs())  # the rows copied: not the image token's
    assert torch.equal(weight[pairs[:, 0]], old[pairs[:, 1]])


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_pad_to_multiple_of(tokenizers_en, tokenizers_ru, mode):
    source, new = _pair(tokenizers_en, tokenizers_ru, "llama-untied")
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, mode=mode, pad_to_multiple_of=64)
    rows = model.config.vocab_size
    assert rows % 64 == 0 and rows - 64 < len(tokenizer) <= rows
    assert model.get_output_embeddings().weight.shape[0] == rows == model.get_input_embeddings().num_embeddings
    assert torch.isfinite(model.get_output_embeddings().weight).all()


def test_replace_mode_keeps_model_conventions(tokenizers_en, tokenizers_ru):
    source, new = _pair(tokenizers_en, tokenizers_ru, "qwen2-tied")
    model = make_model("qwen2-tied", source)
    model.generation_config = GenerationConfig(eos_token_id=[source.eos_token_id, 0], pad_token_id=source.eos_token_id)
    old_rows = model.get_input_embeddings().weight.detach().clone()
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, mode="replace")
    assert tokenizer.chat_template == source.chat_template
    for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(tokenizer, role) == getattr(source, role)
    eos = tokenizer.eos_token_id
    assert model.config.eos_token_id == eos and model.config.bos_token_id == tokenizer.bos_token_id
    assert model.generation_config.eos_token_id == [eos, tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    assert model.generation_config.pad_token_id == eos
    assert torch.equal(model.get_input_embeddings().weight[eos], old_rows[source.eos_token_id])
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Привет"}], tokenize=False)
    assert text.startswith("<|im_start|>user")


def test_replace_mode_remaps_the_post_processor(tokenizers_en, tokenizers_ru):
    source, new = _pair(tokenizers_en, tokenizers_ru, "llama-untied")
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, mode="replace")
    ids = tokenizer.encode("Привет")
    assert ids[0] == tokenizer.bos_token_id == model.config.bos_token_id


def test_a_head_tied_to_another_embedding_than_the_input_is_refused_untouched(tokenizers_en, tokenizers_ru):
    """EncoderDecoderModel (bert2bert): the input embeddings are the encoder's, the head is tied to the decoder's.
    Both were resized but the encoder's config kept the old vocab_size, so the saved model did not load."""
    source, new = tokenizers_en["wordpiece"], tokenizers_ru["wordpiece"]
    shape = dict(vocab_size=len(source), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                 intermediate_size=64)
    model = EncoderDecoderModel(config=EncoderDecoderConfig.from_encoder_decoder_configs(
        BertConfig(**shape), BertConfig(**shape, is_decoder=True, add_cross_attention=True)))
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(UnsupportedModelError, match=r"EncoderDecoderModel's output head is tied to "
                       r"decoder.bert.embeddings.word_embeddings, a token embedding other than its input embeddings"):
        model.extend_vocabulary(new, source_tokenizer=source)
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


def _llava(vocab_size: int, image_token_index: int) -> LlavaForConditionalGeneration:
    text = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                              image_size=32, patch_size=16)
    return LlavaForConditionalGeneration(LlavaConfig(text_config=text, vision_config=vision,
                                                     image_token_index=image_token_index)).eval()


def test_replace_mode_moves_a_vision_models_image_token_index(tokenizers_en, tokenizers_ru):
    """Llava (PaliGemma, Gemma-3, Mistral-3) name their image token `image_token_index`: replace mode moved the
    `<image>` token but left the config's id, which then named an ordinary token of the new vocabulary."""
    source, new = copy.deepcopy(tokenizers_en["bytelevel"]), tokenizers_ru["bytelevel"]
    source.add_tokens([AddedToken("<image>", special=True, normalized=False)], special_tokens=True)
    model = _llava(len(source), source.convert_tokens_to_ids("<image>"))
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, mode="replace")
    assert model.config.image_token_index == tokenizer.convert_tokens_to_ids("<image>") != len(source) - 1


def test_a_source_tokenizer_without_the_models_image_token_is_refused_untouched(tokenizers_en, tokenizers_ru):
    """Llava given its language model's tokenizer, which lacks `<image>` (id 700, its row the last): the first new
    token took id 700, which the model reads as its image token."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    model = _llava(len(source) + 1, len(source))
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(TokenizerMismatchError, match=r"config.image_token_index=700 names no token of "
                       r"source_tokenizer \(700 tokens\), and the new token 'ĠÐ' would take that id"):
        model.extend_vocabulary(new, source_tokenizer=source)
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    assert "vocabshift" not in model.config.to_dict()


def test_a_source_tokenizer_without_special_token_roles_is_warned_about(tokenizers_en, tokenizers_ru, tmp_path,
                                                                         caplog):
    """source_tokenizer as the model's tokenizer.json (accepted) carries no eos/pad roles nor chat template: the
    returned tokenizer had none either, silently, and the folder saved with it failed `inspect`."""
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    source.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    model = make_model("qwen2-tied", source)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        tokenizer = model.extend_vocabulary(new, source_tokenizer=tmp_path / "tokenizer.json")
    assert tokenizer.eos_token is None
    assert "source_tokenizer has no eos_token while the model's config names eos_token_id=2 ('<|im_end|>'): a " \
        "tokenizer.json or a tokenizers.Tokenizer carries no special-token roles nor chat template, so the returned " \
        "tokenizer has none either" in caplog.text
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        make_model("qwen2-tied", source).extend_vocabulary(new, source_tokenizer=source)
    assert caplog.text.count("has no eos_token") == 1


def test_default_source_tokenizer_comes_from_the_model_folder(tokenizers_en, tokenizers_ru, tmp_path):
    source, new = _pair(tokenizers_en, tokenizers_ru, "qwen2-tied")
    make_model("qwen2-tied", source).save_pretrained(tmp_path)
    source.save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    tokenizer = model.extend_vocabulary(new)
    record = vocabshift.get_record(model)
    assert record.source_model == str(tmp_path) and len(tokenizer) == record.new_vocab_size


def test_extending_twice_chains_through_the_record(tokenizers_en, tokenizers_ru, ru_lines):
    source, new = _pair(tokenizers_en, tokenizers_ru, "qwen2-tied")
    model = make_model("qwen2-tied", source)
    first = model.extend_vocabulary(new, source_tokenizer=source)
    more = vocabshift.train_tokenizer(ru_lines, like=first, vocab_size=1600)
    vocabshift.record.add_cpt_entry(model, {"rows": "new", "steps": 3})
    earlier = {key: value for key, value in vocabshift.get_record(model).to_dict().items() if key != "earlier"}
    second = model.extend_vocabulary(more, source_tokenizer=first)
    record = vocabshift.get_record(model)
    assert len(second) > len(first) and record.old_vocab_size == len(first)
    assert record.earlier == [earlier]  # kept, with the run's entry as add_cpt_entry made it
    assert record.earlier[0]["cpt"] == [{"rows": "new", "steps": 3, "propagations": 0}]
    assert record.cpt == [] and record.original_source_model == earlier["source_model"]
    again = model.extend_vocabulary(vocabshift.train_tokenizer(ru_lines, like=second, vocab_size=2000),
                                    source_tokenizer=second)
    third = vocabshift.get_record(model)
    assert len(again) > len(second) and third.earlier == [earlier, {key: value for key, value in
                                                                      record.to_dict().items() if key != "earlier"}]
    printed = record_summary(third)["earlier"]  # what `vocabshift inspect` prints: packed lists are not spelled out
    assert [entry["decompositions"] for entry in printed] == ["(packed)", "(packed)"]


def test_extending_again_after_tokens_were_added_keeps_their_rows(tokenizers_en, tokenizers_ru, ru_lines):
    """Tokens added after an extension (with rows grown for them) belong to the source of the next one: it was
    refused, advising the returned tokenizer, whose next new tokens then overwrote the added tokens' rows."""
    source, new = _pair(tokenizers_en, tokenizers_ru, "llama-untied")
    model = make_model("llama-untied", source)
    first = copy.deepcopy(model.extend_vocabulary(new, source_tokenizer=source))
    first.add_tokens(["<tool_call>"], special_tokens=True)
    model.resize_token_embeddings(len(first))
    added = first.convert_tokens_to_ids("<tool_call>")
    with torch.no_grad():
        model.get_input_embeddings().weight[added] = 7.0  # a trained row
    second = model.extend_vocabulary(vocabshift.train_tokenizer(ru_lines, like=first, vocab_size=1600),
                                     source_tokenizer=first)
    assert second.convert_tokens_to_ids("<tool_call>") == added
    assert torch.equal(model.get_input_embeddings().weight[added], torch.full((64,), 7.0))
    assert vocabshift.get_record(model).old_vocab_size == len(first)


def test_extending_again_with_the_same_tokenizer_is_named(tokenizers_en, en_lines, ru_lines, caplog):
    """A repeated call (a notebook cell run twice) adds only what the first call's filter left out: the tokenizer's
    fingerprint in the record tells, and the error or the warning (before the method runs) says so."""
    source = tokenizers_en["bytelevel"]
    new = make_tokenizer("bytelevel", en_lines[1000:3000] + ru_lines[:500], 1200)  # Latin tokens the filter drops
    model = make_model("qwen2-tied", source)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        first = model.extend_vocabulary(new, source_tokenizer=source, target_texts=ru_lines[:500])
        other = vocabshift.train_tokenizer(ru_lines, like=first, vocab_size=len(first) + 200)
        chained = make_model("qwen2-tied", source)
        chained.extend_vocabulary(new, source_tokenizer=source, target_texts=ru_lines[:500])
        chained.extend_vocabulary(other, source_tokenizer=first)  # another tokenizer: a chain, no warning
    assert "extended with before" not in caplog.text
    with pytest.raises(NoNewTokensError, match="extended with before .* keep the model and tokenizer that call"):
        model.extend_vocabulary(new, source_tokenizer=first, target_texts=ru_lines[:500])  # the same filter
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        again = model.extend_vocabulary(new, source_tokenizer=first)  # without it: what it dropped
    added = len(vocabshift.get_record(model).new_ids)
    assert f"extended with before (its record keeps the fingerprint): this call adds the {added} of its" in caplog.text
    assert f"pads to {len(again)} rows" in caplog.text


def test_record_describes_the_extension(tokenizers_en, tokenizers_ru):
    source, new = _pair(tokenizers_en, tokenizers_ru, "llama-untied")
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(new, source_tokenizer=source, method="subword", input_weighting="max_char")
    record = vocabshift.get_record(model)
    assert record.method == "subword" and record.method_config["input_weighting"] == "max_char"
    assert record.new_ids == list(range(len(source), len(source) + len(record.new_ids)))
    placeholders = tokenizer.convert_ids_to_tokens(list(range(record.new_ids[-1] + 1, len(tokenizer))))
    assert all(token.startswith("<|vocabshift_unused_") for token in placeholders)  # the rows up to the multiple
    assert record.diagnostics["composed"] + record.diagnostics["copied"] + record.diagnostics["mean_fallback"] == len(
        record.new_ids
    )
    assert record.tokenizer_report["tokens_added"] == len(record.new_ids)
    decompositions = record.decomposition_lists()
    for new_id, pieces in zip(record.new_ids[:50], decompositions):
        assert tokenizer.decode(pieces) == tokenizer.decode([new_id])
    assert record.shared_pairs()[:3] == [(0, 0), (1, 1), (2, 2)]
    assert record.special_tokens["<s>"] == source.bos_token_id
