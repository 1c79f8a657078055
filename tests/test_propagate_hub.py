"""`propagate` from repo ids served by the loopback Hub (only the files needed are downloaded, shards without
embeddings are never read into memory), and the `vocabshift propagate` command."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from huggingface_hub import HfApi
from transformers import AutoModelForCausalLM

import vocabshift
from conftest import ROOT
from test_propagate import build_family
from vocabshift.propagation import shards

ROLES = ("adapted", "base", "instruct")


@pytest.fixture(scope="module")
def family(tmp_path_factory, tokenizers_en, tokenizers_ru):
    root = tmp_path_factory.mktemp("hub")
    return build_family(root, "llama-untied", tokenizers_en["sentencepiece"], tokenizers_ru["sentencepiece"])


def _upload(hub, folders) -> dict[str, str]:
    """Push the three folders; instruct gets a second commit (a changed README) so that its revision matters."""
    api = HfApi()
    commits = {}
    for role in ROLES:
        api.create_repo(f"loopback-user/{role}")
        commits[role] = api.upload_folder(repo_id=f"loopback-user/{role}", folder_path=folders[role]).oid
    api.upload_file(path_or_fileobj=b"later", path_in_repo="README.md", repo_id="loopback-user/instruct")
    return commits


def _embedding_shards(folder: Path) -> tuple[set[str], set[str]]:
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    embedding = {weight_map["model.embed_tokens.weight"], weight_map["lm_head.weight"]}
    return embedding, set(weight_map.values()) - embedding


def _refuse_loading(*args, **kwargs):
    raise AssertionError("propagate loaded a whole safetensors file")


def _record_reads(monkeypatch, read: list[Path], copied: list[tuple[Path, str]]) -> None:
    """Record the files whose tensor bytes are read into memory (matrix rows, byte ranges of rewritten shards) and
    the files copied byte for byte; a copy that reads through Python buffers (`copyfileobj`) fails."""
    gather, copy_range, copyfile = shards.Matrix.gather, shards._copy_range, shards.shutil.copyfile

    def recorded_gather(self, ids, **kwargs):
        read.append(self.path)
        return gather(self, ids, **kwargs)

    def recorded_copy_range(source, target, begin, end, path):
        read.append(path)
        return copy_range(source, target, begin, end, path)

    def recorded_copyfile(source, target, **kwargs):
        copied.append((Path(source), Path(target).name))
        return copyfile(source, target, **kwargs)

    monkeypatch.setattr(shards.Matrix, "gather", recorded_gather)
    monkeypatch.setattr(shards, "_copy_range", recorded_copy_range)
    monkeypatch.setattr(shards.shutil, "copyfile", recorded_copyfile)
    monkeypatch.setattr(shards.shutil, "copyfileobj", _refuse_loading)


def test_propagate_from_repo_ids(family, loopback_hub, tmp_path, monkeypatch):
    commits = _upload(loopback_hub, family)
    read: list[Path] = []
    copied: list[tuple[Path, str]] = []
    _record_reads(monkeypatch, read, copied)
    for module in (safetensors.torch, safetensors):
        for name in ("load_file", "load", "safe_open"):
            monkeypatch.setattr(module, name, _refuse_loading, raising=False)
    loopback_hub.requests.clear()

    out = vocabshift.propagate("loopback-user/adapted", "loopback-user/base", "loopback-user/instruct",
                               output_dir=tmp_path / "out", instruct_revision=commits["instruct"])

    fetched = {role: {path.split("/", 5)[5] for _, path in loopback_hub.requests
                      if path.startswith(f"/loopback-user/{role}/resolve/")} for role in ROLES}
    for role in ("adapted", "base"):
        embedding, others = _embedding_shards(family[role])
        assert embedding <= fetched[role] and not others & fetched[role], role  # only the shards needed
        assert "generation_config.json" not in fetched[role]
    embedding, others = _embedding_shards(family["instruct"])
    assert embedding | others <= fetched["instruct"] and "README.md" not in fetched["instruct"]
    # Shards without embeddings: their headers are checked and their bytes copied, never read into memory.
    roles = {path: next(r for r in ROLES if f"models--loopback-user--{r}" in str(path)) for path in read}
    assert {(roles[path], path.name) for path in read} == {
        (role, name) for role in ROLES for name in _embedding_shards(family[role])[0]}
    assert sorted(name for _, name in copied) == sorted(others)  # instruct's other shards, copied by the kernel
    assert all("models--loopback-user--instruct" in str(source) for source, _ in copied)

    local = vocabshift.propagate(*(family[role] for role in ROLES), output_dir=tmp_path / "local")
    remote_model, local_model = (AutoModelForCausalLM.from_pretrained(f) for f in (out, local))
    for (name, value), (_, expected) in zip(remote_model.state_dict().items(), local_model.state_dict().items()):
        assert torch.equal(value, expected), name
    entry = vocabshift.get_record(remote_model).propagation[-1]
    assert {role: entry[role] for role in ROLES} == {role: f"loopback-user/{role}" for role in ROLES}
    assert entry["instruct_revision"] == commits["instruct"] and entry["base_revision"] == commits["base"]
    at = entry["command"].index("--instruct-revision")
    assert entry["command"][at + 1] == commits["instruct"]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vocabshift", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})})


def test_propagate_command(family, tmp_path):
    out = tmp_path / "out"
    result = run("propagate", *(str(family[role]) for role in ROLES), str(out), "--method", "overlap")
    assert result.returncode == 0, result.stderr
    entry = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(out)).propagation[-1]
    assert entry["method"] == "overlap" and f"{out}: overlap; rows " in result.stdout
    assert f"input residual {entry['fit']['input']['residual']:.4f}" in result.stdout
    card = str(vocabshift.model_card(out))
    assert entry["command"] == ["vocabshift", "propagate", *(str(family[role]) for role in ROLES), str(out), "--method",
                                "overlap"]
    assert "LEP `overlap`" in card and shlex.join(entry["command"]) in card

    result = run("propagate", *(str(family[role]) for role in ROLES), str(out))
    assert result.returncode == 1
    assert "error: output_dir=" in result.stderr and "is not an empty folder" in result.stderr
