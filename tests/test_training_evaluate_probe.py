"""`vocabshift.evaluate` and `vocabshift.probe` on tiny models with real tokenizers."""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

import vocabshift
from conftest import make_model
from vocabshift.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidTokenizerError,
    MethodOptionError,
    RecordError,
    TokenizerLoadError,
    TokenizerMismatchError,
    UnknownMethodError,
    UnsupportedModelError,
)
from vocabshift.training import bits_per_byte


@pytest.fixture()
def pair(tokenizers_en, tokenizers_ru):
    source = tokenizers_en["sentencepiece"]
    original = make_model("llama-untied", source)
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=source)
    return model, tokenizer, original, source


def test_evaluate_adapted_and_original(pair, ru_held, tmp_path):
    model, tokenizer, original, source = pair
    texts = ru_held[:30]
    model.train()
    result = vocabshift.evaluate(model, tokenizer, texts, original_model=original, original_tokenizer=source,
                                 context_length=64)
    adapted, before = result.scores
    assert model.training and not original.training  # modes given back
    assert adapted.bits_per_byte == pytest.approx(bits_per_byte(model.eval(), tokenizer, texts, context_length=64),
                                                  rel=1e-12)
    assert adapted.tokens_per_word < before.tokens_per_word  # the Russian tokens shorten the text
    assert 0 < adapted.new_token_share < 1 and adapted.num_tokens < before.num_tokens
    mixed = adapted.new_token_share * adapted.loss_new_tokens + (1 - adapted.new_token_share) * adapted.loss_old_tokens
    assert mixed == pytest.approx(adapted.loss, rel=1e-9)
    assert before.loss_new_tokens is None and before.new_token_share is None
    table = str(result)
    assert table.splitlines()[0].startswith("| model | tokens/word | bits/byte")
    assert f"| original | {before.tokens_per_word:.2f} | {before.bits_per_byte:.3f} |" in table and "| — |" in table
    assert result.num_bytes == sum(len(text.encode()) for text in texts)  # each line alone: no newlines
    result.add_to_record(model)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["vocabshift"]["evaluations"]
    # with what the model had been through: a card tells an evaluation before training from one after it
    assert saved == [{**json.loads(json.dumps(result.to_dict())), "cpt_runs": 0, "propagations": 0}]
    assert vocabshift.get_record(AutoModelForCausalLM.from_pretrained(tmp_path)).evaluations == saved


def test_evaluate_refuses_bad_input(pair, ru_held):
    model, tokenizer, original, _ = pair
    with pytest.raises(InvalidArgumentError, match="non-empty list of strings"):
        vocabshift.evaluate(model, tokenizer, [])
    with pytest.raises(InvalidArgumentError, match="non-empty list of strings"):
        vocabshift.evaluate(model, tokenizer, "one string")
    with pytest.raises(InvalidArgumentError, match="both original_model and original_tokenizer"):
        vocabshift.evaluate(model, tokenizer, ru_held[:3], original_model=original)
    result = vocabshift.evaluate(original, pair[3], ru_held[:3], context_length=64)
    with pytest.raises(RecordError, match="carries no vocabshift record"):
        result.add_to_record(original)


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"texts": ("line", 3)}, InvalidArgumentTypeError, "texts\\[1\\] is a int: pass a non-empty list of strings"),
    ({"texts": ["line", " "]}, InvalidArgumentError, "texts\\[1\\] is blank: drop empty lines from texts"),
    ({"texts": ["", "line"]}, InvalidArgumentError, "texts\\[0\\] is empty"),
    ({"texts": {"line": 1}}, InvalidArgumentTypeError, "texts is a dict: pass a non-empty list"),
    ({"texts": iter([])}, InvalidArgumentError, "texts is empty: pass a non-empty list"),
    ({"texts": b"line"}, InvalidArgumentTypeError, "texts is a bytes"),
    ({"context_length": 1}, InvalidArgumentError, "context_length=1 is invalid: pass an int >= 2"),
    ({"context_length": 64.0}, InvalidArgumentTypeError, "context_length=64.0 is a float: pass an int >= 2"),
    ({"context_length": 10**6}, InvalidArgumentError, "context_length=1000000 is longer than the 2048 positions of "
     "model \\(LlamaForCausalLM\\): pass at most 2048"),
    ({"batch_size": 0}, InvalidArgumentError, "batch_size=0 is invalid: pass an int >= 1"),
    ({"batch_size": True}, InvalidArgumentTypeError, "batch_size=True is a bool"),
    ({"model": "out/model"}, InvalidArgumentTypeError, "model is a str: pass a loaded causal LM"),
    ({"tokenizer": 3}, InvalidTokenizerError, "tokenizer is a int; pass a fast tokenizer"),
    ({"tokenizer": "/no/such/tokenizer"}, TokenizerLoadError, "tokenizer='/no/such/tokenizer' does not exist"),
])
def test_evaluate_refuses_bad_arguments(pair, ru_held, change, error, match):
    model, tokenizer, _, _ = pair
    arguments = {"model": model, "tokenizer": tokenizer, "texts": ru_held[:3], **change}
    with pytest.raises(error, match=match):
        vocabshift.evaluate(arguments.pop("model"), arguments.pop("tokenizer"), arguments.pop("texts"), **arguments)


