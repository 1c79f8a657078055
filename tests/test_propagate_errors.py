"""Bad input to `propagate`: a typed error naming the input and the fix, and no output folder left behind."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

import vocabshift
from conftest import SMALL, make_model
from test_propagate import build_family, grow
from vocabshift import errors
from vocabshift.packing import pack_ids


@pytest.fixture(scope="module")
def family(tmp_path_factory, tokenizers_en, tokenizers_ru):
    root = tmp_path_factory.mktemp("errors")
    return build_family(root, "qwen2-tied", tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"])


def _refused(tmp_path, error, match, adapted, base, instruct, **options):
    out = tmp_path / "out"
    with pytest.raises(error, match=match):
        vocabshift.propagate(adapted, base, instruct, output_dir=out, **options)
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def _save(model, tokenizer, folder):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _copy(folder, tmp_path):
    return shutil.copytree(folder, tmp_path / folder.name)


def test_unknown_method(family, tmp_path):
    _refused(tmp_path, errors.InvalidArgumentError, "method='lep' is invalid: pass one of 'swap', 'overlap', "
             "'conversion'", family["adapted"], family["base"], family["instruct"], method="lep")


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"adapted": None}, errors.InvalidArgumentTypeError, "adapted=None is a NoneType: pass a path"),
    ({"instruct": 3}, errors.InvalidArgumentTypeError, "instruct=3 is a int: pass a path"),
    ({"base": ""}, errors.InvalidArgumentError, "base is an empty path"),
    ({"output_dir": ["out"]}, errors.InvalidArgumentTypeError, "output_dir=\\['out'\\] is a list: pass a path"),
    ({"method": None}, errors.InvalidArgumentError, "method=None is invalid: pass one of 'swap'"),
    ({"base_revision": ""}, errors.InvalidArgumentError, "base_revision='' is invalid: pass a branch, tag or commit"),
    ({"instruct_revision": 5}, errors.InvalidArgumentError, "instruct_revision=5 is invalid"),
    ({"token": ""}, errors.InvalidArgumentError, "token must be a non-empty string \\(a Hub token\\), True, False or"),
    ({"hardlink": "yes"}, errors.InvalidArgumentTypeError, "hardlink='yes' is invalid: pass True or False"),
])
def test_arguments_of_the_wrong_type_or_value(family, tmp_path, change, error, match):
    arguments = {"adapted": family["adapted"], "base": family["base"], "instruct": family["instruct"],
                 "output_dir": tmp_path / "out", **change}
    with pytest.raises(error, match=match):
        vocabshift.propagate(arguments.pop("adapted"), arguments.pop("base"), arguments.pop("instruct"), **arguments)
    assert list(tmp_path.iterdir()) == []


def test_output_dir_not_empty(family, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("keep me")
    with pytest.raises(errors.OutputExistsError, match="output_dir=.* exists and is not an empty folder"):
        vocabshift.propagate(family["adapted"], family["base"], family["instruct"], output_dir=tmp_path / "out")
    assert (tmp_path / "out" / "notes.txt").read_text() == "keep me"


def test_revision_for_a_local_folder(family, tmp_path):
    _refused(tmp_path, errors.InvalidArgumentError, "base_revision='main' was given but base=.* is a local folder",
             family["adapted"], family["base"], family["instruct"], base_revision="main")


def test_inputs_that_are_not_models(family, tmp_path):
    (tmp_path / "empty").mkdir()
    _refused(tmp_path, errors.ModelFolderError, "instruct=.* has no config.json", family["adapted"], family["base"],
             tmp_path / "empty")
    _refused(tmp_path, errors.ModelFolderError, "base='/no/such/folder' is neither a local model folder nor a Hub "
             "repo", family["adapted"], "/no/such/folder", family["instruct"])
    pickled = _copy(family["instruct"], tmp_path)
    for path in pickled.glob("model*.safetensors*"):
        path.unlink()
    _refused(tmp_path, errors.ModelFolderError, "has no safetensors weights", family["adapted"], family["base"],
             pickled)


def test_adapted_without_record(family, tmp_path):
    _refused(tmp_path, errors.RecordError, "adapted=.* carries no vocabshift record", family["base"], family["base"],
             family["instruct"])


def test_base_and_instruct_of_another_architecture(family, tokenizers_en, tmp_path):
    tokenizer = tokenizers_en["bytelevel"]
    gpt2 = _save(GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4)), tokenizer,
                 tmp_path / "gpt2")
    _refused(tmp_path, errors.SiblingMismatchError,
             "base and instruct differ in architectures: \\['Qwen2ForCausalLM'\\]"
             " vs \\['GPT2LMHeadModel'\\]", family["adapted"], family["base"], gpt2)
    wide = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), **{**SMALL, "hidden_size": 32}))
    _refused(tmp_path, errors.SiblingMismatchError, "differ in hidden size: 64 vs 32", family["adapted"],
             family["base"], _save(wide, tokenizer, tmp_path / "wide"))
    untied = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=False, **SMALL))
    _refused(tmp_path, errors.SiblingMismatchError, "differ in tied output head: True vs False", family["adapted"],
             family["base"], _save(untied, tokenizer, tmp_path / "untied"))


def test_base_and_instruct_with_other_vocabularies(family, tokenizers_ru, tmp_path):
    other = _save(make_model("qwen2-tied", tokenizers_ru["bytelevel"]), tokenizers_ru["bytelevel"], tmp_path / "ru")
    _refused(tmp_path, errors.SiblingMismatchError, "base and instruct differ in vocabulary \\(\\d+ base tokens with "
             "another id in instruct", family["adapted"], family["base"], other)


def test_instruct_with_an_ordinary_token_beyond_its_rows(family, tmp_path):
    """Special tokens may lie beyond the rows (Gemma-3's image token); an ordinary one means another tokenizer."""
    instruct = _copy(family["instruct"], tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(instruct)
    tokenizer.add_tokens(["zzqx"])
    tokenizer.save_pretrained(instruct)
    _refused(tmp_path, errors.SiblingMismatchError, "instruct has \\d+ embedding rows for \\d+ tokens, and ids beyond "
             "them are ordinary tokens \\(e.g. 'zzqx'\\)", family["adapted"], family["base"], instruct)


def test_tokens_added_to_adapted_without_rows(family, tmp_path):
    """The fix keeps the added tokens (and every trained row): resize, not the tokenizer extend_vocabulary returned."""
    grown = grow(family["adapted"], tmp_path / "grown", resize=False)
    _refused(tmp_path, errors.RecordError, "adapted=.* has \\d+ tokens, 3 of them added after extend_vocabulary, but "
             "\\d+ embedding rows: give the added tokens rows \\(model.resize_token_embeddings\\(len\\(tokenizer",
             grown, family["base"], family["instruct"])


def test_adapted_not_made_from_base(family, tokenizers_ru, tmp_path):
    base = _save(make_model("qwen2-tied", tokenizers_ru["bytelevel"]), tokenizers_ru["bytelevel"], tmp_path / "b")
    _refused(tmp_path, errors.LineageError, "adapted was extended from a model with another tokenizer or row count",
             family["adapted"], base, base)
    # base and instruct swapped: same tokenizer, but the record says CPT froze the old rows, and they differ
    _refused(tmp_path, errors.LineageError, "adapted's rows of old tokens differ from base's and equal instruct's.*"
             "base and instruct look swapped", family["adapted"], family["instruct"], family["base"])


def test_a_model_extended_twice_is_propagated_one_extension_at_a_time(family, ru_lines, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(family["adapted"])
    first = AutoTokenizer.from_pretrained(family["adapted"])
    more = vocabshift.train_tokenizer(ru_lines, like=first, vocab_size=len(first) + 300)
    twice = tmp_path / "twice"
    vocabshift.save_pretrained_atomic(model, model.extend_vocabulary(more, source_tokenizer=first), twice)
    _refused(tmp_path, errors.LineageError, f"adapted was extended 2 times, first from '{family['base']}', and its "
             "record describes the last extension \\(its record names '.*adapted'\\): propagate one extension at a "
             "time", twice, family["base"], family["instruct"])


def test_a_propagated_output_given_as_adapted(family, tmp_path):
    # its rows of old tokens are instruct's, which read as "base and instruct swapped": swapping them cannot help
    output = vocabshift.propagate(family["adapted"], family["base"], family["instruct"], output_dir=tmp_path / "lep")
    before = {path: path.read_bytes() for path in output.iterdir()}
    _refused(tmp_path, errors.LineageError, "adapted's rows of old tokens differ from base's and equal instruct's "
             rf"\(\d+ sampled rows\): adapted is itself the output of a propagation into "
             rf"instruct='{family['instruct']}' \(per its record\): pass as adapted the base model saved after "
             "extend_vocabulary and CPT", output, family["base"], family["instruct"])
    assert {path: path.read_bytes() for path in output.iterdir()} == before


@pytest.mark.parametrize(("metadata", "found"), [
    ({"total_size": "12 MB"}, "\"total_size\": '12 MB'"),  # propagate added its byte change to it: a raw TypeError
    ({"total_size": -5}, "\"total_size\": -5"),
    ([], "a \"metadata\" list"),  # what transformers reads as an object
])
def test_index_with_damaged_metadata(family, tmp_path, metadata, found):
    instruct = _copy(family["instruct"], tmp_path)
    index = json.loads((instruct / "model.safetensors.index.json").read_text())
    index["metadata"] = metadata
    (instruct / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(tmp_path, errors.ShardError, f"model.safetensors.index.json' has {found}, but an index's \"metadata\" is "
             "an object whose \"total_size\" is the shards' byte count: the index is corrupted",
             family["adapted"], family["base"], instruct)
    assert json.loads((instruct / "model.safetensors.index.json").read_text()) == index


@pytest.fixture(scope="module")
def replaced(tmp_path_factory, tokenizers_en, tokenizers_ru):
    root = tmp_path_factory.mktemp("replaced")
    return build_family(root, "qwen2-tied", tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"], mode="replace")


def _sharing(replaced, tmp_path, ordinary):
    """A copy of the replace-mode adapted model whose record says its vocabulary shares the special tokens and the
    first `ordinary` other tokens with base (a target vocabulary of another script shares few or none)."""
    adapted = _copy(replaced["adapted"], tmp_path)
    config = json.loads((adapted / "config.json").read_text())
    pairs = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(adapted)).shared_pairs()
    specials = set(AutoTokenizer.from_pretrained(replaced["base"]).all_special_ids)
    kept = [pair for pair in pairs if pair[1] in specials]
    kept += [pair for pair in pairs if pair[1] not in specials][:ordinary]
    config["vocabshift"]["shared"] = pack_ids([i for pair in kept for i in pair])
    (adapted / "config.json").write_text(json.dumps(config))
    return adapted


def test_overlap_without_shared_ordinary_tokens(replaced, tmp_path):
    # W was fitted on nothing: a raw ZeroDivisionError (and all-zero rows, had it gone on)
    adapted = _sharing(replaced, tmp_path, 0)
    _refused(tmp_path, errors.InvalidArgumentError, "method='overlap' fits W on the ordinary tokens adapted's "
             r"vocabulary shares with base's, and per adapted's record there are none \(at most special and added "
             r"tokens are shared\): pass method='conversion' \(fitted on the new tokens' decompositions\) or "
             "method='swap'", adapted, replaced["base"], replaced["instruct"], method="overlap")


def test_a_fit_on_fewer_pairs_than_dimensions_is_named(replaced, tmp_path, caplog):
    # the map is exact on those rows (residual ~0) and flattens every other row into their span
    adapted = _sharing(replaced, tmp_path, 20)
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        vocabshift.propagate(adapted, replaced["base"], replaced["instruct"], output_dir=tmp_path / "out",
                             method="overlap")
    assert "W (input) is fitted on 20 row pairs that span 20 of the 64 dimensions: it maps every row into that " \
        "span and drops the rest" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vocabshift"):
        vocabshift.propagate(replaced["adapted"], replaced["base"], replaced["instruct"], output_dir=tmp_path / "all",
                             method="overlap")
    assert "is fitted on" not in caplog.text


def _shards(folder):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    embedding = index["weight_map"]["model.embed_tokens.weight"]
    return embedding, sorted(set(index["weight_map"].values()) - {embedding})


def test_missing_truncated_and_corrupted_shards(family, tmp_path):
    instruct = _copy(family["instruct"], tmp_path)
    embedding, others = _shards(instruct)
    path = instruct / others[0]
    data = path.read_bytes()
    path.unlink()
    _refused(tmp_path, errors.ShardError, f"The shard .*{others[0]}' is missing", family["adapted"], family["base"],
             instruct)
    path.write_bytes(data[:-10])
    _refused(tmp_path, errors.ShardError, "is not a valid safetensors file \\(the tensors end at byte \\d+ but the "
             "file has \\d+\\): it is truncated or corrupted", family["adapted"], family["base"], instruct)
    path.write_bytes(b"\xff" * 8 + data[8:])
    _refused(tmp_path, errors.ShardError, "header length", family["adapted"], family["base"], instruct)
    path.write_bytes(data)
    adapted = _copy(family["adapted"], tmp_path)
    adapted_embedding, _ = _shards(adapted)
    (adapted / adapted_embedding).write_bytes((adapted / adapted_embedding).read_bytes()[:100])
    _refused(tmp_path, errors.ShardError, f"{adapted_embedding}' is not a valid safetensors file", adapted,
             family["base"], instruct)


def test_index_that_disagrees_with_its_shards(family, tmp_path):
    instruct = _copy(family["instruct"], tmp_path)
    embedding, others = _shards(instruct)
    index = json.loads((instruct / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = others[0] if index["weight_map"]["model.norm.weight"] != others[0] \
        else others[1]
    (instruct / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(tmp_path, errors.ShardError, "puts model.norm.weight in .*, which does not hold it", family["adapted"],
             family["base"], instruct)


@pytest.mark.parametrize("role", ["adapted", "base", "instruct"])
@pytest.mark.parametrize("where", ["../victim/{}", "/{}", "sub/../../victim/{}"])
def test_index_naming_a_shard_outside_its_folder(family, tmp_path, role, where):
    # a hostile or hand-made index must neither be read from nor written to outside the model folder (the
    # instruct output shards take the index's names)
    folders = {name: family[name] for name in ("adapted", "base", "instruct")}
    folders[role] = _copy(family[role], tmp_path)
    embedding, _ = _shards(folders[role])
    victim = tmp_path / "victim" / embedding
    victim.parent.mkdir()
    shutil.copy(folders[role] / embedding, victim)
    before = victim.read_bytes()
    index = json.loads((folders[role] / "model.safetensors.index.json").read_text())
    outside = where.format(victim if where == "/{}" else embedding).replace("//", "/")
    index["weight_map"] = {key: outside if shard == embedding else shard for key, shard in index["weight_map"].items()}
    (folders[role] / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(tmp_path, errors.ShardError, f"names the shard '{outside}', which is not a file of its folder",
             folders["adapted"], folders["base"], folders["instruct"])
    assert victim.read_bytes() == before


@pytest.mark.parametrize("role", ["adapted", "base", "instruct"])
def test_config_that_disagrees_with_its_weights(family, tmp_path, role):
    folders = {name: family[name] for name in ("adapted", "base", "instruct")}
    folders[role] = _copy(family[role], tmp_path)
    config = json.loads((folders[role] / "config.json").read_text())
    rows, config["vocab_size"] = config["vocab_size"], config["vocab_size"] + 8
    (folders[role] / "config.json").write_text(json.dumps(config))
    _refused(tmp_path, errors.ModelFolderError, f"{role}=.* stores {rows} embedding rows but its config.json says "
             f"vocab_size={rows + 8}: its files come from different models", folders["adapted"], folders["base"],
             folders["instruct"])


def test_a_single_file_beside_an_index_is_read_as_from_pretrained_reads_it(family, tmp_path):
    instruct = _copy(family["instruct"], tmp_path)
    single = {key: 2 * value for key, value in AutoModelForCausalLM.from_pretrained(instruct).state_dict().items()
              if key != "lm_head.weight"}  # tied
    save_file(single, instruct / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    vocabshift.propagate(family["adapted"], family["base"], instruct, output_dir=out)
    loaded, result = AutoModelForCausalLM.from_pretrained(instruct), AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(loaded.model.norm.weight, single["model.norm.weight"])  # what transformers reads
    assert torch.equal(result.model.norm.weight, loaded.model.norm.weight)
    rows = loaded.get_input_embeddings().weight.shape[0]
    assert torch.equal(result.get_input_embeddings().weight[:rows], loaded.get_input_embeddings().weight)
    assert "model.safetensors.index.json" not in {path.name for path in out.iterdir()}


def test_corrupted_generation_config(family, tmp_path):
    instruct = _copy(family["instruct"], tmp_path)
    (instruct / "generation_config.json").write_text('{"eos_token_id": ', encoding="utf-8")
    _refused(tmp_path, errors.ModelFolderError, "generation_config.json' cannot be read \\(JSONDecodeError: .*\\): it "
             "is corrupted", family["adapted"], family["base"], instruct)


def _poison(folder, row, value):
    """Write `value` into one row of the input embeddings stored in `folder`'s shards."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = folder / index["weight_map"]["model.embed_tokens.weight"]
    tensors = load_file(shard)
    tensors["model.embed_tokens.weight"][row] = value
    save_file(tensors, shard, metadata={"format": "pt"})


@pytest.mark.parametrize(("role", "row", "value", "where"), [
    ("instruct", 5, float("nan"), "the output"),  # the rows compared for lineage: NaN rows looked "swapped"
    ("base", 7, float("-inf"), "the output"),
    ("adapted", -1, float("nan"), "the output's input rows"),  # a new row, as a diverged CPT writes it
])
def test_non_finite_rows_are_named(family, tmp_path, role, row, value, where):
    folders = {name: family[name] for name in ("adapted", "base", "instruct")}
    folders[role] = _copy(family[role], tmp_path)
    rows = json.loads((folders[role] / "config.json").read_text())["vocab_size"]
    _poison(folders[role], row, value)
    _refused(tmp_path, errors.NonFiniteWeightsError, rf"{role}'s model.embed_tokens.weight rows \[{row % rows}\] "
             rf"\(1 in all, in .*\) hold NaN or infinite values, which would make {where}", folders["adapted"],
             folders["base"], folders["instruct"])


def test_rows_beyond_the_range_of_a_float16_instruct(tmp_path, tokenizers_en, tokenizers_ru):
    # finite in adapted's float32, infinite once cast to instruct's float16: they were written so, without a word
    folders = build_family(tmp_path / "half", "qwen2-tied", tokenizers_en["bytelevel"], tokenizers_ru["bytelevel"],
                           dtype=torch.float16)
    _poison(folders["adapted"], -1, 1e5)
    _refused(tmp_path, errors.NonFiniteWeightsError, r"the output's input rows \d+\.\.\d+ reach [\d.e+]+, beyond the "
             r"range of torch.float16 \(at most 6.55e\+04\), instruct's dtype, in which the output is stored",
             folders["adapted"], folders["base"], folders["instruct"])


def test_errors_are_builtin_errors():
    assert issubclass(errors.ShardError, OSError) and issubclass(errors.OutputExistsError, FileExistsError)
    assert issubclass(errors.SiblingMismatchError, ValueError) and issubclass(errors.LineageError, ValueError)
