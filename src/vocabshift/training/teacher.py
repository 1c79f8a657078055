"""The teacher of distillation: the original model, run on the same text in the old tokenization.

In extend mode with only the new rows training, the model itself is the original model when fed old ids (their
rows never change): one extra no-grad forward, no copy of any weight. Otherwise (replace mode, or old rows that
train) the original embedding matrices stand in for the current ones through `torch.func.functional_call`, which
leaves the model untouched; extend_vocabulary keeps those matrices in replace mode (`embeddings.remember_original`),
as the tensors it replaced, not copies. A separate teacher model with the old tokenizer works too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.func import functional_call

from ..embeddings import embedding_tensors, original_embeddings
from ..errors import TrainingSetupError

__all__ = ["Teacher", "TeacherOutput"]


@dataclass(frozen=True)
class TeacherOutput:
    """The teacher's hidden states at one layer and its logits over the old vocabulary (`None` if not asked)."""

    hidden: torch.Tensor
    logits: torch.Tensor | None


class Teacher:
    """Runs the original model on the teacher side of a distillation batch, without gradients.

    Args:
        model (`PreTrainedModel`): the student (its own unwrapped module, not a DDP wrapper).
        old_rows (`int`): rows of the original embedding matrix (the teacher's logits are cut to them).
        frozen_old_rows (`bool`): whether rows below `old_rows` stay fixed during training.
        teacher_model (*optional*): a separate original model; used as is when given.
    """

    def __init__(self, model: Any, *, old_rows: int, frozen_old_rows: bool, teacher_model: Any = None) -> None:
        self.model, self.old_rows, self.teacher_model = model, old_rows, teacher_model
        self.substitutes: dict[str, torch.Tensor] | None = None
        if teacher_model is not None:
            return
        record = getattr(model.config, "vocabshift", None) or {}
        if record.get("mode") == "replace":
            self.substitutes = _originals(model)
        elif not frozen_old_rows:  # old rows will train: snapshot them now, while they are the original ones
            self.substitutes = {name: tensor.detach()[:old_rows].clone() for name, tensor in embedding_tensors(model)}

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, layer: int,
                 logits: bool) -> TeacherOutput:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "output_hidden_states": True}
        if self.teacher_model is not None:
            out = self.teacher_model(**inputs)
        elif self.substitutes is not None:
            out = functional_call(self.model, self.substitutes, args=(), kwargs=inputs, strict=False)
        else:
            out = self.model(**inputs)
        return TeacherOutput(out.hidden_states[layer], out.logits[..., : self.old_rows] if logits else None)


def _originals(model: Any) -> dict[str, torch.Tensor]:
    originals = original_embeddings(model)
    if originals is None:
        raise TrainingSetupError(
            "The model's vocabulary was replaced (mode='replace') but its original embedding rows are not in this "
            "process (it was saved and loaded again, or copied): pass teacher_model=<the original model, loaded "
            "with AutoModelForCausalLM.from_pretrained(record.source_model)>."
        )
    return originals
