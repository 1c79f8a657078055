"""Run by tests/test_training_ddp.py under `accelerate launch --num_processes 2 --cpu`: a tiny embedding-only CPT.

Arguments: model folder (extended model + tokenizer + blocks.pt), output folder. First one SGD step (lr 1, no
clipping) over the first 8 blocks, one global batch: every rank saves the trainable rows' gradients as the optimizer
gets them and their values after the step. Then a fresh model trains 5 AdamW steps: every rank writes a checksum of
its parameters and the shapes of its optimizer state; rank 0 saves the trained model.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

import vocabshift


class Gradients(TrainerCallback):
    """The trainable parameters' gradients as the optimizer gets them (after DDP's reduction)."""

    def __init__(self):
        self.gradients = {}

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.gradients = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def arguments(**overrides) -> TrainingArguments:
    options = dict(output_dir=str(output), max_steps=5, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                   learning_rate=1e-2, weight_decay=0.1, lr_scheduler_type="constant", logging_steps=1,
                   report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    return TrainingArguments(**options | overrides)


source, output = Path(sys.argv[1]), Path(sys.argv[2])
output.mkdir(parents=True, exist_ok=True)
blocks = torch.load(source / "blocks.pt")
model, gradients = AutoModelForCausalLM.from_pretrained(source).train(), Gradients()
trainer = Trainer(model=model, args=arguments(max_steps=1, optim="sgd", learning_rate=1.0, weight_decay=0.0,
                                              max_grad_norm=0.0),
                  train_dataset=blocks[:8], callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new"), gradients])
trainer.train()
after = {n: p.detach().clone() for n, p in model.named_parameters()}
torch.save({"gradients": gradients.gradients, "after_sgd": after}, output / f"sgd{trainer.args.process_index}.pt")

model = AutoModelForCausalLM.from_pretrained(source).train()
trainer = Trainer(model=model, args=arguments(), train_dataset=blocks,
                  callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
trainer.train()
checksums = {name: float(p.detach().double().sum()) for name, p in model.named_parameters()}
rank = trainer.args.process_index
moments = sorted(list(t.shape) for s in trainer.optimizer.state.values() for t in s.values() if t.dim())
(output / f"rank{rank}.json").write_text(json.dumps({"world_size": trainer.args.world_size, "sums": checksums,
                                                     "ddp": type(trainer.model_wrapped).__name__,
                                                     "moments": moments}))
if trainer.is_world_process_zero():
    model.save_pretrained(output / "model")
trainer.accelerator.wait_for_everyone()  # no rank exits, tearing gloo down under the others, while rank 0 saves
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