def test_evaluate_refuses_a_tokenizer_that_is_not_the_models(pair, ru_held, tokenizers_ru, tokenizers_en):
    model, tokenizer, original, source = pair
    with pytest.raises(TokenizerMismatchError, match="original_tokenizer has \\d+ tokens but LlamaForCausalLM has "
                       "\\d+ embedding rows, and ids beyond them are ordinary tokens"):
        vocabshift.evaluate(model, tokenizer, ru_held[:3], original_model=original, original_tokenizer=tokenizer)
    with pytest.raises(TokenizerMismatchError, match="tokenizer is not the tokenizer returned by the model's last "
                       "extend_vocabulary call"):  # the old tokenizer on the extended model: fewer tokens, wrong ids
        vocabshift.evaluate(model, source, ru_held[:3])
    bert = make_model("bert-encoder", tokenizers_en["wordpiece"])
    with pytest.raises(UnsupportedModelError, match="original_model \\(BertModel\\) has no LM head"):
        vocabshift.evaluate(model, tokenizer, ru_held[:3], original_model=bert,
                            original_tokenizer=tokenizers_en["wordpiece"])


PROBE = dict(steps=4, eval_every=2, batch_size=8, context_length=32, learning_rate=3e-3, seed=3)


def test_probe_ranks_methods_and_writes_table_and_png(tokenizers_en, tokenizers_ru, ru_lines, ru_held, tmp_path):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    runs = [vocabshift.probe(model, tokenizers_ru["sentencepiece"], ru_lines[:300], ru_held[:20], methods=methods,
                             source_tokenizer=source, output_dir=tmp_path / str(i), **PROBE)
            for i, methods in enumerate([["random", "subword"], ["subword"]])]
    result = runs[0]
    assert runs[1].curves["subword"] == result.curves["subword"]  # same seed and data, whatever else is probed
    assert [step for step, _ in result.curves["subword"]] == [0, 2, 4]
    assert result.ranking == sorted(result.curves, key=lambda m: result.curves[m][-1][1])
    assert result.best == result.ranking[0]
    for method in ("random", "subword"):  # training lowers held-out bits per byte
        assert result.curves[method][-1][1] < result.curves[method][0][1]
    assert result.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = result.table_path.read_text()
    assert table == str(result) + "\n" and "| 1 | " + result.best + " |" in table and "after 4 steps" in table
    assert sorted(p.name for p in (tmp_path / "0").iterdir()) == ["probe.md", "probe.png"]
    assert not hasattr(model.config, "vocabshift")  # the model passed in is untouched
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_probe_compares_objectives_on_identical_batches(tokenizers_en, tokenizers_ru, ru_lines, ru_held):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    both = vocabshift.probe(model, tokenizers_ru["sentencepiece"], ru_lines[:300], ru_held[:20], methods=["subword"],
                            objectives=["next_token", "distillation"], source_tokenizer=source, **PROBE)
    alone = vocabshift.probe(model, tokenizers_ru["sentencepiece"], ru_lines[:300], ru_held[:20], methods=["subword"],
                             source_tokenizer=source, **PROBE)
    assert sorted(both.curves) == ["subword / distillation", "subword / next_token"]
    assert both.curves["subword / next_token"] == alone.curves["subword"]  # the same batches, whatever else runs
    assert both.curves["subword / distillation"][0] == alone.curves["subword"][0]
    assert both.curves["subword / distillation"][-1] != alone.curves["subword"][-1]
    assert both.settings["objectives"]["distillation"] == vocabshift.DistillationWeights(source=0.0).to_dict()
    # the table names what trained (a probe of distillation alone read as one of cross-entropy)
    assert "(extend mode, rows='new', objectives next_token, distillation (without the source-language replay)):" \
        in str(both)
    assert "(extend mode, rows='new', objective next_token): 4 steps of " in str(alone)


