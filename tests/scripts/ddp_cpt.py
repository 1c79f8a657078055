"""Run by tests/test_training_ddp.py under `accelerate launch --num_processes 2 --cpu`: a tiny embedding-only CPT.

Arguments: model folder (extended model + tokenizer + blocks.pt), output folder. Every rank writes a checksum of its
parameters and the shapes of its optimizer state; rank 0 saves the trained model.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

import vocabshift

source, output = Path(sys.argv[1]), Path(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(source).train()
args = TrainingArguments(output_dir=str(output), max_steps=5, per_device_train_batch_size=2,
                         gradient_accumulation_steps=2, learning_rate=1e-2, weight_decay=0.1,
                         lr_scheduler_type="constant", logging_steps=1,
                         report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
trainer = Trainer(model=model, args=args, train_dataset=torch.load(source / "blocks.pt"),
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
