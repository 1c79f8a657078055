"""`vocabshift train`, `evaluate` and `probe`, run as subprocesses on tiny inputs."""

from __future__ import annotations

import json
import lzma

import pytest
import torch
from transformers import AutoModelForCausalLM

import vocabshift
from conftest import make_model
from test_cli import run
from vocabshift.cli_train import _finals


def _texts(path, lines):
    with lzma.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return str(path)


def test_train_then_evaluate(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, ru_held):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "extended")
    before = model.get_input_embeddings().weight.detach().clone()
    words = ["train", str(tmp_path / "extended"), _texts(tmp_path / "train.txt.xz", ru_lines[:400]),
             str(tmp_path / "trained"), "--max-steps", "3", "--batch-size", "2", "--context-length", "32",
             "--objective", "next_token", "--max-shard-size", "60KB"]
    result = run(*words)
    assert "3 embedding-only steps, final loss " in result.stdout and "cross-entropy" not in result.stdout
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "trained")
    record = vocabshift.get_record(trained)
    assert record.cpt[-1]["steps"] == 3 and (tmp_path / "trained" / "cpt_loss.png").read_bytes()[:4] == b"\x89PNG"
    assert record.cpt[-1]["objective"] == {"name": "next_token"}
    assert record.cpt[-1]["command"] == ["vocabshift", *words]  # as it was run, in the words the extend command has
    after, new_ids = trained.get_input_embeddings().weight, torch.tensor(record.new_ids)
    old = torch.ones(len(before), dtype=torch.bool)
    old[new_ids] = False
    assert torch.equal(after[old], before[old]) and not torch.equal(after[new_ids], before[new_ids])
    assert len(list((tmp_path / "trained").glob("model-*.safetensors"))) > 1  # --max-shard-size, as extend's

    held = _texts(tmp_path / "held.txt.xz", ru_held[:10])
    result = run("evaluate", str(tmp_path / "trained"), held, "--add-to-record", "--batch-size", "1")
    assert result.stdout.startswith("| model | tokens/word | bits/byte")
    config = json.loads((tmp_path / "trained" / "config.json").read_text())
    assert config["vocabshift"]["evaluations"][-1]["num_texts"] == 10


def test_train_says_where_its_final_loss_was_logged():
    """`logging_steps` is max_steps // 20: at 45 steps the last loss is logged at step 44, and the summary says so
    (it read as step 45's)."""
    curves = {"loss": [(42, 2.5), (44, 2.25)], "next-token cross-entropy": [(44, 2.0)]}
    assert _finals(curves, 45) == ("final loss 2.2500 (logged at step 44), final next-token cross-entropy 2.0000 "
                                   "(logged at step 44)")
    assert _finals(curves, 44) == "final loss 2.2500, final next-token cross-entropy 2.0000"
    assert _finals({}, 44) == "no loss logged"


@pytest.mark.slow
def test_train_with_distillation(tmp_path, tokenizers_en, tokenizers_ru, ru_lines, en_lines):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "extended")
    source.save_pretrained(tmp_path / "source")
    texts = _texts(tmp_path / "train.txt.xz", ru_lines[:400])
    result = run("train", str(tmp_path / "extended"), texts, str(tmp_path / "trained"), "--max-steps", "2",
                 "--batch-size", "2", "--context-length", "32",  # auto: extend mode, new rows -> distillation
                 "--teacher-tokenizer", str(tmp_path / "source"), "--teacher-share", "0.5",
                 "--teacher-dtype", "bfloat16", "--source-weight", "0.5",
                 "--source-texts", _texts(tmp_path / "en.txt.xz", en_lines[:50]))
    assert "2 embedding-only steps, final loss " in result.stdout  # the objective, and the comparable figure:
    assert ", final next-token cross-entropy " in result.stdout
    cpt = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(tmp_path / "trained")).cpt[-1]
    assert cpt["objective"]["name"] == "distillation" and cpt["objective"]["teacher_share"] == 0.5
    assert cpt["objective"]["teacher_dtype"] == "bfloat16" and cpt["objective"]["source"] == 0.5
    assert cpt["steps"] == 2 and cpt["lr_scheduler"] == "constant"
    run("train", str(tmp_path / "extended"), texts, str(tmp_path / "all"), "--max-steps", "1", "--batch-size", "2",
        "--context-length", "32", "--rows", "all",  # auto: the old rows train, no teacher at hand -> cross-entropy
        "--lr-scheduler-type", "linear")
    all_rows = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(tmp_path / "all")).cpt[-1]
    assert all_rows["objective"] == {"name": "next_token"} and all_rows["lr_scheduler"] == "linear"
    run("train", str(tmp_path / "all"), texts, str(tmp_path / "again"), "--max-steps", "1", "--batch-size", "2",
        "--context-length", "32")  # auto: an earlier run trained the old rows, so the model is no teacher
    again = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(tmp_path / "again")).cpt[-1]
    assert again["objective"] == {"name": "next_token"} and again["rows"] == "new"
    wrong = run("train", str(tmp_path / "all"), texts, str(tmp_path / "x"), "--objective", "distillation",
                "--teacher-tokenizer", str(tmp_path / "source"), check=False)
    assert wrong.returncode == 1 and "cannot be its own teacher: an earlier embedding-only run (rows='all'" \
        in wrong.stderr
    wrong = run("train", str(tmp_path / "extended"), texts, str(tmp_path / "x"), "--objective", "distillation",
                "--teacher-tokenizer", str(tmp_path / "extended"), check=False)
    assert wrong.returncode == 1 and "is not the tokenizer the model was extended from" in wrong.stderr
    wrong = run("train", str(tmp_path / "extended"), texts, str(tmp_path / "x"), "--objective", "distillation",
                "--teacher-tokenizer", str(tmp_path / "source"), "--source-texts", str(tmp_path / "no.txt"),
                check=False)
    assert wrong.returncode == 1 and "--source-texts=" in wrong.stderr and not (tmp_path / "x").exists()


def test_probe(tmp_path, tokenizers_en, tokenizers_ru, ru_lines):
    source = tokenizers_en["sentencepiece"]
    vocabshift.save_pretrained_atomic(make_model("llama-untied", source), source, tmp_path / "base")
    tokenizers_ru["sentencepiece"].save_pretrained(tmp_path / "ru")
    result = run("probe", str(tmp_path / "base"), str(tmp_path / "ru"), _texts(tmp_path / "ru.txt.xz", ru_lines[:300]),
                 "--methods", "mean", "subword", "--held-out", "20", "--steps", "2", "--eval-every", "1",
                 "--batch-size", "2", "--context-length", "32", "--output-dir", str(tmp_path / "probe"))
    assert "| rank | method |" in result.stdout and "after 2 steps" in result.stdout
    assert sorted(p.name for p in (tmp_path / "probe").iterdir()) == ["probe.md", "probe.png"]


def test_bad_text_file_is_refused(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    result = run("evaluate", str(tmp_path), str(tmp_path / "latin1.txt"), check=False)
    assert result.returncode == 1 and "latin1.txt' is not UTF-8 text" in result.stderr
    result = run("train", str(tmp_path / "no-model"), str(tmp_path / "missing.txt"), str(tmp_path / "out"), check=False)
    assert result.returncode == 1 and "missing.txt' does not exist" in result.stderr
