"""`export_gguf` / `vocabshift gguf`: llama.cpp's own converter (from the llama-cpp-python sdist on PyPI) on tiny
models of the real SmolLM2, Llama-3 and Qwen3 tokenizers, extended with Russian.

The GGUF is read back with the `gguf` package: its tokens are the HF tokenizer's in id order, its merges are
tokenizer.json's, and its pre-tokenizer is the one the converter gives the original folder. Conversions are
vocabulary-only (seconds) but for one f32 conversion of a SmolLM2-shaped model.
"""

from __future__ import annotations

import configparser
import functools
import hashlib
import io
import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import vocabshift
from conftest import ROOT, read_lines
from vocabshift.cli import main
from vocabshift.errors import (
    InvalidArgumentError,
    LlamaCppError,
    ModelFolderError,
    TokenizerMismatchError,
    UnknownPreTokenizerError,
)
from vocabshift.export.llama_cpp import LLAMA_CPP_PYTHON, cached_converter, converter_dir
from vocabshift_testing.corpora import smollm2
from vocabshift_testing.real_tokenizers import real_tokenizer_dir

TINY = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            head_dim=8)
BUILDERS = {"smollm2": (LlamaConfig, LlamaForCausalLM, True), "llama3": (LlamaConfig, LlamaForCausalLM, False),
            "qwen3": (Qwen3Config, Qwen3ForCausalLM, False)}


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=20):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def converter() -> Path:
    """llama.cpp's converter, downloaded once; the tests skip only when PyPI cannot be reached to download it."""
    if cached_converter() is None and not _pypi_reachable():
        pytest.skip(f"PyPI cannot be reached, and the converter of llama-cpp-python=={LLAMA_CPP_PYTHON} is not "
                    "cached yet")
    return converter_dir()


@functools.cache
def source_dir(family: str) -> Path:
    return smollm2() if family == "smollm2" else real_tokenizer_dir(family)


@functools.cache
def russian(family: str):
    source = AutoTokenizer.from_pretrained(source_dir(family))
    return vocabshift.train_tokenizer(read_lines("ru", 1500), like=source, vocab_size=1200)


def tiny(family: str, vocab_size: int):
    config_class, model_class, tied = BUILDERS[family]
    torch.manual_seed(0)
    return model_class(config_class(vocab_size=vocab_size, tie_word_embeddings=tied, **TINY)).eval()


def folders(family: str, root: Path, *, mode: str = "extend") -> tuple[Path, Path]:
    """The tiny model of `family` saved as it was (original) and after extend_vocabulary with Russian (adapted)."""
    source = AutoTokenizer.from_pretrained(source_dir(family))
    model = tiny(family, len(source))
    original, adapted = root / f"{family}-original", root / f"{family}-{mode}"
    vocabshift.save_pretrained_atomic(model, source, original)
    tokenizer = model.extend_vocabulary(russian(family), method="subword", mode=mode, source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, adapted)
    return original, adapted


