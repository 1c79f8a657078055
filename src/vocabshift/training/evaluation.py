"""`vocabshift.evaluate`: tokens per word, bits per byte and loss on new vs old tokens, on held-out text."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._record_values import damaged_record
from .._typing import Model, Tokenizer, TokenizerLike
from ..arguments import check_count, check_positions, check_texts
from ..embeddings import check_tokenizer
from ..errors import InvalidArgumentError, InvalidArgumentTypeError
from ..record import add_evaluation, new_ids_of
from ..vocab.load import load_tokenizer
from ..vocab.stats import tokens_per_word
from .metrics import check_causal_lm, default_prefix, encode_texts, eval_mode, text_bytes, token_nll

__all__ = ["Evaluation", "ModelScores", "eval_mode", "evaluate"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelScores:
    """Held-out figures of one model with its tokenizer.

    Attributes:
        label (`str`): `"adapted"` or `"original"`.
        tokens_per_word (`float`): tokens per whitespace-separated word (fertility).
        bits_per_byte (`float`): total negative log-likelihood in bits per UTF-8 byte (comparable across tokenizers).
        loss (`float`): mean loss per token (nats).
        loss_new_tokens / loss_old_tokens (`float | None`): mean loss on tokens whose ids `extend_vocabulary` added,
            and on the others; None when the model has no record (or no such token occurs).
        new_token_share (`float | None`): share of the held-out tokens that are new tokens.
        num_tokens (`int`): tokens scored.
    """

    label: str
    tokens_per_word: float
    bits_per_byte: float
    loss: float
    loss_new_tokens: float | None
    loss_old_tokens: float | None
    new_token_share: float | None
    num_tokens: int


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` measured; `str(evaluation)` is a Markdown table.

    Attributes:
        scores (`tuple[ModelScores, ...]`): the adapted model, then (if given) the original model.
        num_texts / num_bytes (`int`): held-out lines and their UTF-8 bytes (summed: each line is scored alone).
    """

    scores: tuple[ModelScores, ...]
    num_texts: int
    num_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        """Inverse of `to_dict` (as stored in `record.evaluations`).

        Raises:
            `RecordError`: `data` is not what `to_dict` writes (an entry of a hand-edited config.json).
        """
        if not _well_formed(data):
            raise damaged_record(f"an entry of 'evaluations' is {data!r:.120}, where vocabshift writes 'scores' (one "
                                 f"mapping of {', '.join(_SCORES)} per model), 'num_texts' and 'num_bytes'")
        return cls(tuple(ModelScores(**s) for s in data["scores"]), data["num_texts"], data["num_bytes"])

    def to_markdown(self) -> str:
        """A Markdown table, one row per model."""
        head = ("model", "tokens/word", "bits/byte", "loss/token", "loss, new tokens", "loss, old tokens",
                "new-token share")
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for s in self.scores:
            cells = (s.label, _fmt(s.tokens_per_word, 2), _fmt(s.bits_per_byte, 3), _fmt(s.loss, 3),
                     _fmt(s.loss_new_tokens, 3), _fmt(s.loss_old_tokens, 3), _fmt(s.new_token_share, 3))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append(f"\n{self.num_texts} held-out lines, {self.num_bytes:,} bytes.")
        return "\n".join(lines)

    __str__ = to_markdown

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def add_to_record(self, model: Model) -> None:
        """Append this evaluation to the model's ExtensionRecord (`record.evaluations`, saved in config.json).

        Raises:
            `RecordError`: if the model carries no record. `InvalidArgumentTypeError`: `model` is not a model (a
                folder path, a tokenizer).
        """
        if not hasattr(model, "config"):
            raise InvalidArgumentTypeError(
                f"model is a {type(model).__name__}: pass the model object this evaluation scored (add_to_record "
                "changes its config; save it afterwards). For a saved folder: vocabshift evaluate FOLDER TEXTS "
                "--add-to-record.")
        add_evaluation(model, self.to_dict())


_SCORES = [field.name for field in dataclasses.fields(ModelScores)]


def _well_formed(data: Any) -> bool:
    """`data` has the keys and value types `Evaluation.to_dict` writes."""
    def number(value: Any) -> bool:
        return value is None or isinstance(value, (int, float)) and not isinstance(value, bool)

    scores = data.get("scores") if isinstance(data, Mapping) else None
    return isinstance(scores, list) and all(
        isinstance(s, Mapping) and sorted(s) == sorted(_SCORES) and isinstance(s["label"], str)
        and all(number(s[name]) for name in _SCORES[1:]) for s in scores
    ) and all(isinstance(data.get(name), int) for name in ("num_texts", "num_bytes"))


