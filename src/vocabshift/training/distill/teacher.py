"""The teacher of distillation: the original model, run on the same text in the old tokenization.

In extend mode with only the new rows training, the model itself is the original model when fed old ids (their
rows never change): one extra no-grad forward, no copy of any weight. Otherwise (replace mode, or old rows that
train) the body runs on the original rows' embeddings (`inputs_embeds`) and the original head turns its last hidden
state into logits: the model's own embedding modules, and whatever trains in them, are not used. In replace mode
extend_vocabulary keeps the original matrices on the model (`embeddings.OriginalEmbeddings`: the tensors it
replaced, not copies); old rows that train are copied once, before training. A separate teacher model with the old
tokenizer works too.

The teacher only infers, so it can run in a lower precision than the student trains in (`dtype`, under autocast):
on GPUs and on CPUs with bf16 matrix units its forward, the largest part of a distillation step's extra cost, gets
much faster. With `"auto"` (`DistillationTrainer`'s default) a float32 model's teacher runs in bfloat16 where the
device computes it natively (`native_bf16`), and in the model's own dtype elsewhere, where emulated bfloat16 would be
slower. Its log probabilities are still normalized in float32.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from ..._typing import Model
from ...embeddings import MAX_PADDING_ROWS, OriginalEmbeddings, find_embeddings, original_embeddings
from ...errors import InvalidArgumentError, TrainingSetupError
from ...record import find_record
from ...vocab.load import fingerprint

__all__ = ["Teacher", "TeacherOutput", "changed_by_training", "check_teacher", "native_bf16"]


@dataclass(frozen=True)
class TeacherOutput:
    """The teacher's hidden states at one layer, at the last layer (after the final norm), and its logits over the
    old vocabulary at every position (`None` if not asked; `Teacher.logits` gives them for chosen positions)."""

    hidden: torch.Tensor
    last_hidden: torch.Tensor
    logits: torch.Tensor | None


class Teacher:
    """Runs the original model on the teacher side of a distillation batch, without gradients.

    Args:
        model (`PreTrainedModel`): the student (its own module, not a DDP wrapper), before embedding-only training
            has split or changed any row.
        old_rows (`int`): tokens of the original vocabulary: the teacher's logits are over them (padding rows of the
            original matrix, which no text ever produces, and new tokens placed there are left out).
        frozen_old_rows (`bool`): whether rows below `old_rows` stay fixed during training.
        teacher_model (*optional*): a separate original model; used as is when given.
        dtype (`torch.dtype`, `"auto"` or `None`, defaults to `None`): run the teacher under `torch.autocast` in
            this dtype (`torch.bfloat16`, `torch.float16`); `None` runs it in the model's own dtype (or the autocast
            already in force); `"auto"` (`DistillationTrainer`'s default) chooses at the first call:
            `torch.bfloat16` for a float32 model on a device that computes it natively (`native_bf16`), else `None`.

    Raises:
        `TrainingSetupError`: replace mode, and the model does not carry its original rows (pass `teacher_model`).
        `InvalidArgumentError`: a `dtype` that is not a floating-point `torch.dtype`, `"auto"` or `None`.
    """

    def __init__(self, model: Model, *, old_rows: int, frozen_old_rows: bool, teacher_model: Model | None = None,
                 dtype: torch.dtype | Literal["auto"] | None = None) -> None:
        if dtype not in (None, "auto") and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
            raise InvalidArgumentError(f"teacher dtype={dtype!r} is invalid: pass a floating-point torch.dtype such "
                                       "as torch.bfloat16, None for the model's own, or 'auto' (bfloat16 where the "
                                       "device computes it natively).")
        self.model, self.old_rows, self.teacher_model, self.dtype = model, old_rows, teacher_model, dtype
        self.original: OriginalEmbeddings | None = None
        if teacher_model is not None:
            return
        record = find_record(model)
        if record is not None and record.mode == "replace":
            self.original = _originals(model)
        elif not frozen_old_rows:  # old rows will train: copy them now, while they are the original ones
            self.original = OriginalEmbeddings.of(model).first_rows(old_rows)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, layer: int,
                 logits: bool) -> TeacherOutput:
        """Hidden states at `layer` and at the last layer and, if asked, logits over the old vocabulary; the model's
        own head runs on one position only (`logits_to_keep=1`): the teacher's logits come from `logits`. The model
        runs in eval mode (no dropout, no NEFTune noise), whatever mode it trains in."""
        model = self.teacher_model if self.teacher_model is not None else self.model
        inputs = {"input_ids": input_ids}
        if self.original is not None:
            inputs = {"inputs_embeds": _lookup(find_embeddings(self.model).input, self.original.input, input_ids)}
        with self.precision(input_ids.device), _inferring(model):
            out = model(**inputs, attention_mask=attention_mask, output_hidden_states=True, logits_to_keep=1)
            last = out.hidden_states[-1]
            return TeacherOutput(out.hidden_states[layer], last, self.logits(last) if logits else None)

    @property
    def _chosen(self) -> torch.dtype | None:
        """The dtype the teacher runs in, `None` for the model's own (and for `"auto"` before the first call)."""
        return None if self.dtype == "auto" else self.dtype

    def precision(self, device: torch.device) -> Any:
        """The context the teacher runs in on `device`: autocast to its dtype (`"auto"` is chosen at the first call),
        or nothing for the model's own. Other forwards that only infer through the body (the source replay) use it
        too."""
        if self.dtype == "auto":
            self.dtype = _auto_dtype(self.teacher_model if self.teacher_model is not None else self.model, device)
        dtype = self._chosen
        return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The original head's rows of the old vocabulary on last-layer hidden states, with the model's final
        logit soft-capping (Gemma-2)."""
        if self.original is None:
            found = find_embeddings(self.teacher_model if self.teacher_model is not None else self.model)
            assert found.head is not None  # a causal LM has a head
            weight, bias = found.head.weight, found.bias
        else:
            original = self.original
            weight, bias = original.head if original.head is not None else original.input, original.bias
        weight, bias = weight[: self.old_rows], None if bias is None else bias[: self.old_rows]
        dtype = self._chosen or hidden.dtype
        scores = F.linear(hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
        cap = getattr(self.model.config.get_text_config(), "final_logit_softcapping", None)
        return scores if not cap else torch.tanh(scores / cap) * cap


@contextmanager
def _inferring(model: torch.nn.Module) -> Iterator[None]:
    """`model` in eval mode, each module's mode restored after: the model itself as teacher is in train mode while
    the student trains, where dropout and the noise a training hook adds to the input embeddings (the Trainer's
    `neftune_noise_alpha`) would make its targets random."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 matrices in hardware: a CUDA GPU that supports bfloat16, or a CPU with
    AVX512-BF16 or AMX (torch reports both only privately, so a torch without those probes counts as no)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(probe is not None and bool(probe()) for probe in probes)


def _auto_dtype(model: Any, device: torch.device) -> torch.dtype | None:
    """bfloat16 for a float32 model on a device with native bfloat16 (`native_bf16`), else the model's own."""
    float32 = next(model.parameters()).dtype == torch.float32
    return torch.bfloat16 if float32 and native_bf16(device) else None


def _lookup(module: torch.nn.Module, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """What `module` (an `nn.Embedding`, or Gemma's subclass that scales by `embed_scale`) gives for `ids` with
    `weight` as its matrix."""
    embeds = F.embedding(ids, weight, padding_idx=getattr(module, "padding_idx", None))
    scale = getattr(module, "embed_scale", None)
    return embeds if scale is None else embeds * torch.as_tensor(scale, dtype=embeds.dtype, device=embeds.device)


def _originals(model: Any) -> OriginalEmbeddings:
    originals = original_embeddings(model)
    if originals is None:
        raise TrainingSetupError(
            "The model's vocabulary was replaced (mode='replace') but it does not carry its original embedding rows "
            "(it was loaded from a folder, where they are not saved): pass teacher_model=<the original model, loaded "
            "with AutoModelForCausalLM.from_pretrained(record.source_model)>."
        )
    return originals


def check_teacher(model: Model, teacher_model: Model | None, teacher_tokenizer: Any, weights: Any) -> None:
    """The teacher fits what it reads and what it is compared with: `weights.layer` indexes its hidden states, and a
    separate `teacher_model` has a row for every token of `teacher_tokenizer` (and not many more: then it is not that
    tokenizer's model), is not an extended model read with the old tokenizer, and with the `hidden` objective gives
    hidden states of the student's size (`InvalidArgumentError`, before any step). Without `teacher_model`, the model
    itself must still be the original where it teaches (`changed_by_training`; `TrainingSetupError`)."""
    teacher = teacher_model if teacher_model is not None else model
    layers = getattr(getattr(teacher, "config", None), "num_hidden_layers", None)
    if isinstance(layers, int) and not -(layers + 1) <= weights.layer <= layers:
        raise InvalidArgumentError(
            f"weights.layer={weights.layer} is outside the hidden states of {type(teacher).__name__} ({layers} "
            f"layers: indexes -{layers + 1} to {layers}): pass one of those, e.g. -1 for the last layer.")
    if teacher_model is None:
        _check_own_teacher(model)
    elif (why := _not_the_original(teacher_model, model, teacher_tokenizer, weights)) is not None:
        raise InvalidArgumentError(f"teacher_model ({type(teacher_model).__name__}) is not the original model: {why}. "
                                   "Pass the model the extended one was made from, as teacher_model.")


def _check_own_teacher(model: Model) -> None:
    record = find_record(model)
    if (run := changed_by_training(record)) is not None:
        source = repr(record.source_model) if record is not None and record.source_model else "record.source_model"
        raise TrainingSetupError(
            f"The model cannot be its own teacher: an earlier embedding-only run ({run}, per its record) trained "
            "what the teacher reads, so fed the old ids it is no longer the original model. Pass teacher_model="
            f"AutoModelForCausalLM.from_pretrained({source}) (CLI: --teacher-model), or train with cross-entropy "
            "(a Trainer with EmbeddingOnlyCallback; CLI: --objective next_token).")


def changed_by_training(record: Any) -> str | None:
    """The first earlier run in `record`'s CPT history after which the model is no longer the original one where it
    teaches: old rows trained (extend mode; in replace mode the teacher reads the rows extend_vocabulary kept), or a
    second stage trained the body. None when there is none."""
    for entry in [] if record is None else record.cpt:
        if (record.mode == "extend" and entry.get("rows") != "new") or entry.get("second_stage"):
            return f"rows={entry.get('rows')!r}" + (", then a second stage on the body" if entry.get("second_stage")
                                                    else "")
    return None


def _not_the_original(teacher_model: Model, model: Model, teacher_tokenizer: Any, weights: Any) -> str | None:
    """Why `teacher_model` cannot be the model `teacher_tokenizer` belongs to, or cannot teach `model`; None if not."""
    rows, tokens = find_embeddings(teacher_model).num_rows, len(teacher_tokenizer)
    # ids past the rows may only be special tokens (Gemma-3's image token is one), rows past the ids only padding
    beyond = {token for token, index in teacher_tokenizer.get_vocab().items() if index >= rows}
    if rows - tokens > MAX_PADDING_ROWS or not beyond <= set(teacher_tokenizer.all_special_tokens):
        return f"its {rows} embedding rows do not fit teacher_tokenizer's {tokens} tokens"
    record = find_record(teacher_model)
    if record is not None and record.tokenizer_sha256 != fingerprint(teacher_tokenizer):
        return "it carries the record of an extend_vocabulary call whose tokenizer is not teacher_tokenizer"
    width, wanted = (getattr(m.config.get_text_config(), "hidden_size", None) for m in (teacher_model, model))
    if weights.hidden and width != wanted:
        return (f"its hidden states have {width} values, the model's {wanted}, and the hidden objective compares "
                "them (DistillationWeights(hidden=0) leaves it out)")
    return None
