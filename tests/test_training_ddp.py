"""Embedding-only CPT under `accelerate launch --num_processes 2 --cpu` (DDP over gloo), in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

import vocabshift
from test_training_callback import blocks, extended

SCRIPT = Path(__file__).parent / "scripts" / "ddp_cpt.py"


def test_ddp_keeps_old_rows_and_body_bit_identical(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    model, tokenizer = extended("llama-untied", tokenizers_en, tokenizers_ru)
    model.save_pretrained(tmp_path / "in")
    torch.save(blocks(tokenizer, ru_lines), tmp_path / "in" / "blocks.pt")
    accelerate = Path(sys.executable).with_name("accelerate")
    command = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", str(SCRIPT), str(tmp_path / "in"),
               str(tmp_path / "out")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / "out" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2] and ranks[0]["ddp"] == "DistributedDataParallel"
    assert ranks[0]["sums"] == ranks[1]["sums"]  # both replicas took the same steps
    new_rows = [len(vocabshift.get_record(model).new_ids), model.config.hidden_size]
    assert ranks[0]["moments"] == [new_rows] * 4  # AdamW's two moments for the input rows and the head rows only
    before = dict(model.named_parameters())
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model")
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
