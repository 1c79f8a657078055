"""Embedding-only CPT under `accelerate launch --num_processes 2 --cpu` (DDP over gloo), in a subprocess."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import vocabshift
from test_training_callback import blocks, extended
from test_training_fsdp import assert_same_reduction
from vocabshift.training import freeze_for_embedding_training

SCRIPT = Path(__file__).parent / "scripts" / "ddp_cpt.py"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def launch(folder: Path) -> list[str]:
    """The script under `accelerate launch`, 2 CPU processes (DDP over gloo), on folder/in, writing folder/out."""
    accelerate = Path(sys.executable).with_name("accelerate")
    return [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no", str(SCRIPT), str(folder / "in"), str(folder / "out")]


@pytest.fixture(scope="module")
def ddp_run(tokenizers_en, tokenizers_ru, ru_lines, tmp_path_factory):
    """One launch of the script for this module's tests: the model before training, its blocks, the folder."""
    folder = tmp_path_factory.mktemp("ddp")
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.save_pretrained(folder / "in")
    torch.save(data := blocks(tokenizer, ru_lines), folder / "in" / "blocks.pt")
    done = subprocess.run(launch(folder), env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return model, data, folder


def test_ddp_keeps_old_rows_and_body_bit_identical(ddp_run):
    model, _, folder = ddp_run
    ranks = [json.loads((folder / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2] and ranks[0]["ddp"] == "DistributedDataParallel"
    assert ranks[0]["sums"] == ranks[1]["sums"]  # both replicas took the same steps
    new_rows = [len(vocabshift.get_record(model).new_ids), model.config.hidden_size]
    assert ranks[0]["moments"] == [new_rows] * 4  # AdamW's two moments for the input rows and the head rows only
    before = dict(model.named_parameters())
    trained = AutoModelForCausalLM.from_pretrained(folder / "out" / "model")
    record = vocabshift.get_record(trained)
    new_ids = torch.tensor(record.new_ids)
    old = torch.ones(trained.config.vocab_size, dtype=torch.bool)
    old[new_ids] = False
    for name, parameter in trained.named_parameters():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(parameter[old], before[name][old]) and not torch.equal(parameter, before[name]), name
        else:
            assert torch.equal(parameter, before[name]), name
    assert record.cpt[-1]["world_size"] == 2 and record.cpt[-1]["total_batch_size"] == 8
    assert record.cpt[-1]["tokens_seen"] == 5 * 8 * 32


def one_sgd_step(model, batch) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One process, the whole global batch: the trainable rows' gradients, and the parameters after an SGD step."""
    with freeze_for_embedding_training(model, rows="new") as trainable:
        ids = torch.stack([b["input_ids"] for b in batch])
        model(input_ids=ids, labels=ids).loss.backward()
        gradients = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        torch.optim.SGD(trainable.parameters, lr=1.0).step()
    return gradients, {n: p.detach().clone() for n, p in model.named_parameters()}


def test_ddp_gradients_are_the_mean_over_the_global_batch(ddp_run):
    """Checked against one process at float tolerance, where AdamW's normalization would hide a factor."""
    model, data, folder = ddp_run
    gradients, after = one_sgd_step(copy.deepcopy(model), data[:8])
    for rank in (0, 1):
        ran = torch.load(folder / "out" / f"sgd{rank}.pt")
        assert sorted(ran["gradients"]) == sorted(gradients) and len(gradients) == 2  # input rows, head rows
        assert_same_reduction([ran["gradients"][n] for n in gradients], list(gradients.values()), "gradients")
        assert_same_reduction([ran["after_sgd"][n] for n in after], list(after.values()), "after one SGD step")


def _train_under_torchrun(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, *options):
    model, tokenizer = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "in")
    (tmp_path / "texts.txt").write_text("\n".join(ru_lines[:64]) + "\n", encoding="utf-8")
    torchrun = Path(sys.executable).with_name("torchrun")
    return subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "vocabshift", "train",
                           str(tmp_path / "in"), str(tmp_path / "texts.txt"), str(tmp_path / "out"), "--batch-size",
                           "2", "--context-length", "32", "--objective", "next_token", *options],
                          env={**ENV, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}, capture_output=True, text=True,
                          timeout=300)


def test_the_cli_under_torchrun_trains_one_run_and_writes_once(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    """`torchrun -m vocabshift train` on a machine without accelerator: one DDP run over gloo (each process takes
    half of each global batch), one result line, one output folder written by the main process."""
    done = _train_under_torchrun(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, "--max-steps", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count(f"{tmp_path / 'out'}: 2 embedding-only steps") == 1, done.stdout
    entry = vocabshift.ExtensionRecord.from_dict(json.loads((tmp_path / "out" / "config.json").read_text())[
        "vocabshift"]).cpt[-1]
    assert entry["steps"] == 2 and entry["tokens_seen"] == 2 * 2 * 2 * 32  # steps x processes x batch x length
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out", "texts.txt"]


def test_a_diverged_run_under_torchrun_stops_every_process_at_one_step(tokenizers_en, tokenizers_ru, ru_lines,
                                                                         tmp_path):
    """Every process finds the divergence at the same step (the check is summed over them: a process that went on
    alone would wait forever in the next collective), and nothing is written."""
    done = _train_under_torchrun(tokenizers_en, tokenizers_ru, ru_lines, tmp_path, "--max-steps", "4",
                                 "--learning-rate", "1e30")
    assert done.returncode != 0 and "Training diverged at step 2: " in done.stderr, done.stderr[-4000:]
    assert "Traceback" not in done.stderr.split("Training diverged")[0], done.stderr[-4000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "texts.txt"]
