"""`vocabshift.DistillationTrainer`: learn new embedding rows from the original model on the same text.

A `transformers.Trainer` whose loss compares the student (the model with its new vocabulary) with the teacher (the
original model on the old tokenization of the same text) over aligned chunks. Use it with
`EmbeddingOnlyCallback`, which decides which rows train. `distillation_loss` is the same loss for custom loops.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import Trainer

from ..._typing import Model, TokenizerLike, TrainingArguments
from ...atomic import atomic_write_text
from ...embeddings import find_embeddings
from ...errors import InvalidArgumentError
from ...record import get_record
from ...vocab.load import load_tokenizer
from ..cpt._resume import damaged_checkpoint_json, read_checkpoint_json
from ..cpt._run import checkpoint_folder
from ..cpt.callback import EmbeddingOnlyCallback
from ._setup import check_own_loss, check_tokenizers, check_types, instantiated, old_rows_frozen, source_replay
from .collator import check_collator, check_text_dataset, check_text_datasets, default_collator
from .losses import next_token_loss
from .objective import distillation_loss, teacher_targets
from .pieces import first_pieces, piece_tree
from .replay import source_loss
from .schedule import TeacherSchedule
from .teacher import Teacher, check_teacher
from .weights import DistillationWeights

__all__ = ["DistillationTrainer"]

PROGRESS = "vocabshift_distillation.json"  # in each checkpoint: the teacher's schedule and the source replay


class DistillationTrainer(Trainer):
    """A `Trainer` that learns the new rows from the original model on the same text (TRL-style loss override).

    The training set holds raw text (strings, or a dataset with a `"text"` column); the trainer's collator gives
    both tokenizations and their chunks. Combine with `EmbeddingOnlyCallback` (in `callbacks=[...]`). An
    `eval_dataset` (raw text too) is scored with the student's cross-entropy, the `next_token` term, so that
    `eval_loss` compares with a cross-entropy run's.

    Args:
        model (`PreTrainedModel`): the model after `extend_vocabulary`.
        args (`TrainingArguments`): as for `Trainer`.
        train_dataset: raw training text.
        processing_class: the tokenizer `extend_vocabulary` returned (the student's): a fast tokenizer or its path.
        teacher_tokenizer: the tokenizer the model was extended from (the original): a fast tokenizer or its path.
        teacher_model (*optional*): a separate original model; default: the model's own original rows.
        teacher_dtype (`torch.dtype`, `"auto"` or `None`, defaults to `"auto"`): the precision the teacher runs in,
            under autocast (`Teacher`): `"auto"` runs a float32 model's teacher in bfloat16 where the device computes
            it natively (GPUs with bf16, CPUs with AVX512-BF16 or AMX), where its forward, most of what distillation
            adds to a step, gets much faster; `None`: the model's own dtype (or the Trainer's `bf16`/`fp16`
            autocast). The source replay's forward, which also only infers through the body, runs in it too.
        weights (`DistillationWeights`, *optional*): objective weights and hidden-state layer.
        source_texts (`Sequence[str]`, *optional*): source-language lines for `weights.source` (`SourceReplay`);
            defaults to the English lines shipped with vocabshift. Pass lines of the model's main language when it is
            not English. They are read only where the new tokenizer cuts them differently from the old one (new
            tokens in the source's script).
        max_length (`int`, defaults to 128): student tokens per sequence (the collator's `max_length`), at most the
            model's positions; the teacher reads at most its own (`default_collator`).
        **kwargs: passed on to `Trainer`.

    Raises:
        `TrainingSetupError`: no `EmbeddingOnlyCallback` and no `teacher_model` (the body would train and the
            teacher drift with it), more than one, or replace mode on a model that does not carry its original rows
            (loaded from a folder) without `teacher_model`.
        `RecordError`: the model carries no ExtensionRecord.
        `TokenizerMismatchError`: `processing_class` or `teacher_tokenizer` is not the one the record names (each
            other's swapped, or of another model). `InvalidTokenizerError`, `TokenizerLoadError`: not a tokenizer.
        `CorpusError`: `source_texts` is not a non-empty list of strings.
        `InvalidArgumentError`: `source_texts` with `weights.source` at 0 (off), a `max_length` (or a given
            `data_collator`'s lengths) past the model's or the teacher's positions, a dataset without a `"text"`
            column, a `teacher_model` that is not the original model (`check_teacher`); `label_smoothing_factor` or
            `compute_loss_func`, which this trainer's loss would ignore. `InvalidArgumentTypeError`: a
            `train_dataset` that is one string or a `DatasetDict`, a `data_collator` that is not a
            `DistillationCollator`, a `model` that is not a loaded model (None, with a `model_init`). `evaluate` and
            `predict` check the dataset they are given as the trainer checks its own.

    Example:
        ```python
        >>> trainer = vocabshift.DistillationTrainer(model=model, args=args, train_dataset=texts,
        ...                                          processing_class=tokenizer, teacher_tokenizer=old_tokenizer,
        ...                                          callbacks=[vocabshift.EmbeddingOnlyCallback(rows="new")])
        >>> trainer.train()
        ```
    """

    def __init__(self, model: Model | None = None, args: TrainingArguments | None = None, train_dataset: Any = None,
                 *, processing_class: TokenizerLike, teacher_tokenizer: TokenizerLike,
                 teacher_model: Model | None = None,
                 teacher_dtype: torch.dtype | Literal["auto"] | None = "auto",
                 weights: DistillationWeights | None = None, source_texts: Sequence[str] | None = None,
                 max_length: int = 128, **kwargs: Any) -> None:
        if "callbacks" in kwargs:
            kwargs["callbacks"] = instantiated(kwargs["callbacks"])
        check_types(model, weights, teacher_model, train_dataset, kwargs)
        check_own_loss(args, kwargs)
        self.weights = weights if weights is not None else DistillationWeights()
        record = get_record(model)
        processing_class = load_tokenizer(processing_class, argument="processing_class")
        teacher_tokenizer = load_tokenizer(teacher_tokenizer, argument="teacher_tokenizer")
        check_tokenizers(record, processing_class, teacher_tokenizer)
        check_teacher(model, teacher_model, teacher_tokenizer, self.weights)
        frozen = old_rows_frozen(record, kwargs.get("callbacks") or [], teacher_model)
        # before the Trainer is built: EmbeddingOnlyCallback splits the trainable rows off in on_init_end
        self.teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=frozen,
                               teacher_model=teacher_model, dtype=teacher_dtype)
        collator = kwargs.pop("data_collator", None)
        if collator is not None:
            check_collator(collator, model, teacher_model)
        collator = collator or default_collator(model, teacher_model, processing_class, teacher_tokenizer, max_length)
        super().__init__(model=model, args=args, train_dataset=train_dataset, processing_class=processing_class,
                         data_collator=collator, **kwargs)
        self.loss_is_scaled_for_ga = False  # compute_loss returns a per-batch mean
        rows = find_embeddings(model).num_rows
        self.first_pieces = first_pieces(record, rows, self.args.device)
        self.tree = piece_tree(record, rows, self.args.device) if self.weights.piece_tree else None
        self._parts: dict[str, list[float]] = defaultdict(list)
        self.schedule = TeacherSchedule(self.weights)
        self.source = source_replay(self.weights, processing_class, teacher_tokenizer, source_texts, max_length)
        callback = self._embedding_callback()
        if callback is not None:  # the callback writes the run's record entry; this trainer says what it trained on
            callback.describe_objective(self.objective_entry)

    def _embedding_callback(self) -> EmbeddingOnlyCallback | None:
        return next((c for c in self.callback_handler.callbacks if isinstance(c, EmbeddingOnlyCallback)), None)

    def objective_entry(self) -> dict[str, Any]:
        """The loss this trainer computes, as the record's CPT entry keeps it: the weights, the teacher's precision
        (`"auto"` until the teacher first runs) and whether the source text was read."""
        dtype = self.teacher.dtype
        return {"name": "distillation", **self.weights.to_dict(),
                "teacher_dtype": None if dtype is None else str(dtype).removeprefix("torch."),
                "source_read": self.source is not None}

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """Restore where the teacher's schedule and the source replay stood (`PROGRESS`) with the optimizer state."""
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None and Path(checkpoint, PROGRESS).is_file():  # absent: saved by an older vocabshift
            self._restore_progress(Path(checkpoint, PROGRESS))

    def _restore_progress(self, path: Path) -> None:
        """Where the teacher's schedule and the source replay stood (`TrainingSetupError` for a damaged file)."""
        what, without = "where the teacher's schedule and the source replay stood", "with both from their start"
        state = read_checkpoint_json(path, what=what, without=without)
        try:
            self.schedule.load_state_dict(state["schedule"])
            if self.source is not None and state["source"] is not None:
                self.source.load_state_dict(state["source"])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise damaged_checkpoint_json(path, what=what, without=without,
                                          why=f"{type(error).__name__}: {error}") from None

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The Trainer's checkpoint, and where the teacher's schedule and the source replay stand (`PROGRESS`), so
        that a resumed run trains as the uninterrupted one does."""
        super()._save_checkpoint(model, trial)
        folder = checkpoint_folder(self.args, self.state)
        if self.is_world_process_zero() and folder.is_dir():
            progress = {"schedule": self.schedule.state_dict(),
                        "source": None if self.source is None else self.source.state_dict()}
            atomic_write_text(folder / PROGRESS, json.dumps(progress, indent=2))

    def evaluate(self, eval_dataset: Any = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """`Trainer.evaluate`; a dataset given here is checked as one given to the trainer (`check_text_dataset`),
        a string as the name of one of its eval datasets (a dict: the Trainer evaluates each by its name)."""
        names = sorted(self.eval_dataset) if isinstance(self.eval_dataset, Mapping) else []
        if not isinstance(eval_dataset, str) or not names:
            check_text_datasets(None, eval_dataset)
        elif eval_dataset not in names:
            raise InvalidArgumentError(f"eval_dataset={eval_dataset!r:.40} names none of the trainer's eval datasets "
                                       f"{names[:8]}: pass one of those names, or the texts to score.")
        return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)

    def predict(self, test_dataset: Any, ignore_keys: list[str] | None = None,
                metric_key_prefix: str = "test") -> Any:
        """`Trainer.predict`, with `test_dataset` checked as `evaluate`'s dataset."""
        check_text_dataset(test_dataset, name="test_dataset")
        return super().predict(test_dataset, ignore_keys, metric_key_prefix)

    def _set_signature_columns_if_needed(self) -> None:
        self._signature_columns = ["text"]  # the collator tokenizes raw text itself

    def compute_loss(self, model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if return_outputs or not model.training:  # evaluation: the teacher's schedule and the replay are left alone
            return self._evaluation_loss(model, inputs, return_outputs)
        count = self.schedule.count(len(inputs["input_ids"]))
        targets = teacher_targets(self.teacher, inputs, self.weights, tree=self.tree, count=count)
        loss, parts = distillation_loss(model, targets, inputs, self.weights, first_pieces=self.first_pieces,
                                        tree=self.tree, count=count)
        if self.source is not None:
            term = None
            if self.source.due():
                with self.teacher.precision(loss.device):  # its body only infers, as the teacher's
                    source = source_loss(self.accelerator.unwrap_model(model), self.source.batch(loss.device))
                parts["source"], term = source.item(), self.weights.source * source
            loss = self.source.weighed(loss, term)
        self.schedule.update(*self._shared_leads(parts.get("teacher_lead"), parts.get("teacher_text_lead")))
        for name, value in {**parts, "teacher_share": self.schedule.share}.items():
            self._parts[name].append(value)
        return loss

    @staticmethod
    def _evaluation_loss(model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool) -> Any:
        """The student's cross-entropy (the loss's `next_token` term), so that `eval_loss` compares with a
        cross-entropy run's."""
        out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        loss = next_token_loss(out.logits, inputs["labels"])
        return (loss, {"loss": loss, "logits": out.logits}) if return_outputs else loss

    def _shared_leads(self, *leads: float | None) -> list[float | None]:
        """Each of the teacher's leads averaged over the processes that measured it, so that every process's
        schedule has its teacher read the same number of sequences (a sharded model's forward is a collective that
        all of them must join)."""
        if self.args.world_size <= 1:
            return list(leads)
        known = [lead is not None and not math.isnan(lead) for lead in leads]
        values = [lead if lead is not None and ok else 0.0 for lead, ok in zip(leads, known)]
        total = torch.tensor([*values, *map(float, known)], device=self.args.device, dtype=torch.float32)
        torch.distributed.all_reduce(total)
        sums, counts = total[: len(leads)].tolist(), total[len(leads):].tolist()
        return [value / count if count > 0 else None for value, count in zip(sums, counts)]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add each objective's mean since the last log (`distill/hidden`, ...), and with the gate the teacher's
        wins, leads and share (`distill/teacher_wins`, `distill/teacher_lead`, `distill/teacher_text_lead`,
        `distill/teacher_share`), to the training logs."""
        if "loss" in logs:
            logs.update({f"distill/{name}": sum(v) / len(v) for name, v in self._parts.items() if v})
            self._parts.clear()
        super().log(logs, start_time)
