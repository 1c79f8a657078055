"""Held-out metrics that compare models across tokenizers: bits per byte, and the per-token losses behind it.

Each held-out text is scored as its own document, from a prefix token: a model then sees the same bytes of context
whatever its tokenizer. Windows of a fixed number of tokens over one joined stream would give a tokenizer that cuts
text into more tokens fewer bytes of context, and so a worse score that says nothing about its model.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from huggingface_hub.utils import tqdm

from .._typing import Model, Tokenizer
from ..arguments import check_count, check_positions, check_texts
from ..embeddings import Embeddings, find_embeddings
from ..errors import InvalidArgumentError, InvalidArgumentTypeError, UnsupportedModelError
from ..vocab.load import load_tokenizer

__all__ = ["bits_per_byte", "check_causal_lm", "default_prefix", "encode_texts", "eval_mode", "text_bytes",
           "token_nll"]


@torch.no_grad()
def token_nll(
    model: Model,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    context_length: int = 512,
    batch_size: int = 4,
    prefix_token_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every token of `texts` and its negative log-likelihood (nats) under a causal LM.

    Each text is scored on its own, as one document: `prefix_token_id` (default: the tokenizer's bos, else eos), then
    the text's tokens (without special tokens), so that two tokenizers give the model the same bytes of context. A
    text of more tokens than fit is cut into windows of `context_length` tokens, each again starting with the prefix.
    Every text token is scored exactly once; nothing between texts is. Windows of similar length share a batch of
    `batch_size`, so little of it is padding.

    Returns:
        `(ids, nll)`: two 1-D tensors of the same length, the token ids (int64) and their losses (float32) of every
        text in order, on the CPU (the results; the model runs where it lives).

    Raises:
        `InvalidArgumentError`: `texts` is empty or gives no token, `context_length` below 2, `batch_size` below 1,
            `prefix_token_id` not a row of the model, or the tokenizer has no bos or eos and no `prefix_token_id` is
            given.
        `InvalidArgumentTypeError`: `texts` is not a list of strings, `model` not a model, or a count not an int.
        `UnsupportedModelError`: a model without an LM head or with weights not loaded.
        `InvalidTokenizerError`: `tokenizer` is not a fast tokenizer.
    """
    check_causal_lm(model, argument="model")
    tokenizer = load_tokenizer(tokenizer, argument="tokenizer")
    texts = _check_texts(texts)
    check_positions(model, check_count(context_length, name="context_length", minimum=2), name="context_length",
                    argument="model")
    check_count(batch_size, name="batch_size")
    prefix = default_prefix(tokenizer) if prefix_token_id is None else _check_prefix(prefix_token_id, model)
    encoded = encode_texts(tokenizer, texts, argument="tokenizer")
    step = context_length - 1
    windows = [[prefix, *text[i : i + step]] for text in encoded for i in range(0, len(text), step)]
    losses = _batched_nll(model, windows, batch_size)
    ids = torch.tensor([token for text in encoded for token in text], dtype=torch.long, device="cpu")
    return ids, torch.cat(losses) if losses else torch.zeros(0, device="cpu")


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], *, argument: str) -> list[list[int]]:
    """The token ids of each text (no special tokens), once some text is known to give a token.

    Raises:
        `InvalidArgumentError`: no text gives a token (the tokenizer's normalizer drops every character of them:
            blanks, control or zero-width characters), so their bytes would score 0 bits.
    """
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    if not any(encoded):
        named = f" ({tokenizer.name_or_path!r})" if tokenizer.name_or_path else ""
        raise InvalidArgumentError(f"texts give no token under {argument}{named}: it drops every character of them "
                                   "(blanks, control or zero-width characters), so they would score 0 bits per byte. "
                                   "Pass held-out lines with text.")
    return encoded


def check_causal_lm(model: Model, *, argument: str) -> Embeddings:
    """`model`'s embeddings, once it is known to be a loaded model with an LM head (what held-out scoring needs).

    Raises:
        `InvalidArgumentTypeError`: not a model. `UnsupportedModelError`: no LM head, or weights not loaded.
    """
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise InvalidArgumentTypeError(f"{argument} is a {type(model).__name__}: pass a loaded causal LM, e.g. "
                                       "AutoModelForCausalLM.from_pretrained(folder).")
    embeddings = find_embeddings(model)
    if embeddings.head is None:
        raise UnsupportedModelError(f"{argument} ({type(model).__name__}) has no LM head: held-out scoring needs a "
                                    "causal language model; load it with AutoModelForCausalLM.")
    return embeddings


