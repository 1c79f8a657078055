"""`vocabshift inspect` / `inspect_folder` on broken folders: problems reported (exit code 1), never a traceback."""

from __future__ import annotations

import copy
import json
import re
import shutil

import pytest
from transformers import AutoTokenizer

import vocabshift
from conftest import make_model, shards_into_subfolder
from vocabshift.cli import main
from vocabshift.cli_common import load_model
from vocabshift.errors import ShardError
from vocabshift.export.gguf import _check_weights


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tokenizers_en, tokenizers_ru):
    """A tiny extended Qwen2 saved in several shards."""
    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"])
    return vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path_factory.mktemp("inspect") / "model",
                                             max_shard_size="60KB")


@pytest.fixture
def folder(saved, tmp_path):
    return shutil.copytree(saved, tmp_path / "model")


def _embedding_shard(folder):
    return json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]["model.embed_tokens.weight"]


def _inspect(folder, capsys):
    code = main(["inspect", str(folder)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_a_consistent_folder(folder, capsys):
    code, out, _ = _inspect(folder, capsys)
    assert code == 0 and f"{folder}: consistent" in out


@pytest.mark.parametrize(("damage", "why"), [
    (lambda data: data[:-7], "the tensors end at byte \\d+ but the file has \\d+"),
    (lambda data: b"\x07" * 8 + data[8:], "header length \\d+ for a file of \\d+ bytes"),
    (lambda data: data[:8] + b"\x00" * 16 + data[24:], "unreadable header"),
])
def test_a_truncated_or_corrupted_shard_is_a_problem(folder, capsys, damage, why):
    shard = folder / _embedding_shard(folder)
    shard.write_bytes(damage(shard.read_bytes()))
    report = vocabshift.inspect_folder(folder)
    assert not report.ok
    assert any(problem.startswith(f"'{shard}' is not a valid safetensors file") for problem in report.problems)
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and re.search(f"PROBLEM: '{shard}' is not a valid safetensors file \\({why}.*\\): it is "
                                   "truncated or corrupted", out), out
    assert "decode to a token\n" in out and "tensor-parallel" not in out  # the rows are unknown (it said "up to 0")


@pytest.mark.parametrize("flatten", [lambda rows: rows[:, 0], lambda rows: rows[0, 0]], ids=["1-D", "0-D"])
def test_an_embedding_tensor_of_other_dimensions_is_a_problem(folder, capsys, flatten):
    """A 1-D (or 0-D) embedding tensor in a readable shard is told as damaged weights (it was a raw IndexError)."""
    from safetensors.torch import load_file, save_file

    shard = folder / _embedding_shard(folder)
    tensors = load_file(shard)
    tensors["model.embed_tokens.weight"] = flatten(tensors["model.embed_tokens.weight"]).contiguous()
    save_file(tensors, shard, metadata={"format": "pt"})
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and "PROBLEM: the input embedding tensor (model.embed_tokens.weight" in out
    assert "where an embedding matrix has two dimensions (rows x width): the weights are damaged" in out


def test_a_head_bias_of_another_width_is_a_problem(tokenizers_en, tokenizers_ru, tmp_path, capsys):
    """A head bias left at the old width (as propagate left BERT's) was called consistent, and from_pretrained
    refused the folder."""
    from safetensors.torch import load_file, save_file

    model = make_model("phi-untied-bias", tokenizers_en["bytelevel"])
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"])
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "model")
    tensors = load_file(folder / "model.safetensors")
    tensors["lm_head.bias"] = tensors["lm_head.bias"][:700].contiguous()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and "PROBLEM: the output head's bias (lm_head.bias) has shape [700] but the input embeddings " \
        "1,408 rows: it was not resized with them, so from_pretrained would refuse the folder" in out, out


def test_a_shard_missing_from_the_index_is_a_problem(folder, capsys):
    shard = sorted(set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values()))[-1]
    (folder / shard).unlink()
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and "index.json' puts " in out and f"in {shard}, which is missing" in out


def test_a_single_file_beside_the_index_is_a_problem(folder, capsys):
    """transformers loads model.safetensors, vLLM and llama.cpp's converter the index's shards: a stale copy of
    either serves other weights (it was reported consistent)."""
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(folder).save_pretrained(folder.parent / "single")
    shutil.move(folder.parent / "single" / "model.safetensors", folder / "model.safetensors")
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and "PROBLEM: it holds both model.safetensors and model.safetensors.index.json: transformers " \
        "loads model.safetensors, vLLM and llama.cpp's converter the shards the index names" in out


@pytest.mark.parametrize(("damage", "why"), [
    (lambda record: record.pop("method"), "is damaged: it lacks ['method']"),
    (lambda record: record.update(new_token_ranges=[[0, 10**9]]),
     "is damaged: 'new_token_ranges' holds [0, 1000000000]"),
    (lambda record: record["decompositions"].update(ids=record["decompositions"]["lengths"]),
     "is damaged: 'decompositions' holds "),
])
def test_a_damaged_record_is_a_problem(folder, capsys, damage, why):
    config = json.loads((folder / "config.json").read_text())
    damage(config["vocabshift"])
    (folder / "config.json").write_text(json.dumps(config))
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and "PROBLEM: The vocabshift record in config.json " + why in out, out


