"""`propagate` checks lineage from the tensors: a wrong base, base and instruct swapped, or an instruct that is base
itself are refused whatever the record says, before anything is written; siblings that differ only in their body
pass."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

import vocabshift
from test_propagate import build_family
from test_propagate_errors import _refused
from vocabshift import errors
from vocabshift.packing import pack_ids
from vocabshift.propagation import core, lineage
from vocabshift.propagation.shards import Matrix


@pytest.fixture(scope="module")
def frozen(tmp_path_factory, tokenizers_en, tokenizers_ru):
    """CPT trained only the new rows (tied Qwen2, extend mode)."""
    return build_family(tmp_path_factory.mktemp("frozen"), "qwen2-tied", tokenizers_en["bytelevel"],
                        tokenizers_ru["bytelevel"])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizers_en, tokenizers_ru):
    """CPT trained every row (untied Llama, replace mode)."""
    return build_family(tmp_path_factory.mktemp("trained"), "llama-untied", tokenizers_en["sentencepiece"],
                        tokenizers_ru["sentencepiece"], mode="replace", cpt_rows="all")


def _without_cpt(folder, tmp_path):
    """A copy of `folder` whose record has no CPT entry (as after extend_vocabulary alone)."""
    copy = shutil.copytree(folder, tmp_path / "no-cpt")
    config = json.loads((copy / "config.json").read_text())
    config["vocabshift"]["cpt"] = []
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def _changed(folder, tmp_path, name, change):
    """A copy of `folder` with one stored tensor changed, resaved as a single file."""
    copy = shutil.copytree(folder, tmp_path / name)
    tensors = {}
    for shard in sorted(copy.glob("*.safetensors")):
        tensors.update(load_file(shard))
        shard.unlink()
    (copy / "model.safetensors.index.json").unlink()
    change(tensors)
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def test_instruct_that_is_base(frozen, tmp_path):
    _refused(tmp_path, errors.LineageError, "instruct=.*base' is the same model as base=.*base': LEP needs the "
             "instruct sibling fine-tuned from base; pass it as instruct", frozen["adapted"], frozen["base"],
             frozen["base"])
    same = _changed(frozen["base"], tmp_path, "copy-of-base", lambda tensors: None)  # other layout, same weights
    _refused(tmp_path, errors.LineageError, "instruct=.*copy-of-base' holds the same weights as base=",
             frozen["adapted"], frozen["base"], same)


def test_a_sibling_that_differs_only_in_its_body_passes(frozen, tmp_path):
    def body_only(tensors):
        tensors["model.norm.weight"] += 0.5

    sibling = _changed(frozen["base"], tmp_path, "body-only", body_only)
    out = vocabshift.propagate(frozen["adapted"], frozen["base"], sibling, output_dir=tmp_path / "out",
                               method="swap")
    assert torch.equal(AutoModelForCausalLM.from_pretrained(out).model.norm.weight,
                       AutoModelForCausalLM.from_pretrained(sibling).model.norm.weight)


@pytest.mark.parametrize("cpt", ["new rows only", "none recorded"])
def test_base_and_instruct_swapped_with_frozen_old_rows(frozen, tmp_path, cpt):
    adapted = frozen["adapted"] if cpt == "new rows only" else _without_cpt(frozen["adapted"], tmp_path)
    _refused(tmp_path, errors.LineageError, "adapted's rows of old tokens differ from base's and equal instruct's "
             f"\\(512 sampled rows\\): base and instruct look swapped; pass base='{frozen['base']}' and "
             f"instruct='{frozen['instruct']}'", adapted, frozen["instruct"], frozen["base"])


def _other_base(base, tmp_path):
    """Same architecture and tokenizer as `base`, other embedding rows (e.g. another checkpoint)."""
    def change(tensors):
        tensors["model.embed_tokens.weight"][::3] *= 1.01

    return _changed(base, tmp_path, "other-base", change)


def test_a_base_adapted_was_not_made_from(frozen, tmp_path):
    other = _other_base(frozen["base"], tmp_path)
    _refused(tmp_path, errors.LineageError, "adapted's rows of old tokens differ from base's \\(\\d+ of 512 sampled "
             "rows\\), although its record says CPT trained only the new rows: base=.*other-base' is not the model "
             "adapted was made from; pass as base the model adapted was extended from", frozen["adapted"], other,
             frozen["instruct"])
    _refused(tmp_path, errors.LineageError, "although its record shows no CPT \\(if a training loop of your own "
             "changed them, record it with vocabshift.record.add_cpt_entry", _without_cpt(frozen["adapted"], tmp_path),
             other, frozen["instruct"])


def test_swapped_after_cpt_of_every_row(trained, tmp_path):
    _refused(tmp_path, errors.LineageError, "adapted's rows of old tokens are closer to instruct's than to base's "
             "\\(relative distance [\\d.e-]+ vs [\\d.e-]+ over \\d+ sampled rows\\), although CPT with rows='all' "
             "started from base's: base and instruct look swapped", trained["adapted"], trained["instruct"],
             trained["base"])
    out = vocabshift.propagate(trained["adapted"], trained["base"], trained["instruct"], output_dir=tmp_path / "ok",
                               method="swap")
    assert (out / "config.json").is_file()


def test_the_check_reads_a_sample_of_embedding_rows_only(frozen, monkeypatch):
    models = {role: core._model(frozen[role], role, None, None) for role in ("adapted", "base", "instruct")}
    record = core._record(models["adapted"])
    reads = []
    gather = Matrix.gather
    monkeypatch.setattr(Matrix, "gather", lambda self, ids, **options: reads.append(len(ids)) or gather(
        self, ids, **options))
    lineage.check_rows(record, models["adapted"], models["base"], models["instruct"])
    assert reads == [512, 512, 512] and models["base"].input.rows > 512


def _with_record(folder, tmp_path, **changes):
    copy = shutil.copytree(folder, tmp_path / "damaged")
    config = json.loads((copy / "config.json").read_text())
    config["vocabshift"].update(changes)
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def test_a_damaged_record(trained, frozen, tmp_path):
    damaged = _with_record(trained["adapted"], tmp_path, shared="not-base64!")
    _refused(tmp_path, errors.RecordError, "vocabshift record in config.json is damaged: a packed id list is "
             "corrupted \\(Error: .*\\)\\. Restore config.json", damaged, trained["base"], trained["instruct"])
    shutil.rmtree(damaged)
    damaged = _with_record(trained["adapted"], tmp_path, shared=pack_ids([10**6, 0]))
    _refused(tmp_path, errors.RecordError, "is damaged: the rows adapted=.*damaged' copied from its source model "
             "\\(old_vocab_size, or 'shared' in replace mode\\) reach id 1000000 of its \\d+ rows, or lie below 0\\. "
             "Restore config.json", damaged, trained["base"], trained["instruct"])