def test_probe_without_matplotlib_fails_before_training(tokenizers_en, tokenizers_ru, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    with pytest.raises(ImportError, match=r"pip install 'vocabshift\[plot\]'"):
        vocabshift.probe(model, tokenizers_ru["sentencepiece"], ["x"], ["y"], methods=["mean"], output_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_probe_refuses_bad_input(tokenizers_en, tokenizers_ru, ru_held):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    new = tokenizers_ru["sentencepiece"]
    with pytest.raises(UnknownMethodError, match="Unknown method 'nope'. Available: .*subword"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["nope"], source_tokenizer=source)
    with pytest.raises(InvalidArgumentError, match=r"method_options names \['mean'\]"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["random"], method_options={"mean": {}},
                         source_tokenizer=source)
    with pytest.raises(MethodOptionError, match="input_weighting"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["random", "subword"],
                         method_options={"subword": {"input_weighting": "nope"}}, source_tokenizer=source)
    with pytest.raises(InvalidArgumentError, match="rows='old' is invalid"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["random"], rows="old", source_tokenizer=source)
    with pytest.raises(InvalidArgumentError, match="steps=0 is invalid"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["random"], steps=0, source_tokenizer=source)
    for option, match in ((dict(batch_size=-1), "batch_size=-1 is invalid: pass an int >= 1"),
                          (dict(context_length=1), "context_length=1 is invalid: pass an int >= 2"),
                          (dict(learning_rate=0.0), "learning_rate=0.0 is invalid: pass a finite number > 0"),
                          (dict(learning_rate=float("nan")), "learning_rate=nan is invalid"),
                          (dict(weight_decay=-0.1), "weight_decay=-0.1 is invalid: pass a finite number >= 0"),
                          (dict(seed=-1), r"seed=-1 is invalid: pass an int in \[0, 2\*\*32\)"),
                          (dict(eval_every="2"), "eval_every='2' is a str"),
                          (dict(train_texts="text"), "train_texts is a str: pass a non-empty list of strings"),
                          (dict(held_out_texts=[]), "held_out_texts is empty")):
        arguments = {"train_texts": ru_held, "held_out_texts": ru_held, **option}
        with pytest.raises(InvalidArgumentError, match=match):
            vocabshift.probe(model, new, arguments.pop("train_texts"), arguments.pop("held_out_texts"),
                             methods=["random"], source_tokenizer="/never/loaded", **arguments)
    with pytest.raises(InvalidTokenizerError, match="new_tokenizer is a int"):  # before any scoring
        vocabshift.probe(model, 42, ru_held, ru_held, methods=["random"], source_tokenizer="/never/loaded")
    with pytest.raises(InvalidArgumentTypeError, match="model is a str: pass a loaded causal LM"):
        vocabshift.probe("out/model", new, ru_held, ru_held, methods=["random"], source_tokenizer=source)
    with pytest.raises(UnsupportedModelError, match="model \\(BertModel\\) has no LM head"):
        vocabshift.probe(make_model("bert-encoder", tokenizers_en["wordpiece"]), new, ru_held, ru_held,
                         methods=["random"], source_tokenizer=source)
    with pytest.raises(InvalidArgumentError, match="objectives holds 'kl': pass 'next_token', 'distillation'"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["random"], objectives=["kl"], source_tokenizer=source)
    with pytest.raises(InvalidArgumentError, match="objectives='distillation' is invalid: pass a list"):
        vocabshift.probe(model, new, ru_held, ru_held, methods=["random"], objectives="distillation",
                         source_tokenizer=source)


def test_probe_scores_a_model_of_fewer_than_512_positions(tokenizers_en, tokenizers_ru, ru_lines, ru_held):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    model.config.max_position_embeddings = 256  # it refused them: "context_length=512 is longer than the 256 ..."
    result = vocabshift.probe(model, tokenizers_ru["sentencepiece"], ru_lines[:300], ru_held[:20], methods=["mean"],
                              source_tokenizer=source, **PROBE)
    assert [step for step, _ in result.curves["mean"]] == [0, 2, 4]


def test_texts_that_give_no_token_are_refused(pair, tokenizers_en):
    wordpiece = copy.deepcopy(tokenizers_en["wordpiece"])  # its normalizer drops blanks, control and zero-width chars
    wordpiece.bos_token = "[CLS]"
    plain = make_model("llama-untied", wordpiece)
    texts = ["\u200b\u200b", "\x00 \x01"]  # they scored 0.0 bits per byte, at a loss of nan
    with pytest.raises(InvalidArgumentError, match=r"texts give no token under tokenizer\b.*Pass held-out lines"):
        bits_per_byte(plain, wordpiece, texts)
    with pytest.raises(InvalidArgumentError, match=r"texts give no token under tokenizer\b"):
        vocabshift.evaluate(plain, wordpiece, texts)
    model, tokenizer, _, _ = pair  # its byte fallback spells them: the original's tokenizer is refused, before scoring
    with pytest.raises(InvalidArgumentError, match=r"texts give no token under original_tokenizer\b"):
        vocabshift.evaluate(model, tokenizer, texts, original_model=plain, original_tokenizer=wordpiece)


def test_evaluate_warns_of_text_the_original_tokenizer_cannot_spell(tokenizers_en, tokenizers_ru, ru_held, caplog):
    source = tokenizers_en["unigram"]  # no byte fallback: Cyrillic it does not know becomes <unk>
    original = make_model("llama-untied", source)
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["unigram"], source_tokenizer=source)

    def predict_unk(module, inputs, logits):  # a model that knows nothing of the text but <unk>
        return torch.zeros_like(logits).index_fill_(-1, torch.tensor([source.unk_token_id]), 6.0)

    original.lm_head.register_forward_hook(predict_unk)
    with caplog.at_level("WARNING", logger="vocabshift"):
        result = vocabshift.evaluate(model, tokenizer, ru_held[:20], original_model=original,
                                     original_tokenizer=source)
    assert result.scores[1].bits_per_byte < 1.2  # better than a uniform guess over the bytes' tokens: misleading
    warned = [r.getMessage() for r in caplog.records if "unk token" in r.getMessage()]
    assert len(warned) == 1 and "held-out tokens of the original model" in warned[0]
    assert "'<unk>', which stands for text the tokenizer cannot spell" in warned[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="vocabshift"):  # written out, the unk token is text it spells
        vocabshift.evaluate(model, tokenizer, [ru_held[0] + " <unk>"])
    assert "unk token" not in caplog.text


def test_probe_ranks_a_diverged_run_last(tokenizers_en, tokenizers_ru, ru_lines, ru_held, caplog):
    result = vocabshift.training.probing.ProbeResult(  # NaN compares false: the diverged run came first, as best
        {"diverged": [(0, 2.0), (4, float("nan"))], "trained": [(0, 2.0), (4, 1.5)]}, 1.0, {}, {})
    assert result.ranking == ["trained", "diverged"] and result.best == "trained"
    source = tokenizers_en["sentencepiece"]
    with caplog.at_level("WARNING", logger="vocabshift"):
        probed = vocabshift.probe(make_model("llama-untied", source), tokenizers_ru["sentencepiece"], ru_lines[:300],
                                  ru_held[:20], methods=["mean"], source_tokenizer=source,
                                  **{**PROBE, "learning_rate": 1e30})
    assert probed.curves["mean"][-1][1] != probed.curves["mean"][-1][1]  # NaN
    assert "The probe runs ['mean'] diverged" in caplog.text and "lower than 1e+30" in caplog.text
