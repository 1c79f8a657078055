"""Data for distillation across tokenizers: raw text in, both tokenizations and their chunk maps out.

`DistillationCollator` tokenizes each text with the student's (new) and the teacher's (old) tokenizer, aligns the
two into chunks (`_chunks.py`), cuts both sides at the same shared boundary, and pads. Everything per token is
vectorized (the tokenizers' batch encoders and NumPy); nothing per token runs in Python in the training step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..._typing import Tokenizer
from ...arguments import check_count, check_positions, model_positions
from ...errors import InvalidArgumentError, InvalidArgumentTypeError
from ...vocab.load import load_tokenizer
from ._chunks import align_chunks

__all__ = ["DistillationCollator", "check_collator", "check_text_dataset", "check_text_datasets", "default_collator",
           "prefix_id"]

logger = logging.getLogger(__name__)


def prefix_id(tokenizer: Any, side: str) -> int:
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if prefix is None:
        raise InvalidArgumentError(
            f"The {side} tokenizer has neither a bos nor an eos token, so sequences have no first token to predict "
            "from: set tokenizer.bos_token (e.g. to its end-of-text token)."
        )
    return prefix


def check_text_datasets(train: Any, evaluation: Any) -> None:
    """`check_text_dataset` of a Trainer's `train_dataset` and `eval_dataset` (one, or a dict of named ones)."""
    check_text_dataset(train, name="train_dataset")
    for label, dataset in (evaluation.items() if isinstance(evaluation, Mapping) else [("", evaluation)]):
        if dataset is not None:
            check_text_dataset(dataset, name=f"eval_dataset{f'[{label!r}]' if label else ''}")


def check_text_dataset(dataset: Any, *, name: str) -> None:
    """Refuse, before training, a dataset the collator cannot read: one string (read as its characters), a mapping
    (a `DatasetDict` of splits), or a dataset whose columns, where it names them, hold no `"text"`."""
    if isinstance(dataset, (str, bytes)):
        raise InvalidArgumentTypeError(f"{name} is a {type(dataset).__name__}: pass a list of strings, or a dataset "
                                       "with a 'text' column of strings.")
    if isinstance(dataset, Mapping):
        raise InvalidArgumentTypeError(f"{name} is a {type(dataset).__name__} of {sorted(map(str, dataset))[:4]}: "
                                       f"pass one dataset, e.g. {name}=dataset['train'].")
    columns = getattr(dataset, "column_names", None)  # a datasets.Dataset's (None for some streamed ones)
    if columns is None and isinstance(dataset, Sequence) and len(dataset) and isinstance(dataset[0], Mapping):
        columns = sorted(map(str, dataset[0]))  # a list of dicts: the keys of its first
    if isinstance(columns, list) and "text" not in columns:
        raise InvalidArgumentError(f"{name} has the columns {columns[:8]} and no 'text', the column the collator "
                                   f"reads: {_text_fix(columns, name)}.")


def _text_fix(columns: list[str], name: str) -> str:
    if "input_ids" in columns:
        return ("the trainer tokenizes raw text itself, with both tokenizers (the teacher reads the old "
                "tokenization), so pass the texts, not token ids")
    return f"rename the one holding the text, e.g. {name}.rename_column({(columns or ['content'])[0]!r}, 'text')"


def _text_of(example: Any) -> str:
    text = example.get("text") if isinstance(example, Mapping) else example
    if isinstance(text, str):
        return text
    if isinstance(example, Mapping) and "text" in example:  # a row of a 'text' column with gaps
        raise InvalidArgumentError(f"A training example's 'text' is {text!r:.40} (a {type(text).__name__}), not a "
                                   "string: drop such rows, e.g. dataset.filter(lambda row: isinstance(row['text'], "
                                   "str) and row['text'].strip()).")
    if isinstance(example, Mapping):  # a streamed dataset whose columns were unknown when the trainer was built
        keys = sorted(map(str, example))[:8]
        raise InvalidArgumentError(f"A training example is a {type(example).__name__}"
                                   f"{f' with the keys {keys}' * bool(keys)} and no 'text' string: "
                                   f"{_text_fix(keys, 'dataset')}.")
    raise InvalidArgumentError(f"A training example is a {type(example).__name__}: pass strings, or a dataset with a "
                               "'text' column of strings.")


