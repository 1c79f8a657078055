"""`token_nll` and `bits_per_byte`: each text is its own document, so any tokenizer gives the same bytes of context."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import make_model
from vocabshift.errors import InvalidArgumentError
from vocabshift.training.metrics import bits_per_byte, text_bytes, token_nll


@pytest.fixture(params=["en", "ru"])
def scored(request, tokenizers_en, tokenizers_ru):
    """A tiny Qwen2 with a byte-level tokenizer that cuts Russian finely ("en") or coarsely ("ru")."""
    tokenizer = (tokenizers_en if request.param == "en" else tokenizers_ru)["bytelevel"]
    return make_model("qwen2-tied", tokenizer), tokenizer


def test_each_text_is_scored_alone(scored, ru_held):
    """Scoring texts together gives each text's losses when scored alone, in order: no newline between texts is
    scored and no text is context for the next; a long text is cut into windows of its own."""
    model, tokenizer = scored
    texts = ru_held[:7]
    ids, nll = token_nll(model, tokenizer, texts, context_length=16, batch_size=3)
    alone = [token_nll(model, tokenizer, [text], context_length=16, batch_size=1) for text in texts]
    assert ids.tolist() == [i for text in tokenizer(texts, add_special_tokens=False)["input_ids"] for i in text]
    assert torch.equal(ids, torch.cat([a[0] for a in alone]))
    torch.testing.assert_close(nll, torch.cat([a[1] for a in alone]), atol=1e-5, rtol=1e-5)


def test_a_text_that_fits_scores_the_same_whatever_the_window(scored, ru_held):
    """However many tokens a tokenizer cuts a text into, the model sees the whole text (when it fits): the score does
    not depend on the window. A window over the joined texts would give a finer tokenizer fewer bytes of context."""
    model, tokenizer = scored
    texts = ru_held[:8]
    longest = max(map(len, tokenizer(texts, add_special_tokens=False)["input_ids"]))
    figures = [bits_per_byte(model, tokenizer, texts, context_length=length) for length in (longest + 1, 4 * longest)]
    assert figures[0] == pytest.approx(figures[1], rel=1e-6)
    assert bits_per_byte(model, tokenizer, texts, context_length=longest // 2) != pytest.approx(figures[0], rel=1e-6)


def test_bits_per_byte_divides_by_the_texts_own_bytes(scored, ru_held):
    model, tokenizer = scored
    texts = ru_held[:5]
    _, nll = token_nll(model, tokenizer, texts, context_length=64)
    assert text_bytes(texts) == sum(len(text.encode("utf-8")) for text in texts) < len("\n".join(texts).encode())
    expected = nll.double().sum().item() / math.log(2) / text_bytes(texts)
    assert bits_per_byte(model, tokenizer, texts, context_length=64) == pytest.approx(expected, rel=1e-12)


def test_texts_in_any_collection_score_as_the_list(scored, ru_held):
    """A generator is read once (token_nll and the byte count both need the texts), an array or a tuple as a list."""
    model, tokenizer = scored
    texts = ru_held[:5]
    expected = bits_per_byte(model, tokenizer, texts, context_length=64)
    for given in ((text for text in texts), np.array(texts), tuple(texts)):
        assert bits_per_byte(model, tokenizer, given, context_length=64) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(InvalidArgumentError, match="texts is empty"):
        bits_per_byte(model, tokenizer, (text for text in []))
    with pytest.raises(InvalidArgumentError, match="texts is a dict"):
        bits_per_byte(model, tokenizer, dict.fromkeys(texts))


def test_metrics_refuse_texts_without_text(scored):
    model, tokenizer = scored
    with pytest.raises(InvalidArgumentError, match="texts is empty: pass at least one held-out line"):
        token_nll(model, tokenizer, [])
    with pytest.raises(InvalidArgumentError, match="texts holds only empty strings"):
        bits_per_byte(model, tokenizer, ["", ""])
    ids, nll = token_nll(model, tokenizer, ["", "две строки", ""])
    assert len(ids) == len(nll) == len(tokenizer("две строки", add_special_tokens=False)["input_ids"])


def test_a_model_in_train_mode_is_scored_without_dropout(tokenizers_en, en_held):
    """A loop that scores between steps passes its model in train mode: scoring must not go through dropout (GPT-2's
    0.1 gave a different figure at each call), and the model is given back in train mode."""
    tokenizer = tokenizers_en["bytelevel"]
    model = make_model("gpt2-tied", tokenizer)
    expected = bits_per_byte(model, tokenizer, en_held[:4])
    model.train()
    assert [bits_per_byte(model, tokenizer, en_held[:4]) for _ in range(2)] == [expected] * 2
    assert model.training and all(module.training for module in model.modules())
