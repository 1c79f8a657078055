"""Serving-safe vocabularies: every row below `config.vocab_size` has a token, rows split evenly for tensor
parallelism, and `inspect_folder` reports these invariants (and a tokenizer.model out of step)."""

from __future__ import annotations

import io
import json

import pytest
import sentencepiece
import torch

import vocabshift
from conftest import ARCHITECTURES, make_model, read_lines
from vocabshift.vocab.placeholders import PLACEHOLDER


def _extended(tokenizers_en, tokenizers_ru, architecture="llama-untied", *, extra_rows=0, **options):
    family = ARCHITECTURES[architecture][0]
    source, new = tokenizers_en[family], tokenizers_ru[family]
    model = make_model(architecture, source, extra_rows=extra_rows)
    return model, model.extend_vocabulary(new, source_tokenizer=source, **options), source


def _no_id_without_a_token(model, tokenizer):
    rows = model.config.vocab_size
    assert rows == len(tokenizer) == model.get_input_embeddings().num_embeddings
    head = model.get_output_embeddings()
    assert head is None or head.weight.shape[0] == rows  # an encoder has no head
    assert None not in tokenizer.convert_ids_to_tokens(list(range(rows)))


@pytest.mark.parametrize("architecture", ["llama-untied", "qwen2-tied", "gemma3-tied", "bert-encoder"])
@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_a_padded_extend_leaves_no_id_without_a_token(tokenizers_en, tokenizers_ru, architecture, mode):
    model, tokenizer, _ = _extended(tokenizers_en, tokenizers_ru, architecture, mode=mode, pad_to_multiple_of=96)
    _no_id_without_a_token(model, tokenizer)
    assert model.config.vocab_size % 96 == 0
    names = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    placeholders = [name for name in names if name.startswith(PLACEHOLDER.split("{")[0])]
    assert placeholders and names[-len(placeholders):] == [PLACEHOLDER.format(i) for i in range(len(placeholders))]
    assert not set(placeholders) & set(vocabshift.get_record(model).special_tokens)  # named rows, not roles


def test_placeholders_stay_out_of_text(tokenizers_en, tokenizers_ru, ru_held):
    """Ordinary text never gives a placeholder, and decoding with skip_special_tokens leaves them out."""
    model, tokenizer, _ = _extended(tokenizers_en, tokenizers_ru, pad_to_multiple_of=128)
    first = vocabshift.get_record(model).new_ids[-1] + 1
    assert first < len(tokenizer)
    ids = [i for line in ru_held[:200] for i in tokenizer(line, add_special_tokens=False)["input_ids"]]
    assert max(ids) < first
    text = tokenizer.decode([ids[0], first, ids[1]], skip_special_tokens=True)
    assert text == tokenizer.decode([ids[0], ids[1]], skip_special_tokens=True)


def test_the_default_rows_suit_tensor_parallelism(tokenizers_en, tokenizers_ru):
    model, tokenizer, _ = _extended(tokenizers_en, tokenizers_ru)
    assert model.config.vocab_size % 128 == 0 and vocabshift.get_record(model).pad_to_multiple_of == 128
    _no_id_without_a_token(model, tokenizer)
    assert "--pad-to-multiple-of" in vocabshift.get_record(model).command


def test_no_rounding_still_names_the_source_padding_rows(tokenizers_en, tokenizers_ru):
    """The source's own padding rows that no new token took keep their values and get placeholder tokens."""
    family = ARCHITECTURES["qwen2-tied"][0]
    model = make_model("qwen2-tied", tokenizers_en[family], extra_rows=1000)
    old = model.get_input_embeddings().weight.detach().clone()
    tokenizer = model.extend_vocabulary(tokenizers_ru[family], source_tokenizer=tokenizers_en[family],
                                        pad_to_multiple_of=None)
    assert model.config.vocab_size == old.shape[0]
    _no_id_without_a_token(model, tokenizer)
    last_new = vocabshift.get_record(model).new_ids[-1]
    torch.testing.assert_close(model.get_input_embeddings().weight[last_new + 1:], old[last_new + 1:])
    assert "--pad-to-multiple-of" in (command := vocabshift.get_record(model).command)
    assert command[command.index("--pad-to-multiple-of") + 1] == "1"


@pytest.fixture
def saved(tokenizers_en, tokenizers_ru, tmp_path):
    model, tokenizer, _ = _extended(tokenizers_en, tokenizers_ru, "qwen2-tied")
    return vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "model")


def test_inspect_reports_the_serving_invariants(saved):
    report = vocabshift.inspect_folder(saved)
    assert report.ok, report.problems
    serving = dict(report.facts)["serving"]
    rows = json.loads((saved / "config.json").read_text())["vocab_size"]
    assert serving == (f"{rows:,} of {rows:,} ids decode to a token; the rows split evenly over up to 128 "
                       "tensor-parallel shards")


def test_inspect_finds_ids_without_a_token(saved):
    """A config whose vocabulary reaches beyond the tokenizer: a problem with a record, a note without one."""
    config = json.loads((saved / "config.json").read_text())
    tokenizer = json.loads((saved / "tokenizer.json").read_text())
    last = max(entry["id"] for entry in tokenizer["added_tokens"])
    tokenizer["added_tokens"] = [entry for entry in tokenizer["added_tokens"] if entry["id"] < last - 2]
    (saved / "tokenizer.json").write_text(json.dumps(tokenizer))
    report = vocabshift.inspect_folder(saved)
    expected = f"ids below config vocab_size {config['vocab_size']:,} without a token: 3 (first [{last - 2}, "
    assert any(problem.startswith(expected) for problem in report.problems), report.problems
    del config["vocabshift"]
    (saved / "config.json").write_text(json.dumps(config))
    report = vocabshift.inspect_folder(saved)
    assert any(note.startswith(expected) for note in report.notes) and report.ok


def test_inspect_finds_a_tokenizer_model_out_of_step(saved):
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(read_lines("en", 300)), model_writer=model,
                                             vocab_size=300, minloglevel=2)
    (saved / "tokenizer.model").write_bytes(model.getvalue())
    report = vocabshift.inspect_folder(saved)
    assert any(problem.startswith("its tokenizer.model disagrees with tokenizer.json (it holds 300 pieces, ") and
               "delete it (tokenizer.json is the tokenizer) or save the folder again" in problem
               for problem in report.problems), report.problems
