"""The probe's own training loop: every run reads the same batches in the same order, and trains its embeddings
with AdamW, scored on held-out text along the way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from huggingface_hub.utils import tqdm

from ..embeddings import find_embeddings
from ..record import get_record
from .cpt.freeze import freeze_for_embedding_training
from .distill.collator import default_collator
from .distill.objective import distillation_loss, teacher_targets
from .distill.pieces import first_pieces, piece_tree
from .distill.schedule import TeacherSchedule
from .distill.teacher import Teacher
from .distill.weights import DistillationWeights
from .metrics import bits_per_byte, eval_mode
from .texts import pack_texts

__all__ = ["Batches", "train_probe_run"]


class Batches:
    """The probe's batches, the same for every run, and the teacher (the model passed in, which never changes)."""

    def __init__(self, teacher_model: Any, tokenizer: Any, source: Any, texts: Sequence[str], steps: int,
                 batch_size: int, length: int, seed: int) -> None:
        packed = pack_texts(texts, tokenizer, max_length=length)
        generator = torch.Generator().manual_seed(seed)
        order = torch.cat([torch.randperm(len(packed), generator=generator, device="cpu")
                           for _ in range(-(-steps * batch_size // len(packed)))]).tolist()
        collate = default_collator(teacher_model, None, tokenizer, source, length)
        self.batches = [collate([packed[i] for i in order[step * batch_size : (step + 1) * batch_size]])
                        for step in range(steps)]
        self.teacher = Teacher(teacher_model, old_rows=len(source), frozen_old_rows=True, dtype="auto")


def train_probe_run(model: Any, tokenizer: Any, data: Batches, weights: DistillationWeights,
                    held_out: Sequence[str], *, rows: str, eval_every: int, lr: float, weight_decay: float,
                    seed: int, scored_window: int) -> list[tuple[int, float]]:
    """Embedding-only AdamW steps; held-out bits per byte (windows of `scored_window` tokens) at step 0, every
    `eval_every` steps, and the end."""
    def score() -> float:  # in eval mode, whatever the model's
        return bits_per_byte(model, tokenizer, held_out, context_length=scored_window)

    trainable = freeze_for_embedding_training(model, rows=rows)
    optimizer = torch.optim.AdamW(trainable.parameters, lr=lr, weight_decay=weight_decay)
    device = trainable.parameters[0].device
    record, rows_count = get_record(model), find_embeddings(model).num_rows
    pieces = first_pieces(record, rows_count, device)
    tree = piece_tree(record, rows_count, device) if weights.piece_tree else None
    curve, schedule = [(0, score())], TeacherSchedule(weights)
    model.train()
    with trainable, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for step, batch in enumerate(tqdm(data.batches, desc="Embedding-only steps", leave=False), 1):
            batch = {name: tensor.to(device) for name, tensor in batch.items()}
            count = schedule.count(len(batch["input_ids"]))
            with eval_mode(data.teacher.model):
                targets = teacher_targets(data.teacher, batch, weights, tree=tree, count=count)
            loss, parts = distillation_loss(model, targets, batch, weights, first_pieces=pieces, tree=tree,
                                            count=count)
            loss.backward()
            schedule.update(parts.get("teacher_lead"), parts.get("teacher_text_lead"))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % eval_every == 0 or step == len(data.batches):
                curve.append((step, score()))
    return curve
