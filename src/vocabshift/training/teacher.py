"""The teacher of distillation: the original model, run on the same text in the old tokenization.

In extend mode with only the new rows training, the model itself is the original model when fed old ids (their
rows never change): one extra no-grad forward, no copy of any weight. Otherwise (replace mode, or old rows that
train) the body runs on the original rows' embeddings (`inputs_embeds`) and the original head turns its last hidden
state into logits: the model's own embedding modules, and whatever trains in them, are not used. extend_vocabulary
keeps the original matrices in replace mode (`embeddings.remember_original`: the tensors it replaced, not copies);
old rows that train are copied once, before training. A separate teacher model with the old tokenizer works too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..embeddings import find_embeddings, original_embeddings, original_tensors
from ..errors import TrainingSetupError
from ..record import find_record

__all__ = ["Teacher", "TeacherOutput"]


@dataclass(frozen=True)
class TeacherOutput:
    """The teacher's hidden states at one layer and its logits over the old vocabulary (`None` if not asked)."""

    hidden: torch.Tensor
    logits: torch.Tensor | None


class Teacher:
    """Runs the original model on the teacher side of a distillation batch, without gradients.

    Args:
        model (`PreTrainedModel`): the student (its own module, not a DDP wrapper), before embedding-only training
            has split or changed any row.
        old_rows (`int`): rows of the original embedding matrix (the teacher's logits are cut to them).
        frozen_old_rows (`bool`): whether rows below `old_rows` stay fixed during training.
        teacher_model (*optional*): a separate original model; used as is when given.

    Raises:
        `TrainingSetupError`: replace mode without the original rows in this process (pass `teacher_model`).
    """

    def __init__(self, model: Any, *, old_rows: int, frozen_old_rows: bool, teacher_model: Any = None) -> None:
        self.model, self.old_rows, self.teacher_model = model, old_rows, teacher_model
        self.original: dict[str, torch.Tensor | None] | None = None
        if teacher_model is not None:
            return
        record = find_record(model)
        if record is not None and record.mode == "replace":
            self.original = _originals(model)
        elif not frozen_old_rows:  # old rows will train: copy them now, while they are the original ones
            self.original = {role: None if t is None else t[:old_rows].clone()
                             for role, t in original_tensors(model).items()}

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, layer: int,
                 logits: bool) -> TeacherOutput:
        if self.original is None:
            model = self.teacher_model if self.teacher_model is not None else self.model
            out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
            return TeacherOutput(out.hidden_states[layer], out.logits[..., : self.old_rows] if logits else None)
        embeds = _lookup(find_embeddings(self.model).input, self.original["input"], input_ids)
        out = self.model(inputs_embeds=embeds, attention_mask=attention_mask, output_hidden_states=True)
        return TeacherOutput(out.hidden_states[layer], self._logits(out.hidden_states[-1]) if logits else None)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The original head on the last hidden state, with the model's final logit soft-capping (Gemma-2)."""
        head = self.original["head"] if self.original["head"] is not None else self.original["input"]
        scores = F.linear(hidden, head.to(hidden.dtype), self.original["bias"])
        cap = getattr(self.model.config.get_text_config(), "final_logit_softcapping", None)
        return scores if not cap else torch.tanh(scores / cap) * cap


def _lookup(module: torch.nn.Module, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """What `module` (an `nn.Embedding`, or Gemma's subclass that scales by `embed_scale`) gives for `ids` with
    `weight` as its matrix."""
    embeds = F.embedding(ids, weight, padding_idx=getattr(module, "padding_idx", None))
    scale = getattr(module, "embed_scale", None)
    return embeds if scale is None else embeds * torch.as_tensor(scale, dtype=embeds.dtype, device=embeds.device)


def _originals(model: Any) -> dict[str, torch.Tensor | None]:
    originals = original_embeddings(model)
    if originals is None:
        raise TrainingSetupError(
            "The model's vocabulary was replaced (mode='replace') but its original embedding rows are not in this "
            "process (it was saved and loaded again, or copied): pass teacher_model=<the original model, loaded "
            "with AutoModelForCausalLM.from_pretrained(record.source_model)>."
        )
    return originals
