"""What `DistillationTrainer` checks and builds before the Trainer is: its arguments, the two tokenizers against the
model's record, the callbacks, and the source replay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import TrainingArguments as HFTrainingArguments

from ..._typing import TrainingArguments
from ...errors import InvalidArgumentError, InvalidArgumentTypeError, TokenizerMismatchError, TrainingSetupError
from ...vocab.load import fingerprint
from ..cpt.callback import EmbeddingOnlyCallback
from .collator import DistillationCollator, check_text_datasets
from .replay import SourceReplay
from .weights import DistillationWeights

__all__ = ["check_own_loss", "check_tokenizers", "check_types", "instantiated", "old_rows_frozen", "source_replay"]


def old_rows_frozen(record: Any, callbacks: list[Any], teacher_model: Any) -> bool:
    """Whether the rows of the old vocabulary stay fixed (extend mode, and the callback trains only new rows)."""
    ours = [c for c in callbacks if isinstance(c, EmbeddingOnlyCallback)]
    if not ours and teacher_model is None:
        raise TrainingSetupError(
            "DistillationTrainer needs EmbeddingOnlyCallback in callbacks=[...] (the teacher is the model's own "
            "frozen body), or a separate teacher_model=<the original model>."
        )
    rows = ours[0].rows if ours else "all"
    if record.mode != "extend":
        return False
    return rows == "new" if isinstance(rows, str) else min(rows) >= record.old_vocab_size


def instantiated(callbacks: Any) -> Any:
    """Callback classes instantiated, as the Trainer does with them, so that this trainer reads the
    `EmbeddingOnlyCallback` the Trainer will run (`callbacks=[EmbeddingOnlyCallback]` is its defaults)."""
    return [c() if isinstance(c, type) else c for c in callbacks] if isinstance(callbacks, (list, tuple)) else callbacks


def check_types(model: Any, weights: Any, teacher_model: Any, train_dataset: Any, kwargs: dict[str, Any]) -> None:
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentTypeError(
            f"model is a {type(model).__name__}: pass the model after extend_vocabulary, loaded (e.g. "
            "AutoModelForCausalLM.from_pretrained(folder)); DistillationTrainer takes no model_init (its teacher and "
            "collator are built from the model)."
        )
    check_text_datasets(train_dataset, kwargs.get("eval_dataset"))
    collator = kwargs.get("data_collator")
    if collator is not None and not isinstance(collator, DistillationCollator):
        raise InvalidArgumentTypeError(
            f"data_collator is a {type(collator).__name__}: DistillationTrainer reads raw text through a "
            "DistillationCollator (the student's and the teacher's cut of each text); leave data_collator out, or "
            "pass a DistillationCollator."
        )
    if sum(isinstance(c, EmbeddingOnlyCallback) for c in kwargs.get("callbacks") or []) > 1:
        raise TrainingSetupError("callbacks holds more than one EmbeddingOnlyCallback: pass one, with the rows to "
                                 "train.")
    if weights is not None and not isinstance(weights, DistillationWeights):
        raise InvalidArgumentTypeError(f"weights is a {type(weights).__name__}: pass a DistillationWeights, or None "
                                       "for the defaults.")
    if teacher_model is not None and not isinstance(teacher_model, torch.nn.Module):
        raise InvalidArgumentTypeError(f"teacher_model is a {type(teacher_model).__name__}: pass the original model "
                                       "loaded (AutoModelForCausalLM.from_pretrained(...)), or None.")


def check_own_loss(args: TrainingArguments | None, kwargs: dict[str, Any]) -> None:
    """Refuse the Trainer's loss settings, which this trainer's own loss would ignore without a word."""
    if args is not None and not isinstance(args, HFTrainingArguments):
        raise InvalidArgumentTypeError(f"args is a {type(args).__name__}: pass TrainingArguments(...), or None.")
    smoothing = args.label_smoothing_factor if args is not None else 0
    if smoothing:
        raise InvalidArgumentError(
            f"TrainingArguments(label_smoothing_factor={smoothing}): DistillationTrainer computes its own loss, whose "
            "next_token term is plain cross-entropy (the teacher's terms are soft targets already); set it to 0, or "
            "train with Trainer + EmbeddingOnlyCallback for a smoothed cross-entropy.")
    if kwargs.get("compute_loss_func") is not None:
        raise InvalidArgumentError("compute_loss_func is given, but DistillationTrainer computes its own loss "
                                   "(DistillationWeights chooses its terms): leave compute_loss_func out, or train "
                                   "with Trainer + EmbeddingOnlyCallback.")


def check_tokenizers(record: Any, student: Any, teacher: Any) -> None:
    """The student reads text with the tokenizer `extend_vocabulary` returned, the teacher with the one before it."""
    checks = (("processing_class", student, record.tokenizer_sha256, record.source_tokenizer_sha256,
               "the tokenizer the model's last extend_vocabulary call returned",
               "the original tokenizer: the new rows would never see a token"),
              ("teacher_tokenizer", teacher, record.source_tokenizer_sha256, record.tokenizer_sha256,
               "the tokenizer the model was extended from",
               "the extended tokenizer: the teacher would read the text as the student does and teach nothing"))
    for argument, tokenizer, wanted, swapped, role, why in checks:
        found = fingerprint(tokenizer)
        if found != wanted:
            raise TokenizerMismatchError(
                f"{argument} is not {role} ({len(tokenizer)} tokens, fingerprint {found[:12]}...; the model's "
                f"record has {wanted[:12]}...){' but ' + why if found == swapped else ''}: pass {role}."
            )


def source_replay(weights: DistillationWeights, tokenizer: Any, teacher_tokenizer: Any,
                   texts: Sequence[str] | None, max_length: int) -> SourceReplay | None:
    """The source text the student reads at the head, where it has something to do (`cut_differently`)."""
    if not weights.source:
        if texts is not None:
            raise InvalidArgumentError(
                "source_texts is given but weights.source is 0, so nothing would read them: leave weights.source at "
                "its default (1.0; CLI: --source-weight 1), or leave source_texts out."
            )
        return None
    replay = SourceReplay(tokenizer, texts, max_length=max_length)
    return replay if replay.cut_differently(teacher_tokenizer) else None
