"""Embedding-only CPT with the body sharded by FSDP2 (`fully_shard`), 2 CPU processes over gloo, in a subprocess.

accelerate runs DDP instead of FSDP on machines without GPUs, so this goes through a plain loop over the library's
functions (tests/scripts/fsdp_cpt.py) rather than the Trainer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

import vocabshift
from test_training_callback import blocks, extended
from test_training_freeze import old_mask
from vocabshift.training import freeze_for_embedding_training

SCRIPT = Path(__file__).parent / "scripts" / "fsdp_cpt.py"
STEPS, BATCH = 3, 4  # as in the script: one SGD step, then STEPS AdamW steps


def one_process(model, batches) -> tuple[dict[str, list[torch.Tensor]], dict[str, torch.Tensor]]:
    """The same run on one process, each step on the whole global batch: the first step's gradients and SGD step,
    and the state dict after the AdamW steps."""
    model.train()
    with freeze_for_embedding_training(model, rows="new") as trainable:
        optimizer = torch.optim.AdamW(trainable.parameters, lr=1e-2, weight_decay=0.1)
        for step in range(STEPS + 1):
            ids = torch.stack([b["input_ids"] for b in batches[step * BATCH:(step + 1) * BATCH]])
            model(input_ids=ids, labels=ids).loss.backward()
            if step == 0:  # as the script: one SGD step (lr 1), its gradients and parameters kept
                first = {"gradients": [p.grad.clone() for p in trainable.parameters]}
                torch.optim.SGD(trainable.parameters, lr=1.0).step()
                first["after_sgd"] = [p.detach().clone() for p in trainable.parameters]
            else:
                optimizer.step()
            optimizer.zero_grad()
    return first, model.state_dict()


def assert_same_reduction(actual: list[torch.Tensor], expected: list[torch.Tensor], what: str) -> None:
    """Equal up to the order of float sums: a gradient summed instead of averaged over the 2 processes is 2x."""
    assert [a.shape for a in actual] == [e.shape for e in expected], what
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5 * e.abs().max().item(), msg=what)


def test_fsdp2_trains_the_new_rows_as_one_process_does(tokenizers_en, tokenizers_ru, ru_lines, tmp_path):
    models = {}
    for architecture in ("llama-untied", "qwen2-tied"):
        model, tokenizer = extended(architecture, tokenizers_en, tokenizers_ru)
        model.save_pretrained(tmp_path / architecture)
        torch.save(batches := blocks(tokenizer, ru_lines, count=(STEPS + 1) * BATCH),
                   tmp_path / architecture / "blocks.pt")
        models[architecture] = (model, batches)
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--standalone", "--nproc_per_node", "2", str(SCRIPT), str(tmp_path),
               *(str(tmp_path / a) for a in models)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    for architecture, (model, batches) in models.items():
        report = torch.load(tmp_path / f"{architecture}.pt")
        assert report["world_size"] == 2 and report["sharded"] and report["body_sharded"]
        before = {k: v.detach().clone() for k, v in model.state_dict().items()}
        first, expected = one_process(model, batches)
        assert any(g.abs().max() > 0 for g in first["gradients"])
        assert_same_reduction(report["gradients"], first["gradients"], f"{architecture}: gradients")
        assert_same_reduction(report["after_sgd"], first["after_sgd"], f"{architecture}: after one SGD step")
        sharded, folded = report["before_fold"], report["after_fold"]
        assert list(folded) == list(sharded) == list(expected)  # plain keys: no trainable_rows
        old = old_mask(model)
        for name, value in folded.items():
            assert torch.equal(value, sharded[name]), f"{name}: fold() and the state-dict hook disagree"
            # Sums of gradients in another order; Adam's normalization lifts their rounding in rows with tiny
            # gradients to a small fraction of one step (lr 1e-2).
            torch.testing.assert_close(value, expected[name], rtol=1e-4, atol=1e-4)
            if name.endswith(("embed_tokens.weight", "lm_head.weight")):
                assert torch.equal(value[old], before[name][old]), f"old rows of {name} moved"
                assert not torch.equal(value[~old], before[name][~old]), f"new rows of {name} did not train"
            else:
                assert torch.equal(value, before[name]), f"body parameter {name} moved"
        new = folded["model.embed_tokens.weight"][~old].norm(dim=1).mean().item()
        assert abs(report["norms_split"]["embed_new_row_norm"] - new) < 1e-5
        assert vocabshift.get_record(model).new_ids  # the record came through save_pretrained


SHARDED_FIRST = """
import sys
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM
from vocabshift.errors import TrainingSetupError
from vocabshift.training import freeze_for_embedding_training
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
fully_shard(model)
try:
    freeze_for_embedding_training(model, rows="new")
except TrainingSetupError as error:
    print("refused:", error)
print("every row:", [type(p).__name__ for p in freeze_for_embedding_training(model, rows="all").parameters])
"""


def test_refuses_to_split_rows_of_a_model_sharded_first(tokenizers_en, tokenizers_ru, tmp_path):
    """fully_shard before the split ended in DTensor's RuntimeError (mixed torch.Tensor and DTensor) with the body
    already frozen; the order is named now. rows='all' needs no split and works on the sharded model."""
    model, _ = extended("qwen2-tied", tokenizers_en, tokenizers_ru)
    model.save_pretrained(tmp_path / "model")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SHARDED_FIRST, str(tmp_path / "model")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: The input embeddings are already sharded (a DTensor: fully_shard ran on the model first)" \
        in done.stdout and "call freeze_for_embedding_training(model, rows=...) before fully_shard" in done.stdout
    assert "every row: ['DTensor']" in done.stdout
