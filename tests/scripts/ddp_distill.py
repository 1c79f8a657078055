"""Run by tests/test_distillation_ddp.py, under `accelerate launch --num_processes 2` (DDP over gloo) or alone.

Arguments: input folder (extended model + tokenizer, `teacher/` tokenizer, texts.json), output folder, sequences
per device. The global batch is 4 sequences either way; rank 0 saves the trained model.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments

import vocabshift

source, output, per_device = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(source)
args = TrainingArguments(output_dir=str(output), max_steps=4, per_device_train_batch_size=per_device,
                         learning_rate=1e-2, lr_scheduler_type="constant", logging_steps=1, report_to=[],
                         save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
trainer = vocabshift.DistillationTrainer(
    model=model, args=args, train_dataset=json.loads((source / "texts.json").read_text()),
    processing_class=AutoTokenizer.from_pretrained(source), teacher_tokenizer=AutoTokenizer.from_pretrained(
        source / "teacher"), max_length=32,
    weights=vocabshift.DistillationWeights(hidden=1, chunk=1, next_piece=1, piece_tree=1, next_token=1, teacher_share=1,
                                           adaptive_share=False),
    callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
trainer.train()
(output / f"lead_{trainer.args.process_index}.json").write_text(json.dumps(trainer.schedule.lead))
if trainer.is_world_process_zero():
    (output / "world.json").write_text(json.dumps({"world_size": trainer.args.world_size,
                                                   "ddp": type(trainer.model_wrapped).__name__}))
    model.save_pretrained(output / "model")
trainer.accelerator.wait_for_everyone()  # no rank exits, tearing gloo down under the others, while rank 0 saves
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