def bits_per_byte(
    model: Model,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    context_length: int = 512,
    batch_size: int = 4,
    prefix_token_id: int | None = None,
) -> float:
    """Bits per UTF-8 byte of `texts` under a causal LM: comparable across tokenizers.

    Each text is scored as its own document, as in `token_nll`, so that every tokenizer gives the model the same
    bytes of context.

    Returns:
        total negative log-likelihood in bits / total UTF-8 bytes of the texts (`text_bytes`).

    Raises:
        `InvalidArgumentError`: as `token_nll`, and texts without a byte.
    """
    texts = _check_texts(texts)  # read once: token_nll and text_bytes both go through them
    num_bytes = text_bytes(texts)
    if num_bytes == 0:
        raise InvalidArgumentError("texts holds only empty strings: pass held-out lines with text.")
    _, nll = token_nll(
        model, tokenizer, texts, context_length=context_length, batch_size=batch_size, prefix_token_id=prefix_token_id
    )
    return nll.double().sum().item() / math.log(2) / num_bytes


def text_bytes(texts: Sequence[str]) -> int:
    """UTF-8 bytes of `texts`, what bits per byte divide by: no separator between texts, as none is scored."""
    return sum(len(text.encode("utf-8")) for text in texts)


def default_prefix(tokenizer: Tokenizer) -> int:
    """The token each scored window starts with: bos, else eos.

    Raises:
        `InvalidArgumentError`: the tokenizer has neither.
    """
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if prefix is None:
        raise InvalidArgumentError("The tokenizer has neither a bos nor an eos token to start each scored window: "
                                   "set its bos_token or eos_token (token_nll and bits_per_byte also take "
                                   "prefix_token_id).")
    return prefix


def _check_texts(texts: Sequence[str]) -> Sequence[str]:
    """A non-empty collection of strings (empty ones score nothing): a single string would be scored as its
    characters. Any iterable is read once (`check_texts`)."""
    if isinstance(texts, Sequence) and not isinstance(texts, (str, bytes)) and not texts:
        raise InvalidArgumentError("texts is empty: pass at least one held-out line.")
    return check_texts(texts, name="texts", blanks=True)


def _check_prefix(prefix_token_id: int, model: Model) -> int:
    """An id of one of the model's input embedding rows."""
    rows = find_embeddings(model).num_rows
    check_count(prefix_token_id, name="prefix_token_id", minimum=0)
    if prefix_token_id >= rows:
        raise InvalidArgumentError(f"prefix_token_id={prefix_token_id} is invalid: the model has {rows} embedding "
                                   f"rows; pass an id below {rows} (the tokenizer's bos or eos, by default).")
    return prefix_token_id


def _batched_nll(model: Model, windows: list[list[int]], batch_size: int) -> list[torch.Tensor]:
    """`_window_nll` of every window, in order; windows of similar length share a batch, so little is padding."""
    # longest first: a batch too large for the device fails at once, not at the end
    order = sorted(range(len(windows)), key=lambda index: -len(windows[index]))
    losses = [torch.zeros(0)] * len(windows)
    device = next(model.parameters()).device
    with eval_mode(model):  # a model in train mode (a loop scoring between steps) would score through dropout
        for start in tqdm(range(0, len(order), batch_size), desc="Scoring held-out text", leave=False):
            rows = order[start : start + batch_size]
            for row, nll in zip(rows, _window_nll(model, [windows[row] for row in rows], device)):
                losses[row] = nll
    return losses


@contextlib.contextmanager
def eval_mode(model: Model) -> Iterator[None]:
    """Score without dropout, then give the model back in the mode it was in."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def _window_nll(model: Model, windows: list[list[int]], device: torch.device) -> list[torch.Tensor]:
    """For each window, the NLL (nats) of every token after the first."""
    width = max(map(len, windows))
    input_ids = torch.tensor([w + [0] * (width - len(w)) for w in windows], dtype=torch.long, device=device)
    mask = torch.tensor([[1] * len(w) + [0] * (width - len(w)) for w in windows], dtype=torch.long, device=device)
    # the last token is only a target: the model reads one position fewer
    logits = model(input_ids=input_ids[:, :-1], attention_mask=mask[:, :-1]).logits.float()
    targets = input_ids[:, 1:]
    # flattened: cross_entropy over (batch, classes, length) reads the transposed logits, several times slower
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets).float().cpu()
    return [nll[row, : len(window) - 1] for row, window in enumerate(windows)]
