"""A short SmolLM2 extend + embedding-only train on one device; run by scripts/check_gpu.sh on machines with a GPU.

SmolLM2-135M-Instruct moves to `--device`, is extended with the cached 16k Russian tokenizer (`subword`) there,
and trains its new rows for `--steps` Trainer steps with `EmbeddingOnlyCallback` (bf16 autocast on cuda). It checks
that every parameter stays on the device, that the old rows and the body are bit-identical, and that held-out bits
per byte went down; it prints the figures. Exit status 1 on a failed check.

    python scripts/gpu_smoke.py --device cuda [--steps 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

import vocabshift
from vocabshift.training import bits_per_byte, pack_texts
from vocabshift.training.cpt import embedding_parameters
from vocabshift_testing.corpora import held_out_split, read_corpus, smollm2, target_tokenizer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", required=True)
    parser.add_argument("--steps", type=int, default=30)
    options = parser.parse_args()
    device = torch.device(options.device)
    source = AutoTokenizer.from_pretrained(smollm2())
    model = AutoModelForCausalLM.from_pretrained(smollm2(), dtype=torch.float32).to(device)
    tokenizer = model.extend_vocabulary(target_tokenizer(source, "ru"), method="subword", source_tokenizer=source)
    train, held = held_out_split(read_corpus("ru"), 200)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    start = bits_per_byte(model.eval(), tokenizer, held[:50], context_length=128)
    blocks = pack_texts(train[:3000], tokenizer, max_length=128, blocks=True)
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(folder, max_steps=options.steps, per_device_train_batch_size=8, learning_rate=1e-3,
                                 lr_scheduler_type="constant", weight_decay=0.1, report_to=[], save_strategy="no",
                                 use_cpu=device.type == "cpu", bf16=device.type == "cuda", disable_tqdm=True)
        Trainer(model=model.train(), args=args, train_dataset=[{"input_ids": b, "labels": b} for b in blocks],
                callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")]).train()
    end = bits_per_byte(model.eval(), tokenizer, held[:50], context_length=128)
    failures = _check(model, before, device) + ([] if end < start else [f"bits per byte rose: {start} -> {end}"])
    print(f"{device}: held-out bits per byte {start:.3f} -> {end:.3f} after {options.steps} steps")
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


def _check(model, before: dict, device: torch.device) -> list[str]:
    failures = [f"{n} is on {p.device}" for n, p in model.named_parameters() if p.device.type != device.type]
    old = torch.ones(model.config.vocab_size, dtype=torch.bool, device=device)
    old[vocabshift.get_record(model).new_ids] = False
    embeddings = {id(p) for p in embedding_parameters(model)}
    for name, parameter in model.named_parameters():
        now, then = (parameter[old], before[name][old]) if id(parameter) in embeddings else (parameter, before[name])
        if not torch.equal(now, then):
            failures.append(f"{name}: old rows or body moved")
    return failures


if __name__ == "__main__":
    sys.exit(main())