@dataclass
class DistillationCollator:
    """Turn raw texts into the student's and the teacher's tokens of the same text span, with their chunks.

    Each sequence starts with the tokenizer's bos token (else eos) on both sides, as its own chunk, and ends at the
    last shared boundary that fits `max_length` student tokens and `max_teacher_length` teacher tokens; the rest of a
    longer text is dropped (a warning says so once: `pack_texts` cuts long texts into pieces that fit).

    Args:
        tokenizer: the student's tokenizer (the one `extend_vocabulary` returned).
        teacher_tokenizer: the original tokenizer.
        max_length (`int`, defaults to 128): student tokens per sequence, its first token included.
        max_teacher_length (`int`, *optional*): teacher tokens per sequence; defaults to 8 × `max_length`.

    Returns (when called on a list of strings or of `{"text": ...}` examples) a dict of tensors: `input_ids`,
    `attention_mask`, `labels` (-100 at padding), `teacher_input_ids`, `teacher_attention_mask`, `chunk_ends` /
    `teacher_chunk_ends` (`(batch, chunks)`: last token of each chunk), `chunk_mask`, and `chunk_ids` /
    `teacher_chunk_ids` (chunk of every token; -1 at padding).

    Raises:
        `InvalidTokenizerError`: either tokenizer is not a fast tokenizer. `InvalidArgumentError`: a length below 2,
            a tokenizer with neither bos nor eos, or (when called) a batch that is not a list of texts or examples.
    """

    tokenizer: Tokenizer
    teacher_tokenizer: Tokenizer
    max_length: int = 128
    max_teacher_length: int | None = None
    _warned: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("max_length", "max_teacher_length"):
            if name == "max_length" or getattr(self, name) is not None:
                check_count(getattr(self, name), name=name, minimum=2, accepted="an int of at least 2")
        self.tokenizer = load_tokenizer(self.tokenizer, argument="tokenizer")
        self.teacher_tokenizer = load_tokenizer(self.teacher_tokenizer, argument="teacher_tokenizer")
        self._prefixes = (prefix_id(self.tokenizer, "student"), prefix_id(self.teacher_tokenizer, "teacher"))

    def __call__(self, examples: Sequence[Any]) -> dict[str, torch.Tensor]:
        if isinstance(examples, (str, bytes)) or not isinstance(examples, Sequence):
            raise InvalidArgumentError(f"DistillationCollator got a {type(examples).__name__}: pass a batch, a list "
                                       "of strings or of {'text': ...} examples.")
        texts = [_text_of(example) for example in examples]
        if not any(text.strip() for text in texts):
            raise InvalidArgumentError(
                f"A batch of {len(texts)} examples (of the train_dataset or eval_dataset) holds no text (every one "
                "is empty): drop empty lines, or pack the lines into texts (vocabshift.training.pack_texts)."
            )
        sides = [tok(texts, add_special_tokens=False, return_offsets_mapping=True)
                 for tok in (self.tokenizer, self.teacher_tokenizer)]
        limits = (self.max_length, self.max_teacher_length or 8 * self.max_length)
        self._warn_of_long_texts(sides[0]["input_ids"])
        rows = [self._row(self._side(sides[0], i, self._prefixes[0]), self._side(sides[1], i, self._prefixes[1]),
                          limits) for i in range(len(texts))]
        return _pad(rows)

    def _warn_of_long_texts(self, encoded: list[list[int]]) -> None:
        """Say once that texts longer than `max_length` (with the prefix token) lose their rest (raw documents given
        as the dataset); nothing is counted once it has been said."""
        if self._warned:
            return
        long = sum(len(ids) + 1 > self.max_length for ids in encoded)
        if long:
            self._warned = True
            logger.warning(f"{long} of {len(encoded)} texts in a batch are longer than max_length={self.max_length} "
                           "tokens: the collator reads the first max_length of each and drops the rest. Pass the "
                           "texts through vocabshift.training.pack_texts(texts, tokenizer, max_length=...), which "
                           "cuts long texts into pieces that fit, or raise max_length.")

    @staticmethod
    def _side(encoded: Any, index: int, prefix: int) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray([prefix, *encoded["input_ids"][index]], dtype=np.int64)
        offsets = np.asarray([(0, 0), *encoded["offset_mapping"][index]], dtype=np.int64).reshape(-1, 2)
        return ids, offsets

    @staticmethod
    def _row(student: tuple[np.ndarray, np.ndarray], teacher: tuple[np.ndarray, np.ndarray],
             limits: tuple[int, int]) -> dict[str, np.ndarray]:
        chunks = align_chunks(student[1], teacher[1])
        fits = np.flatnonzero((chunks.student_ends < limits[0]) & (chunks.teacher_ends < limits[1]))
        count = int(fits[-1]) + 1  # chunk 0 (the first token alone) always fits
        s_len, t_len = int(chunks.student_ends[count - 1]) + 1, int(chunks.teacher_ends[count - 1]) + 1
        return {
            "input_ids": student[0][:s_len], "teacher_input_ids": teacher[0][:t_len],
            "chunk_ends": chunks.student_ends[:count], "teacher_chunk_ends": chunks.teacher_ends[:count],
            "chunk_ids": chunks.student_chunks[:s_len], "teacher_chunk_ids": chunks.teacher_chunks[:t_len],
        }


