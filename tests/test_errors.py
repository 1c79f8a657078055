"""Bad input: a typed error that names the input and the fix, and a model left exactly as it was."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, PreTrainedModel, PreTrainedTokenizerFast

import vocabshift
from conftest import make_model, make_tokenizer
from vocabshift import errors, registry
from vocabshift.methods import InitResult


@pytest.fixture
def setup(tokenizers_en, tokenizers_ru):
    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    return model, tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, model.config.to_dict()


def _assert_unchanged(model, snapshot):
    weights, config = snapshot
    after = model.state_dict()
    assert after.keys() == weights.keys()
    assert all(torch.allclose(after[k], v, rtol=0, atol=0, equal_nan=True) for k, v in weights.items())  # NaN: equal
    assert model.config.to_dict() == config


def _refused(model, error, match, *args, **kwargs):
    snapshot = _snapshot(model)
    with pytest.raises(error, match=match):
        model.extend_vocabulary(*args, **kwargs)
    _assert_unchanged(model, snapshot)


def test_new_tokenizer_of_a_wrong_type(setup):
    model, source, _ = setup
    _refused(model, errors.InvalidTokenizerError, "new_tokenizer is a int; pass a fast tokenizer", 42,
             source_tokenizer=source)


def test_new_tokenizer_that_is_a_model(setup):
    model, source, _ = setup
    _refused(model, errors.InvalidTokenizerError, "new_tokenizer is a Qwen2ForCausalLM", model,
             source_tokenizer=source)


def test_source_tokenizer_that_does_not_belong_to_the_model(setup, tokenizers_ru):
    model, _, new = setup
    _refused(model, errors.TokenizerMismatchError, "900 tokens but Qwen2ForCausalLM has 700 embedding rows",
             new, source_tokenizer=tokenizers_ru["wordpiece"])


def test_source_tokenizer_other_than_the_one_of_the_last_extension(setup):
    model, source, new = setup
    model.extend_vocabulary(new, source_tokenizer=source)
    _refused(model, errors.TokenizerMismatchError, "not the tokenizer returned by the model's last", new,
             source_tokenizer=source)


def test_second_extension_from_a_folder_names_the_returned_tokenizer(setup, ru_lines, tmp_path):
    """The default source tokenizer (the model folder's original one) misses the new rows: the error must name the
    tokenizer the first call returned, never advise shrinking the rows (which would delete the new ones)."""
    model, source, new = setup
    model.save_pretrained(tmp_path / "original")
    source.save_pretrained(tmp_path / "original")
    model = type(model).from_pretrained(tmp_path / "original")
    first = model.extend_vocabulary(new)
    larger = make_tokenizer("bytelevel", ru_lines, 1400)
    snapshot = _snapshot(model)
    with pytest.raises(errors.TokenizerMismatchError, match="not the tokenizer returned by the model's last") as info:
        model.extend_vocabulary(larger)
    assert "resize" not in str(info.value) and "source_tokenizer" in str(info.value)
    _assert_unchanged(model, snapshot)
    second = model.extend_vocabulary(larger, source_tokenizer=first)
    assert len(second) > len(first)


def test_unknown_method(setup):
    model, source, new = setup
    _refused(model, errors.UnknownMethodError,
             "Unknown method 'fokus'. Available: focus, hyperofa, mean, multivariate, ofa, random",
             new, method="fokus", source_tokenizer=source)


def test_unknown_method_option(setup):
    model, source, new = setup
    _refused(model, errors.MethodOptionTypeError, "Unknown option 'input_weigting' .* Accepted options: input_norm, ",
             new, source_tokenizer=source, input_weigting="uniform")


def test_option_for_a_method_without_options(setup):
    model, source, new = setup
    _refused(model, errors.MethodOptionTypeError, "Accepted options: none", new, method="mean",
             source_tokenizer=source, input_norm=True)


def test_ill_typed_method_option(setup):
    model, source, new = setup
    _refused(model, errors.MethodOptionTypeError, "input_norm='yes' .* expected bool", new,
             source_tokenizer=source, input_norm="yes")


@pytest.mark.parametrize(("options", "match"), [
    ({"input_weighting": "median"}, "one of 'uniform', 'char_length', 'max_char'"),
    ({"tied_mean_shift": 1.5}, "tied_mean_shift=1.5 is invalid: pass a number from 0"),
    ({"tied_mean_shift": float("nan")}, "tied_mean_shift=nan is invalid"),
])
def test_method_option_out_of_range_is_a_value_error(setup, options, match):
    """A value of the right type that the method does not accept is a ValueError, not a TypeError."""
    model, source, new = setup
    snapshot = _snapshot(model)
    with pytest.raises(errors.MethodOptionError, match=match) as info:
        model.extend_vocabulary(new, source_tokenizer=source, **options)
    assert isinstance(info.value, ValueError) and not isinstance(info.value, TypeError)
    _assert_unchanged(model, snapshot)


def test_out_of_range_options_of_every_range_checked_method_are_value_errors(setup):
    """Each config's own range check (`__post_init__`) raises a ValueError, before any work."""
    model, source, new = setup
    for method, options in [("focus", {"corpus": ["a b"], "temperature": 0.0}),
                            ("salt", {"helper_model": torch.zeros(2, 2), "corpus": ["a b"], "ridge": -1.0}),
                            ("salt", {"helper_model": torch.zeros(2, 2), "corpus": ["a b"], "norm_guard": 1.0}),
                            ("ofa", {"word_vectors": "v.bin", "rank": 0}),
                            ("hyperofa", {"word_vectors": "v.bin", "patience": 0})]:
        with pytest.raises(errors.MethodOptionError) as info:
            model.extend_vocabulary(new, method=method, source_tokenizer=source, **options)
        assert not isinstance(info.value, TypeError), (method, options, info.value)


@pytest.mark.parametrize(("method", "options"), [
    ("salt", {"ridge": float("nan")}), ("salt", {"ridge": float("inf")}), ("salt", {"norm_guard": float("inf")}),
    ("salt", {"temperature": float("inf")}), ("focus", {"temperature": float("inf")}),
    ("ofa", {"temperature": -float("inf")}),
])
def test_method_options_that_are_not_finite(setup, method, options):
    """One check for every float option of every method (ridge=nan gave other rows silently, ridge=inf a raw
    LinAlgError, norm_guard=inf and temperature=inf were taken)."""
    model, source, new = setup
    inputs = {"word_vectors": "v.bin"} if method == "ofa" else {"corpus": ["a b"]}
    if method == "salt":
        inputs["helper_model"] = torch.zeros(2, 2)
    key, value = next(iter(options.items()))
    _refused(model, errors.MethodOptionError, f"Option {key}={value!r} is invalid for method '{method}': pass a "
             "finite number", new, method=method, source_tokenizer=source, **inputs, **options)


class _NoEmbeddings(PreTrainedModel):
    config_class = LlamaConfig

    def __init__(self, config):
        super().__init__(config)
        self.body = torch.nn.Linear(4, 4)


def test_model_without_input_embeddings(setup):
    _, source, new = setup
    model = _NoEmbeddings(LlamaConfig(hidden_size=4, num_hidden_layers=1, num_attention_heads=1))
    _refused(model, errors.UnsupportedModelError, "_NoEmbeddings has no input embedding matrix", new,
             source_tokenizer=source)


def test_new_tokenizer_with_no_new_tokens(setup):
    model, source, _ = setup
    _refused(model, errors.NoNewTokensError, "adds no token that the model's tokenizer lacks", source,
             source_tokenizer=source)


def test_corrupted_tokenizer_file(setup, tmp_path):
    model, source, _ = setup
    broken = tmp_path / "ru"
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": ', encoding="utf-8")
    (broken / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    _refused(model, errors.TokenizerLoadError, f"Could not load new_tokenizer='{broken}'.*files are complete",
             str(broken), source_tokenizer=source)


def test_missing_tokenizer_path(setup, tmp_path):
    model, source, _ = setup
    _refused(model, errors.TokenizerLoadError, "new_tokenizer=.*nowhere. does not exist", str(tmp_path / "nowhere"),
             source_tokenizer=source)


def test_no_source_tokenizer_and_no_model_path(setup):
    model, _, new = setup
    _refused(model, errors.TokenizerLoadError, "model.name_or_path is empty.*pass source_tokenizer=", new)


@pytest.mark.parametrize("value", [0, -8, "64", True, 2.5])
def test_bad_pad_to_multiple_of(setup, value):
    model, source, new = setup
    _refused(model, errors.InvalidArgumentError, f"pad_to_multiple_of={value!r} is invalid: pass a positive int",
             new, source_tokenizer=source, pad_to_multiple_of=value)


def test_unknown_mode(setup):
    model, source, new = setup
    _refused(model, errors.InvalidArgumentError, "mode='append' is invalid: pass one of 'extend', 'replace'", new,
             mode="append", source_tokenizer=source)


@pytest.mark.parametrize("value", [-1, 1.5, None, 2**32])
def test_bad_seed(setup, value):
    model, source, new = setup
    _refused(model, errors.InvalidArgumentError, r"seed=.* is invalid: pass an int in \[0, 2\*\*32\)", new, seed=value,
             source_tokenizer=source)


def test_extend_with_a_tokenizer_model_of_another_kind(setup, tokenizers_ru):
    model, source, _ = setup
    _refused(model, errors.IncompatibleTokenizerError, "train the new tokenizer as BPE .* or use mode='replace'",
             tokenizers_ru["unigram"], source_tokenizer=source)


def test_tokenizer_of_an_unsupported_family(setup, ru_lines):
    model, source, _ = setup
    plain = Tokenizer(models.BPE(unk_token="[UNK]"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers import trainers

    plain.train_from_iterator(ru_lines[:200], trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    _refused(model, errors.UnsupportedTokenizerError, "vocabshift handles byte-level BPE",
             PreTrainedTokenizerFast(tokenizer_object=plain), source_tokenizer=source)


@dataclasses.dataclass(frozen=True)
class _NoOptions:
    pass


def _register(monkeypatch, name, function):
    """`function` as method `name`, for this test only."""
    monkeypatch.setitem(registry._METHODS, name, registry.MethodSpec(name, function, _NoOptions, name, None, ""))


def _rows(context, value=0.0, dtype=torch.float32):
    return torch.full((context.num_new, context.source_input.shape[1]), value, dtype=dtype)


def test_method_returning_non_finite_rows(setup, monkeypatch):
    model, source, new = setup
    _register(monkeypatch, "broken", lambda context, config: InitResult(_rows(context, float("nan"))))
    _refused(model, errors.MethodResultError, "Method 'broken' returned input_rows that are not a finite", new,
             method="broken", source_tokenizer=source)


def test_a_method_that_writes_into_its_inputs_leaves_the_model_unchanged(setup, monkeypatch, tokenizers_en,
                                                                          tokenizers_ru):
    """The context holds copies of the model's rows (float32 rows were once handed over as views of the weights), so
    a refused call leaves the model as it was whatever the method did to its inputs."""
    model, source, new = setup

    def zero_then_fail(context, config):
        for rows in context.matrices:
            rows[:5] = 0
        return InitResult(_rows(context, float("nan")))

    def zero_then_raise(context, config):
        zero_then_fail(context, config)
        raise ValueError("a bug in the method")

    _register(monkeypatch, "zero_then_fail", zero_then_fail)
    _register(monkeypatch, "zero_then_raise", zero_then_raise)
    _refused(model, errors.MethodResultError, "Method 'zero_then_fail' returned input_rows", new,
             method="zero_then_fail", source_tokenizer=source)
    untied = make_model("llama-untied", tokenizers_en["sentencepiece"])
    _refused(untied, ValueError, "a bug in the method", tokenizers_ru["sentencepiece"], method="zero_then_raise",
             source_tokenizer=tokenizers_en["sentencepiece"])


@pytest.mark.parametrize(("returned", "match"), [
    (lambda c: InitResult(_rows(c, dtype=torch.complex64)), r"input_rows .* \(its dtype is torch.complex64\)"),
    (lambda c: InitResult(_rows(c, 7, dtype=torch.int64)), r"input_rows .* \(its dtype is torch.int64\)"),
    (lambda c: InitResult(_rows(c, dtype=torch.bool)), r"input_rows .* \(its dtype is torch.bool\)"),
    (lambda c: InitResult(_rows(c).to("meta")), r"input_rows .* \(it is on the meta device, without values\)"),
    (lambda c: InitResult(_rows(c).tolist()), r"input_rows .* \(it is a list\)"),
    (lambda c: InitResult(_rows(c), diagnostics={"norm": torch.zeros(2)}),
     r"diagnostics that are no JSON object \(TypeError: Object of type Tensor is not JSON serializable\)"),
    (lambda c: InitResult(_rows(c), diagnostics=["x"]), r"diagnostics that are no JSON object \(a list\)"),
    (lambda c: InitResult(_rows(c), diagnostics={1: "x"}),
     r"diagnostics that are no JSON object \(keys \['int'\] besides str\)"),
    (lambda c: InitResult(_rows(c), _rows(c)), r"output_rows for a model without an output embedding of its own .* "
                                               r"return output_rows=None when context.source_output is None"),
], ids=["complex", "int", "bool", "meta", "list rows", "tensor diagnostics", "list diagnostics", "int keys",
        "output rows of a tied model"])
def test_method_returning_what_cannot_be_written(setup, monkeypatch, returned, match):
    """Rows that would be cast (complex, int, bool), have no values (meta), output rows of a tied model (dropped without
    a word before) and diagnostics config.json cannot hold (saving then failed, or get_record blamed config.json) are
    the method's bug, refused before anything is written."""
    model, source, new = setup
    _register(monkeypatch, "odd", lambda context, config: returned(context))
    _refused(model, errors.MethodResultError, "Method 'odd' returned " + match, new, method="odd",
             source_tokenizer=source)


def test_non_finite_rows_of_the_model_are_named(setup):
    """A NaN in the model's own rows is the model's fault, not the method's: the error names the rows."""
    model, source, new = setup
    with torch.no_grad():
        model.get_input_embeddings().weight[[7, 300]] = float("nan")
    _refused(model, errors.NonFiniteWeightsError, r"own input embedding rows \[7, 300\] \(2 in all; tokens", new,
             method="mean", source_tokenizer=source)


def test_untied_head_of_another_shape(tokenizers_en, tokenizers_ru):
    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    model.lm_head = torch.nn.Linear(64, 10, bias=False)
    _refused(model, errors.UnsupportedModelError, "output head has shape \\(10, 64\\)", tokenizers_ru["sentencepiece"],
             source_tokenizer=tokenizers_en["sentencepiece"])


def test_errors_are_also_builtin_errors():
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.InvalidTokenizerError, TypeError)
    assert issubclass(errors.MethodOptionError, ValueError) and not issubclass(errors.MethodOptionError, TypeError)
    assert issubclass(errors.MethodOptionTypeError, errors.MethodOptionError)
    assert issubclass(errors.MethodOptionTypeError, TypeError)
    assert all(issubclass(getattr(errors, name), errors.VocabShiftError) for name in errors.__all__)
    assert vocabshift.VocabShiftError is errors.VocabShiftError


def test_model_on_the_meta_device(tokenizers_en, tokenizers_ru):
    source, new = tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"]
    with torch.device("meta"):
        model = make_model("qwen2-tied", source)
    with pytest.raises(errors.UnsupportedModelError, match="Qwen2ForCausalLM holds its input embeddings on the meta "
                       "device: the values are not loaded .* Load the weights first: from_pretrained\\(...\\) without "
                       "a device_map that offloads"):
        model.extend_vocabulary(new, source_tokenizer=source)
    assert model.get_input_embeddings().weight.shape[0] == len(source)


def test_model_offloaded_by_accelerate(tokenizers_en, tokenizers_ru):
    from accelerate import cpu_offload

    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    cpu_offload(model, execution_device=torch.device("cpu"))  # what device_map offloading does: weights to meta
    config = model.config.to_dict()
    with pytest.raises(errors.UnsupportedModelError, match="LlamaForCausalLM holds its input embeddings on the meta "
                       "device"):  # refused up front: before the (here unloadable) tokenizers are even read
        model.extend_vocabulary("/no/such/tokenizer", source_tokenizer="/no/such/tokenizer")
    assert model.config.to_dict() == config and model.get_input_embeddings().weight.shape[0] == len(
        tokenizers_en["sentencepiece"])


def test_untied_head_on_the_meta_device(tokenizers_en, tokenizers_ru):
    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    model.lm_head.to("meta")
    with pytest.raises(errors.UnsupportedModelError, match="LlamaForCausalLM holds its output head on the meta device"):
        model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=tokenizers_en["sentencepiece"])
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizers_en["sentencepiece"])