def evaluate(
    model: Model,
    tokenizer: TokenizerLike,
    texts: Sequence[str],
    *,
    original_model: Model | None = None,
    original_tokenizer: TokenizerLike | None = None,
    context_length: int = 512,
    batch_size: int = 4,
) -> Evaluation:
    """Measure a causal LM with its tokenizer on held-out text, optionally next to the original model.

    Bits per byte compare models whose tokenizers differ: each line is scored as its own document (bos, else eos,
    then its tokens), so that both models see the same bytes of context however finely their tokenizers cut. The loss
    on new tokens vs old tokens (ids from the model's ExtensionRecord) shows whether the new rows have caught up with
    the old ones.

    Args:
        model (`PreTrainedModel`): the adapted causal LM.
        tokenizer: its tokenizer (the one `extend_vocabulary` returned).
        texts (`Sequence[str]`): held-out text, one line per item (not seen in training).
        original_model (`PreTrainedModel`, *optional*): the model before adaptation ...
        original_tokenizer (*optional*): ... with its own tokenizer; pass both or neither.
        context_length (`int`, defaults to 512): tokens per scored window, prefix included; only a line longer
            than that is cut into several windows.
        batch_size (`int`, defaults to 4): windows per forward pass.

    Returns:
        `Evaluation`: `print(evaluation)` gives a Markdown table; `evaluation.add_to_record(model)` stores it.

    Raises (all before any scoring):
        `InvalidArgumentError`: texts that are not a non-empty list of non-blank strings (or give no token), only one of
            `original_model` / `original_tokenizer`, `model` itself as `original_model`, a `context_length` below 2 or
            beyond the model's positions, a `batch_size` below 1 (`InvalidArgumentTypeError` for wrong types).
        `UnsupportedModelError`: a model without an LM head, or with its weights not loaded (meta device).
        `InvalidTokenizerError`, `TokenizerMismatchError`: a tokenizer that is not one, or not the model's (more
            tokens than embedding rows, or not the one `extend_vocabulary` returned).

    Example:
        ```python
        >>> result = vocabshift.evaluate(model, tokenizer, held_out, original_model=base, original_tokenizer=base_tok)
        >>> print(result)
        ```
    """
    texts = check_texts(texts, name="texts")
    if (original_model is None) != (original_tokenizer is None):
        raise InvalidArgumentError("Pass both original_model and original_tokenizer, or neither.")
    if original_model is not None and original_model is model:
        raise InvalidArgumentError("original_model is model itself, so the comparison would show two equal rows: pass "
                                   "the model before adaptation (the one extend_vocabulary was called on, loaded "
                                   "again) with its own tokenizer.")
    options = {"context_length": check_count(context_length, name="context_length", minimum=2),
               "batch_size": check_count(batch_size, name="batch_size")}
    pairs = [("adapted", model, _checked_tokenizer(model, tokenizer, context_length, prefix=""))]
    if original_model is not None:
        pairs.append(("original", original_model,
                      _checked_tokenizer(original_model, original_tokenizer, context_length, prefix="original_")))
    for label, _, checked in pairs:  # before any scoring
        encode_texts(checked, texts, argument="tokenizer" if label == "adapted" else "original_tokenizer")
    scores = tuple(_score(label, m, t, texts, options) for label, m, t in pairs)
    return Evaluation(scores, len(texts), text_bytes(texts))


def _checked_tokenizer(model: Model, tokenizer: Tokenizer, context_length: int, *, prefix: str) -> Any:
    """The tokenizer as a fast tokenizer, once it is known to fit the model and the model to be a loaded causal LM
    that can take windows of `context_length` (`prefix`: "" or "original_", for the argument names)."""
    embeddings = check_causal_lm(model, argument=f"{prefix}model")
    tokenizer = load_tokenizer(tokenizer, argument=f"{prefix}tokenizer")
    check_tokenizer(model, tokenizer, embeddings.num_rows, argument=f"{prefix}tokenizer")
    default_prefix(tokenizer)
    check_positions(model, context_length, name="context_length", argument=f"{prefix}model")
    return tokenizer


def _score(label: str, model: Model, tokenizer: Tokenizer, texts: Sequence[str], options: dict[str, Any]
           ) -> ModelScores:
    ids, nll = token_nll(model, tokenizer, texts, **options)
    _warn_of_unknown_tokens(label, tokenizer, ids, texts)
    new_ids = new_ids_of(model, ids.device)
    is_new = torch.isin(ids, new_ids) if new_ids is not None else None
    return ModelScores(
        label=label,
        tokens_per_word=tokens_per_word(tokenizer, texts),
        bits_per_byte=nll.double().sum().item() / math.log(2) / text_bytes(texts),
        loss=nll.double().mean().item(),  # texts are checked to hold text: there is a token
        loss_new_tokens=None if is_new is None else _mean(nll[is_new]),
        loss_old_tokens=None if is_new is None else _mean(nll[~is_new]),
        new_token_share=None if is_new is None else is_new.double().mean().item(),
        num_tokens=len(ids),
    )


def _warn_of_unknown_tokens(label: str, tokenizer: Tokenizer, ids: torch.Tensor, texts: Sequence[str]) -> None:
    """A text the tokenizer cannot spell becomes its unk token, whose one prediction stands for all those bytes:
    bits per byte then understate the model's loss (a model that always predicts unk scores well). The unk token
    written out in the text (`<|endoftext|>`, GPT-2's and SmolLM2's unk) is text it spells."""
    if tokenizer.unk_token_id is None:
        return
    written = sum(text.count(tokenizer.unk_token) for text in texts)
    unknown = int((ids == tokenizer.unk_token_id).sum()) - written
    if unknown > 0:
        logger.warning(f"{unknown} of the {len(ids)} held-out tokens of the {label} model ({unknown / len(ids):.1%}) "
                       f"are its tokenizer's unk token {tokenizer.unk_token!r}, which stands for text the tokenizer "
                       "cannot spell: its bits per byte and losses count each as one token, so they understate what "
                       "the model misses of this text. Compare it only with models scored on text their tokenizers "
                       "spell, or drop the lines it cannot spell.")


def _mean(values: torch.Tensor) -> float | None:
    return values.double().mean().item() if len(values) else None


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
