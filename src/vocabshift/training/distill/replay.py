"""Source-language text read at the head only, so that new tokens keep their place in the source language.

Embedding-only training on target text teaches the new rows where they belong, but nothing tells them where they do
not: a new row composed from old pieces starts with its pieces' logit prior and keeps part of the probability of the
source language's next tokens, which costs the model its English. `SourceReplay` gives the student sequences of
source-language text (the English lines shipped with vocabshift unless told otherwise), cut by its own
tokenizer, and `source_loss` scores it with the input embeddings' output detached: the body runs without a graph
(no backward through it), and the loss trains the rows only as outputs, there where they compete with the source
language's tokens. It costs one forward of one sequence and the head's backward, every `READ_EVERY` losses
(its gradient weighted as many times, so that its mean weight is `source`: `SourceReplay.weighed`);
`DistillationTrainer` runs it in the teacher's precision (bfloat16 where the device computes it natively).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...corpus import source_lines, text_lines
from ...errors import CorpusError
from ..texts import join_texts
from .collator import prefix_id

__all__ = ["READ_EVERY", "SourceReplay", "source_loss"]

READ_EVERY = 8  # every fourth loss, at the same mean weight, cost more seconds and kept English no better


class SourceReplay:
    """The source-language sequences the student reads, one per read, in order and then again from the start.

    Args:
        tokenizer: the student's tokenizer.
        texts (`Sequence[str]`, *optional*): source-language lines; None: the English lines shipped with vocabshift.
        max_length (`int`): tokens per sequence, the tokenizer's bos (else eos) first.

    Every process reads the same sequence at a step, so that a run gives the one-process result whatever the number
    of processes (DDP averages their losses).

    Raises:
        `CorpusError`: `texts` is not a non-empty list of strings, or gives no token.
    """

    def __init__(self, tokenizer: Any, texts: Sequence[str] | None, *, max_length: int) -> None:
        self.texts = join_texts(text_lines(source_lines(texts)), tokenizer, max_length)
        prefix = prefix_id(tokenizer, "student")
        self._encoded = tokenizer(self.texts, add_special_tokens=False)["input_ids"]
        self.sequences = [[prefix, *ids][:max_length] for ids in self._encoded if ids]
        if not self.sequences:
            raise CorpusError("source_texts give no token: pass source-language lines with text in them.")
        self._next = 0
        self._calls = 0
        self.every = READ_EVERY  # losses per read (each read weighs that many times)
        self.last: float | None = None  # the last read's weighted term, which the logged loss carries between reads

    def due(self) -> bool:
        """Whether this loss reads a sequence: the first of every `every` calls (every process calls alike)."""
        self._calls += 1
        return (self._calls - 1) % self.every == 0

    def weighed(self, loss: torch.Tensor, term: torch.Tensor | None) -> torch.Tensor:
        """`loss` with this loss's replay `term` (the weighted source loss where it read, else None).

        A read's gradient counts `every` times, so that the replay's mean weight per loss is its weight; the value
        (what the Trainer logs) counts the term once, and between reads the last read's term: the logged loss is the
        objective per step, the same over `every` steps as with the term counted `every` times, without a jump at
        each read.
        """
        if term is None:
            return loss if self.last is None else loss + self.last
        self.last = term.item()
        return loss + self.every * term - (self.every - 1) * term.detach()

    def state_dict(self) -> dict[str, int | float | None]:
        """Where the replay stands, so that a resumed run reads and logs on as the uninterrupted one does."""
        return {"next": self._next, "calls": self._calls, "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._next, self._calls = int(state["next"]), int(state["calls"])
        last = state.get("last")  # absent: saved by an older vocabshift
        self.last = None if last is None else float(last)

    def cut_differently(self, teacher_tokenizer: Any) -> bool:
        """Whether the original tokenizer cuts the source text otherwise: new tokens in the source's script (or a
        replaced vocabulary). Where they are of another script, the text is cut as before and the new rows, built
        from pieces of that script, take next to nothing of the source's probability: the replay has nothing to do.
        """
        return self._encoded != teacher_tokenizer(self.texts, add_special_tokens=False)["input_ids"]

    def batch(self, device: torch.device | str) -> dict[str, torch.Tensor]:
        """The next sequence as a batch of one: `input_ids`, `attention_mask` and `labels`."""
        ids = torch.tensor([self.sequences[self._next % len(self.sequences)]], device=device)
        self._next += 1
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def source_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's next-token loss on `batch` with its input embeddings detached: the gradient reaches only the rows
    in the output head (the body's parameters are frozen, so it records no graph)."""
    handle = model.get_input_embeddings().register_forward_hook(lambda _module, _args, output: output.detach())
    try:
        return model(**batch, use_cache=False).loss
    finally:
        handle.remove()