def _pad(rows: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Right-pad every field to the longest row (ids with 0, chunk indices with -1) and add masks and labels."""
    arrays: dict[str, np.ndarray] = {}
    for name in rows[0]:
        width = max(len(row[name]) for row in rows)
        fill = 0 if name.endswith("input_ids") else -1
        arrays[name] = np.full((len(rows), width), fill, dtype=np.int64)
        for index, row in enumerate(rows):
            arrays[name][index, : len(row[name])] = row[name]
    for side in ("", "teacher_"):
        lengths = np.array([len(row[f"{side}input_ids"]) for row in rows])
        width = arrays[f"{side}input_ids"].shape[1]
        arrays[f"{side}attention_mask"] = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    arrays["chunk_mask"] = arrays["chunk_ends"] >= 0
    arrays["labels"] = np.where(arrays["attention_mask"] == 1, arrays["input_ids"], -100)
    return {name: torch.from_numpy(array) for name, array in arrays.items()}  # on the CPU, as a data loader gives


def default_collator(model: Any, teacher_model: Any, tokenizer: Any, teacher_tokenizer: Any,
                     max_length: int) -> DistillationCollator:
    """`DistillationTrainer`'s collator: `max_length` student tokens, within the student's positions, and at most as
    many teacher tokens as the teacher's positions (else 8 × `max_length`): the old tokenization of a language the
    original model cuts finely can be several times longer, and a rotary model would run past its positions."""
    collator = DistillationCollator(tokenizer, teacher_tokenizer, max_length=max_length)
    check_positions(model, max_length, name="max_length", argument="model")
    positions = model_positions(teacher_model if teacher_model is not None else model)
    if positions is not None:
        collator.max_teacher_length = min(8 * max_length, positions)
    return collator


def check_collator(collator: DistillationCollator, model: Any, teacher_model: Any) -> None:
    """A `DistillationCollator` given as `data_collator`: its lengths within the student's and the teacher's
    positions, as `default_collator`'s are (a model with learned positions fails mid-run with an IndexError).

    Raises:
        `InvalidArgumentError`: naming the length, the positions and the fix.
    """
    check_positions(model, collator.max_length, name="data_collator.max_length", argument="model")
    teacher = teacher_model if teacher_model is not None else model
    positions, length = model_positions(teacher), collator.max_teacher_length or 8 * collator.max_length
    if positions is not None and length > positions:
        default = " (max_teacher_length unset: 8 x max_length)" if collator.max_teacher_length is None else ""
        raise InvalidArgumentError(
            f"data_collator reads up to {length} teacher tokens per sequence{default}, past the {positions} "
            f"positions of the teacher ({type(teacher).__name__}): pass DistillationCollator(..., "
            f"max_teacher_length={positions}), or leave data_collator out (its default stays within them)."
        )
