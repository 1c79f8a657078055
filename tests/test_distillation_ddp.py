"""DistillationTrainer under DDP (2 CPU processes over gloo) gives the one-process result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import vocabshift
from conftest import make_model
from vocabshift.training import pack_texts

SCRIPT = Path(__file__).parent / "scripts" / "ddp_distill.py"


def _run(prefix: list[str], folder: Path, output: Path, per_device: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*prefix, str(SCRIPT), str(folder), str(output), str(per_device)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((output / "world.json").read_text())


@pytest.mark.slow
def test_ddp_distillation_matches_one_process(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    source = tokenizers_en["sentencepiece"]
    model = make_model("llama-untied", source)
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=source)
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "in")
    source.save_pretrained(tmp_path / "in" / "teacher")
    (tmp_path / "in" / "texts.json").write_text(json.dumps(pack_texts(ru_lines[:300], tokenizer, max_length=32)))
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    ddp = _run([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--mixed_precision", "no", "--dynamo_backend", "no"], tmp_path / "in", tmp_path / "ddp", 2)
    single = _run([sys.executable], tmp_path / "in", tmp_path / "single", 4)
    assert ddp == {"world_size": 2, "ddp": "DistributedDataParallel"} and single["world_size"] == 1
    leads = [json.loads((tmp_path / "ddp" / f"lead_{rank}.json").read_text()) for rank in (0, 1)]
    assert leads[0] is not None and leads[0] == leads[1]  # one schedule: the teacher reads alike on every process
    trained = [AutoModelForCausalLM.from_pretrained(tmp_path / run / "model") for run in ("ddp", "single")]
    new_ids = torch.tensor(vocabshift.get_record(trained[0]).new_ids)
    old = torch.ones(model.config.vocab_size, dtype=torch.bool)
    old[new_ids] = False
    for name, before in model.named_parameters():
        after = [dict(t.named_parameters())[name] for t in trained]
        assert torch.allclose(after[0], after[1], atol=1e-5, rtol=1e-4), name
        if before.shape[0] == model.config.vocab_size:
            assert torch.equal(after[0][old], before[old]) and not torch.equal(after[0], before), name
        else:
            assert torch.equal(after[0], before), name
