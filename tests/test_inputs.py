"""Methods are pure: their file and model inputs are resolved before they run (`vocabshift.inputs`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import vocabshift
from conftest import ROOT, make_model
from vocabshift.errors import HelperModelError, MethodOptionError
from vocabshift.inputs import helper_matrix, resolve_inputs
from vocabshift.methods.focus import FocusConfig
from vocabshift.methods.salt import SaltConfig

# What reading or writing files, running processes or training word vectors takes.
_IO_NAMES = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "load_word_vectors",
             "train_word_vectors", "subprocess", "pathlib", "Path", "shutil", "tempfile"}


def test_no_method_module_reads_or_writes_files():
    for path in sorted((ROOT / "src" / "vocabshift" / "methods").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names |= {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                  for alias in node.names}
        assert not names & _IO_NAMES, f"{path.name} uses {sorted(names & _IO_NAMES)}"


def test_word_vectors_are_loaded_before_the_method_runs(token_vectors_ru, tokenizers_ru):
    vectors = token_vectors_ru["bytelevel"]
    config = resolve_inputs(FocusConfig(word_vectors=Path(vectors.source)), tokenizers_ru["bytelevel"])
    assert isinstance(config.word_vectors, vocabshift.WordVectors) and config.word_vectors.source == vectors.source
    assert torch.equal(torch.from_numpy(config.word_vectors.vectors), torch.from_numpy(vectors.vectors))
    given = FocusConfig(word_vectors=vectors)
    assert resolve_inputs(given, tokenizers_ru["bytelevel"]) is given  # nothing to resolve


def test_a_method_called_directly_refuses_a_path(token_vectors_ru, tokenizers_en, tokenizers_ru):
    model = make_model("qwen2-tied", tokenizers_en["bytelevel"])
    spec = vocabshift.get_method("focus")
    captured = {}

    def capture(context, config):
        captured["context"] = context
        return spec.function(context, config)

    registry = vocabshift.registry._METHODS
    registry["focus"] = spec.__class__(**{**spec.__dict__, "function": capture})
    try:
        model.extend_vocabulary(tokenizers_ru["bytelevel"], method="focus", source_tokenizer=tokenizers_en["bytelevel"],
                                word_vectors=token_vectors_ru["bytelevel"])
    finally:
        registry["focus"] = spec
    unresolved = FocusConfig(word_vectors=token_vectors_ru["bytelevel"].source)
    with pytest.raises(MethodOptionError, match="got word_vectors as a str, not a WordVectors: .*resolve_inputs"):
        spec.function(captured["context"], unresolved)


def test_a_tensor_helper_is_not_checked_against_the_current_folder(tokenizers_ru, tokenizers_en, tmp_path,
                                                                   monkeypatch):
    """Only a helper loaded from a folder has a saved tokenizer to check; a tensor has none (not ./tokenizer.json)."""
    tokenizers_en["bytelevel"].save_pretrained(tmp_path)
    monkeypatch.chdir(tmp_path)
    matrix = make_model("qwen2-tied", tokenizers_ru["bytelevel"]).get_input_embeddings().weight
    assert torch.equal(helper_matrix(matrix, tokenizers_ru["bytelevel"]), matrix.detach().float())


def test_the_helper_model_becomes_its_checked_matrix(tokenizers_ru, tokenizers_en):
    helper = make_model("qwen2-tied", tokenizers_ru["bytelevel"])
    config = resolve_inputs(SaltConfig(helper_model=helper, word_vectors=vocabshift.WordVectors(["a"], [[1.0]])),
                            tokenizers_ru["bytelevel"])
    assert torch.equal(config.helper_model, helper.get_input_embeddings().weight.detach().float())
    with pytest.raises(HelperModelError, match="has \\d+ embedding rows but new_tokenizer has \\d+ tokens"):
        helper_matrix(make_model("qwen2-tied", tokenizers_en["bytelevel"]).get_input_embeddings().weight,
                      tokenizers_ru["wordpiece"])
