"""Method registry rules and the ExtensionRecord's JSON round trip."""

from __future__ import annotations

import dataclasses
import json
from typing import Literal

import pytest

import vocabshift
from vocabshift import registry
from vocabshift.errors import InvalidArgumentError, MethodOptionError, RecordError
from vocabshift.packing import id_ranges, pack_ids, unpack_ids
from vocabshift.record import ExtensionRecord, get_record


@dataclasses.dataclass(frozen=True)
class _Options:
    count: int = 1
    scale: float = 1.0
    name: str | None = None
    kind: Literal["a", "b"] = "a"


def test_list_methods_is_sorted_and_has_the_baselines():
    names = vocabshift.list_methods()
    assert names == sorted(names)
    assert {"mean", "multivariate", "random", "subword"} <= set(names)
    for name in names:
        spec = vocabshift.get_method(name)
        assert spec.name == name and spec.pretty_name and spec.summary


def test_register_rejects_duplicates_bad_names_and_mutable_configs(monkeypatch):
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    with pytest.raises(InvalidArgumentError, match="'mean' is already registered"):
        registry.register_method("mean", config_class=_Options, pretty_name="x")
    with pytest.raises(InvalidArgumentError, match="'Bad-Name' is invalid"):
        registry.register_method("Bad-Name", config_class=_Options, pretty_name="x")

    @dataclasses.dataclass
    class Mutable:
        pass

    with pytest.raises(InvalidArgumentError, match="must be a frozen dataclass"):
        registry.register_method("mutable", config_class=Mutable, pretty_name="x")
    registry.register_method("fresh", config_class=_Options, pretty_name="Fresh")(lambda context, config: None)
    assert "fresh" in vocabshift.list_methods()
    for _ in range(2):  # a notebook cell run twice defines the same function again: it replaces the first

        @registry.register_method("cell", config_class=_Options, pretty_name="Cell")
        def cell(context, config):
            return None
    assert vocabshift.get_method("cell").function is cell

    def elsewhere(context, config):
        return None
    with pytest.raises(InvalidArgumentError, match="'cell' is already registered \\(by test_registry_record\\."):
        registry.register_method("cell", config_class=_Options, pretty_name="Cell")(elsewhere)


@pytest.mark.parametrize(
    "options",
    [{"count": 1.5}, {"count": True}, {"scale": "1"}, {"scale": False}, {"name": 3}, {"kind": "c"}, {"kind": 1}],
)
def test_option_types_are_checked(options):
    spec = registry.MethodSpec("t", lambda c, o: None, _Options, "T", None, "")
    with pytest.raises(MethodOptionError, match=f"Option {next(iter(options))}="):
        registry.build_config(spec, options)


def test_accepted_options_build_the_config():
    spec = registry.MethodSpec("t", lambda c, o: None, _Options, "T", None, "")
    config = registry.build_config(spec, {"count": 3, "scale": 2, "name": None, "kind": "b"})
    assert config == _Options(3, 2, None, "b")


def test_register_rejects_a_name_ending_in_a_newline_a_config_instance_and_unresolvable_annotations(monkeypatch):
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    with pytest.raises(InvalidArgumentError, match=r"Method name 'subword\\n' is invalid"):
        registry.register_method("subword\n", config_class=_Options, pretty_name="x")
    with pytest.raises(InvalidArgumentError, match=r"must be a frozen dataclass \(the class itself\), got _Options\("):
        registry.register_method("instance", config_class=_Options(), pretty_name="x")

    @dataclasses.dataclass(frozen=True)
    class Forward:
        count: NoSuchType = 1  # noqa: F821  (annotations are strings here: resolved when read)

    with pytest.raises(InvalidArgumentError, match=r"Forward for 'forward' has an annotation that cannot be resolved "
                       r"\(NameError: name 'NoSuchType' is not defined\)"):
        registry.register_method("forward", config_class=Forward, pretty_name="x")
    assert not {"subword\n", "instance", "forward"} & set(vocabshift.list_methods())


def test_an_option_without_a_default_must_be_given():
    @dataclasses.dataclass(frozen=True)
    class Required:
        count: int
        size: int
        scale: float = 1.0

    spec = registry.MethodSpec("t", lambda c, o: None, Required, "T", None, "")
    with pytest.raises(MethodOptionError, match=r"Method 't' needs the options count, size, which have no default: "
                       r"pass count=\.\.\."):
        registry.build_config(spec, {"scale": 2.0})
    assert registry.build_config(spec, {"count": 1, "size": 2}) == Required(1, 2)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_float_options_must_be_finite(value):
    spec = registry.MethodSpec("t", lambda c, o: None, _Options, "T", None, "")
    with pytest.raises(MethodOptionError, match=f"Option scale={value!r} is invalid for method 't': pass a finite"):
        registry.build_config(spec, {"scale": value})


def test_id_packing_round_trips():
    ids = [0, 5, 2**31 - 1, 7, 7]
    assert unpack_ids(pack_ids(ids)) == ids
    assert unpack_ids(pack_ids([])) == []
    assert id_ranges([3, 4, 5, 9, 11, 12]) == [[3, 6], [9, 10], [11, 13]]


def test_record_round_trips_through_json_and_ignores_unknown_keys(tokenizers_en, tokenizers_ru):
    from conftest import make_model

    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"])
    record = get_record(model)
    data = json.loads(json.dumps(record.to_dict()))
    assert ExtensionRecord.from_dict({**data, "from_the_future": 1}) == record
    del data["method"]
    with pytest.raises(RecordError, match=r"damaged: it lacks \['method'\]\. Restore config.json"):
        ExtensionRecord.from_dict(data)


def test_get_record_on_a_model_never_extended(tokenizers_en):
    from conftest import make_model

    with pytest.raises(RecordError, match="carries no vocabshift record.*call model.extend_vocabulary"):
        get_record(make_model("qwen2-tied", tokenizers_en["bytelevel"]))


def test_a_record_of_vocabshift_0_1_is_read_under_the_new_names(tokenizers_en, tokenizers_ru):
    """0.1 called the user's tokenizer's fingerprint `target_tokenizer_sha256` and kept no command or options."""
    from conftest import make_model

    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"], seed=3,
                            pad_to_multiple_of=64, input_weighting="char_length")
    record = get_record(model)
    assert record.pad_to_multiple_of == 64 and record.method_options == {"input_weighting": "char_length"}
    assert record.command == ["vocabshift", "extend", "path/to/base-model", "path/to/new-tokenizer", "OUTPUT_DIR",
                              "--method", "subword", "--mode", "extend", "--seed", "3", "--pad-to-multiple-of", "64",
                              "--option", "input_weighting=char_length"]
    old = {key: value for key, value in record.to_dict().items()
           if key not in ("pad_to_multiple_of", "keep_source_segmentation", "method_options", "command")}
    old["target_tokenizer_sha256"] = old.pop("new_tokenizer_sha256")
    read = ExtensionRecord.from_dict(old)
    assert read.new_tokenizer_sha256 == record.new_tokenizer_sha256 and read.command == []
    assert read.pad_to_multiple_of is None and read.method_options == {}