def metadata(path: Path) -> dict:
    fields = GGUFReader(path).fields
    return {key: fields[key].contents() for key in ("tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                                                    "tokenizer.ggml.merges")}


def hf_tokens(folder: Path) -> list[str]:
    vocab = AutoTokenizer.from_pretrained(folder).get_vocab()
    by_id = {index: token for token, index in vocab.items()}
    return [by_id[i] for i in range(len(by_id))]


def hf_merges(folder: Path) -> list[str]:
    merges = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"]
    return [merge if isinstance(merge, str) else " ".join(merge) for merge in merges]


def digest(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def smollm2_folders(tmp_path_factory) -> tuple[Path, Path]:
    return folders("smollm2", tmp_path_factory.mktemp("smollm2"))


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_extended_model_converts_with_its_original_pre_tokenizer(family, converter, tmp_path):
    original, adapted = folders(family, tmp_path)
    before = digest(adapted)
    vocabshift.export_gguf(original, tmp_path / "original.gguf", vocab_only=True)
    vocabshift.export_gguf(adapted, tmp_path / "adapted.gguf", vocab_only=True)
    expected, found = metadata(tmp_path / "original.gguf"), metadata(tmp_path / "adapted.gguf")
    assert found["tokenizer.ggml.pre"] == expected["tokenizer.ggml.pre"] != "default"
    assert found["tokenizer.ggml.tokens"] == hf_tokens(adapted)
    assert len(found["tokenizer.ggml.tokens"]) > len(expected["tokenizer.ggml.tokens"])
    assert found["tokenizer.ggml.merges"] == hf_merges(adapted)
    assert digest(adapted) == before and sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "adapted.gguf", "original.gguf"]


def test_a_model_extended_twice_converts_with_the_first_original_pre_tokenizer(converter, smollm2_folders, tmp_path):
    """The second extension's source tokenizer is the first's output, which llama.cpp does not know: the tokenizer
    the first extension started from names the pre-tokenizer."""
    model = AutoModelForCausalLM.from_pretrained(smollm2_folders[1])
    first = AutoTokenizer.from_pretrained(smollm2_folders[1])
    more = vocabshift.train_tokenizer(read_lines("ru", 1500, skip=1500), like=first, vocab_size=len(first) + 400)
    vocabshift.save_pretrained_atomic(model, model.extend_vocabulary(more, source_tokenizer=first), tmp_path / "twice")
    vocabshift.export_gguf(tmp_path / "twice", tmp_path / "twice.gguf", vocab_only=True)
    found = metadata(tmp_path / "twice.gguf")
    assert found["tokenizer.ggml.pre"] == "smollm" and found["tokenizer.ggml.tokens"] == hf_tokens(tmp_path / "twice")


def test_the_converter_alone_refuses_the_adapted_folder(converter, smollm2_folders, tmp_path):
    """What export_gguf fixes: run as it is, llama.cpp's converter does not recognize the adapted tokenizer."""
    done = subprocess.run([sys.executable, str(converter / "convert_hf_to_gguf.py"), "--vocab-only", "--outfile",
                           str(tmp_path / "plain.gguf"), str(smollm2_folders[1])], capture_output=True, text=True)
    assert done.returncode != 0 and "BPE pre-tokenizer was not recognized" in done.stderr


def test_full_conversion_at_f32(converter, smollm2_folders, tmp_path):
    adapted = smollm2_folders[1]
    path = vocabshift.export_gguf(adapted, tmp_path / "model.gguf", outtype="f32")
    tensors = GGUFReader(path).tensors
    with safe_open(adapted / "model.safetensors", "pt") as weights:
        shapes = sorted(tuple(weights.get_slice(name).get_shape()) for name in weights.keys())
    assert sorted(tuple(int(n) for n in reversed(t.shape)) for t in tensors) == shapes  # GGUF lists ne0 first
    assert {t.tensor_type for t in tensors} == {GGMLQuantizationType.F32}
    embeddings = next(t for t in tensors if t.name == "token_embd.weight")
    assert int(embeddings.shape[1]) == len(AutoTokenizer.from_pretrained(adapted)) > 49152


def test_replace_mode_needs_the_source_tokenizer(converter, tmp_path):
    original, adapted = folders("smollm2", tmp_path, mode="replace")
    with pytest.raises(InvalidArgumentError, match="replace mode, so its original tokenizer cannot be rebuilt"):
        vocabshift.export_gguf(adapted, tmp_path / "replaced.gguf", vocab_only=True)
    vocabshift.export_gguf(adapted, tmp_path / "replaced.gguf", vocab_only=True, source_tokenizer=original)
    found = metadata(tmp_path / "replaced.gguf")
    assert found["tokenizer.ggml.pre"] == "smollm" and found["tokenizer.ggml.tokens"] == hf_tokens(adapted)

    state = json.loads((adapted / "tokenizer.json").read_text(encoding="utf-8"))
    state["pre_tokenizer"] = {"type": "Whitespace"}
    (adapted / "tokenizer.json").write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(UnknownPreTokenizerError, match="differs from its original tokenizer in pre_tokenizer"):
        vocabshift.export_gguf(adapted, tmp_path / "other.gguf", vocab_only=True, source_tokenizer=original)
    assert not (tmp_path / "other.gguf").exists()


def test_a_tokenizer_that_does_not_match_the_record(converter, smollm2_folders, tmp_path):
    """Two old tokens swap ids in the adapted folder: the rebuilt original is not the recorded one; the original
    given as source_tokenizer is, and names the pre-tokenizer."""
    original, adapted = smollm2_folders
    changed = tmp_path / "changed"
    shutil.copytree(adapted, changed)
    state = json.loads((changed / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = state["model"]["vocab"]
    vocab["Ġthe"], vocab["Ġand"] = vocab["Ġand"], vocab["Ġthe"]
    (changed / "tokenizer.json").write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(TokenizerMismatchError, match="the original tokenizer rebuilt from .* pass source_tokenizer="):
        vocabshift.export_gguf(changed, tmp_path / "changed.gguf", vocab_only=True)
    with pytest.raises(TokenizerMismatchError, match="source_tokenizer=.* has fingerprint"):
        vocabshift.export_gguf(changed, tmp_path / "changed.gguf", vocab_only=True, source_tokenizer=changed)
    vocabshift.export_gguf(changed, tmp_path / "changed.gguf", vocab_only=True, source_tokenizer=original)
    assert metadata(tmp_path / "changed.gguf")["tokenizer.ggml.pre"] == "smollm"


def test_a_pre_tokenizer_llama_cpp_does_not_know(converter, tmp_path):
    """A folder without a record, whose byte-level BPE vocabulary (the Russian one alone) no known model has."""
    tokenizer = russian("smollm2")
    vocabshift.save_pretrained_atomic(tiny("smollm2", len(tokenizer)), tokenizer, tmp_path / "russian")
    with pytest.raises(UnknownPreTokenizerError, match="does not know the BPE pre-tokenizer of model_dir="):
        vocabshift.export_gguf(tmp_path / "russian", tmp_path / "out" / "russian.gguf", vocab_only=True)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_stale_tokenizer_model_is_refused(smollm2_folders, tmp_path):
    """llama.cpp reads tokenizer.model before tokenizer.json: one that disagrees would write the old vocabulary."""
    import sentencepiece

    stale = tmp_path / "stale"
    shutil.copytree(smollm2_folders[1], stale)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(read_lines("en", 300)), model_writer=model,
                                             vocab_size=300, minloglevel=2)
    (stale / "tokenizer.model").write_bytes(model.getvalue())
    with pytest.raises(TokenizerMismatchError,
                       match=r"holds a tokenizer.model that disagrees with its tokenizer.json \(it holds 300 pieces"):
        vocabshift.export_gguf(stale, tmp_path / "stale.gguf", vocab_only=True)


def test_a_single_file_beside_a_shard_index_is_refused(smollm2_folders, tmp_path):
    """The converter reads the shards an index names, transformers model.safetensors: a stale copy of either would
    put other weights in the GGUF than the model holds (it did: zeroed stale embeddings, without a word)."""
    both = shutil.copytree(smollm2_folders[1], tmp_path / "both")
    with safe_open(both / "model.safetensors", "pt") as weights:
        stale = {name: torch.zeros_like(weights.get_tensor(name)) for name in weights.keys()}
    save_file(stale, both / "model-00001-of-00001.safetensors", metadata={"format": "pt"})
    index = {"metadata": {"total_size": 0}, "weight_map": dict.fromkeys(stale, "model-00001-of-00001.safetensors")}
    (both / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    before = digest(both)
    with pytest.raises(ModelFolderError, match="both' holds both model.safetensors and model.safetensors.index.json: "
                       "transformers loads model.safetensors, llama.cpp's converter the shards the index names"):
        vocabshift.export_gguf(both, tmp_path / "both.gguf")
    assert digest(both) == before and not (tmp_path / "both.gguf").exists()


def test_a_config_whose_vocab_size_is_not_the_rows_is_refused(smollm2_folders, tmp_path):
    """The converter sizes the vocabulary by config.json and writes the tensors as stored: it wrote 64 more tokens
    than embedding rows, a GGUF llama.cpp cannot load."""
    changed = shutil.copytree(smollm2_folders[1], tmp_path / "changed")
    config = json.loads((changed / "config.json").read_text(encoding="utf-8"))
    rows, config["vocab_size"] = config["vocab_size"], config["vocab_size"] + 64
    (changed / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelFolderError, match=f"changed' stores {rows} embedding rows but its config.json says "
                       f"vocab_size={rows + 64}: its files come from different models"):
        vocabshift.export_gguf(changed, tmp_path / "changed.gguf")
    assert not (tmp_path / "changed.gguf").exists()


def test_bad_arguments(smollm2_folders, tmp_path):
    original, adapted = smollm2_folders
    with pytest.raises(InvalidArgumentError, match="outtype='q4_k' is invalid: pass one of 'f32', 'f16'"):
        vocabshift.export_gguf(adapted, tmp_path / "x.gguf", outtype="q4_k")
    with pytest.raises(InvalidArgumentError, match="is inside model_dir, which vocabshift never modifies"):
        vocabshift.export_gguf(adapted, adapted / "x.gguf")
    with pytest.raises(ModelFolderError, match="has no config.json"):
        vocabshift.export_gguf(tmp_path, tmp_path / "x.gguf")
    with pytest.raises(InvalidArgumentError, match="carries no vocabshift record"):
        vocabshift.export_gguf(original, tmp_path / "x.gguf", source_tokenizer=original)
    with pytest.raises(LlamaCppError, match="holds no convert_hf_to_gguf.py: pass the root of a llama.cpp"):
        vocabshift.export_gguf(adapted, tmp_path / "x.gguf", llama_cpp=tmp_path)
    assert not (tmp_path / "x.gguf").exists()


def test_cli(converter, smollm2_folders, tmp_path, capsys):
    output = tmp_path / "cli.gguf"
    assert main(["gguf", str(smollm2_folders[1]), str(output), "--vocab-only"]) == 0
    assert capsys.readouterr().out.startswith(f"{output}: ") and metadata(output)["tokenizer.ggml.pre"] == "smollm"
    assert main(["gguf", str(smollm2_folders[1]), str(output), "--llama-cpp", str(tmp_path)]) == 1
    assert "holds no convert_hf_to_gguf.py" in capsys.readouterr().err


def test_inspect_says_whether_a_folder_converts(converter, smollm2_folders, tmp_path):
    report = vocabshift.inspect_folder(smollm2_folders[1], gguf=True)
    assert report.ok and ("GGUF", "converts (llama.cpp's converter, vocabulary only)") in report.facts
    russian_only = tmp_path / "russian"
    vocabshift.save_pretrained_atomic(tiny("smollm2", len(russian("smollm2"))), russian("smollm2"), russian_only)
    report = vocabshift.inspect_folder(russian_only, gguf=True)
    assert any(problem.startswith("it does not convert to GGUF: llama.cpp (") for problem in report.problems)
    assert "GGUF" not in dict(report.facts)


def test_the_llama_extra_is_the_converters_release():
    """llama.cpp at runtime (the `llama` and `dev` extras) is the release whose converter writes the GGUF."""
    extras = configparser.ConfigParser()
    extras.read(ROOT / "setup.cfg", encoding="utf-8")
    pins = {name: [line for line in extras["options.extras_require"][name].split() if "llama" in line]
            for name in ("llama", "dev")}
    assert pins == {name: [f"llama-cpp-python=={LLAMA_CPP_PYTHON}"] for name in ("llama", "dev")}