@pytest.mark.parametrize(("text", "why"), [("{\"model_type\": ", "JSONDecodeError"), ("[1]", "a JSON list"),
                                           ("{\"model_type\": \"no-such-model\"}", "ValueError")])
def test_an_unreadable_config_is_an_error(folder, capsys, text, why):
    (folder / "config.json").write_text(text)
    code, _, err = _inspect(folder, capsys)
    assert code == 1 and err.startswith(f"error: '{folder / 'config.json'}' cannot be read (") and why in err


def test_a_folder_without_config_or_weights(tmp_path, folder, capsys):
    code, _, err = _inspect(tmp_path / "nowhere", capsys)
    assert code == 1 and "nowhere' does not exist: pass a folder written by save_pretrained" in err
    for shard in folder.glob("*.safetensors"):
        shard.unlink()
    code, _, err = _inspect(folder, capsys)
    assert code == 1 and "has no *.safetensors weights" in err


def test_a_folder_that_is_not_a_path():
    with pytest.raises(vocabshift.errors.InvalidArgumentTypeError, match="folder=3 is a int: pass a path"):
        vocabshift.inspect_folder(3)


def test_a_tokenizer_that_lost_merges_of_new_tokens_is_a_problem(folder, capsys):
    """Merges dropped from tokenizer.json leave the vocabulary (and its fingerprint) as it was, and the sampled
    round trip can miss the tokens they made: the folder was reported consistent."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["model"]["merges"] = data["model"]["merges"][:-3]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and re.search(r"PROBLEM: \d+ new tokens \(first .*\) are produced by none of the tokenizer's "
                                   "merges", out), out


def test_a_propagated_folder_says_so(folder, capsys):
    """The record line names the model extend started from; after LEP the folder holds the instruct model's layers,
    and the report said nothing of it."""
    config = json.loads((folder / "config.json").read_text())
    config["vocabshift"]["propagation"] = [{"method": "overlap", "adapted": "out/base-ru", "instruct": "org/instruct"}]
    (folder / "config.json").write_text(json.dumps(config))
    code, out, _ = _inspect(folder, capsys)
    assert code == 0 and "  propagation: LEP overlap carried the rows of out/base-ru into org/instruct\n" in out, out


def test_shards_in_a_subfolder_of_the_index(folder, capsys):
    """An index may name its shards in a subfolder ("weights/model-00001-of-00003.safetensors"), which transformers
    and llama.cpp's converter load: inspect, load_model and the GGUF export's checks read them too (inspect said
    "has no *.safetensors weights", load_model called the shards missing); a missing one is still named."""
    shards_into_subfolder(folder)
    code, out, _ = _inspect(folder, capsys)
    assert code == 0 and f"{folder}: consistent" in out, out
    assert load_model(str(folder)).get_input_embeddings().weight.shape[0] == 1408
    _check_weights(folder)
    shard = _embedding_shard(folder)
    (folder / shard).unlink()
    code, out, _ = _inspect(folder, capsys)
    assert code == 1 and f"puts model.embed_tokens.weight in {shard}, which is missing" in out, out
    with pytest.raises(ShardError, match=f"in {shard}, which is missing"):
        load_model(str(folder))


def test_tokens_added_after_the_extension_are_a_note(folder, tmp_path, capsys):
    """docs/extend.md: rows grown for tokens added after extend_vocabulary are saved as they are; inspect (and so
    push) called that folder inconsistent (record sizes, fingerprint, special tokens)."""
    model, tokenizer = load_model(str(folder)), AutoTokenizer.from_pretrained(folder)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<tool_call>"]})
    model.resize_token_embeddings(len(tokenizer))
    grown = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "grown")
    code, out, _ = _inspect(grown, capsys)
    assert code == 0 and "1 token(s) added to the tokenizer after extend_vocabulary" in out


def test_a_special_token_without_a_row_is_a_note(tokenizers_en, tmp_path, capsys):
    """Gemma-3-1B's tokenizer has <image_soft_token> one id past its rows: its original folder was a problem."""
    tokenizer = copy.deepcopy(tokenizers_en["bytelevel"])
    model = make_model("qwen2-tied", tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    code, out, _ = _inspect(tmp_path / "m", capsys)
    assert code == 0 and "special token <image> (id 700) has no row" in out, out
    tokenizer.add_special_tokens({"pad_token": "<pad>"})  # a token with a role in text needs a row
    tokenizer.save_pretrained(tmp_path / "m")
    code, out, _ = _inspect(tmp_path / "m", capsys)
    assert code == 1 and "special token <pad> has id 701, beyond the 700 rows" in out, out
