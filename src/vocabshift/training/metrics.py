"""Held-out metrics that compare models across tokenizers: bits per byte, and the per-token losses behind it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from huggingface_hub.utils import tqdm

from .._typing import Model, Tokenizer
from ..errors import InvalidArgumentError

__all__ = ["bits_per_byte", "default_prefix", "token_nll"]


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

    The texts are joined by newlines, tokenized once and cut into windows of `context_length` tokens, each starting
    with `prefix_token_id` (default: the tokenizer's bos, else eos), so that every text token is scored exactly once.

    Returns:
        `(ids, nll)`: two 1-D tensors of the same length, the token ids (int64) and their losses (float32), on the
        CPU (the results; the model runs where it lives).
    """
    if not texts:
        raise InvalidArgumentError("texts is empty: pass at least one held-out line.")
    ids = tokenizer("\n".join(texts), add_special_tokens=False)["input_ids"]
    prefix = prefix_token_id if prefix_token_id is not None else default_prefix(tokenizer)
    step = context_length - 1
    windows = [[prefix, *ids[i : i + step]] for i in range(0, len(ids), step)]
    device = next(model.parameters()).device
    losses = []
    for start in tqdm(range(0, len(windows), batch_size), desc="Scoring held-out text", leave=False):
        losses.extend(_window_nll(model, windows[start : start + batch_size], device))
    nll = torch.cat(losses) if losses else torch.zeros(0, device="cpu")
    return torch.tensor(ids, dtype=torch.long, device="cpu"), nll


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

    Windows as in `token_nll`: every text token is scored exactly once.

    Returns:
        total negative log-likelihood in bits / total bytes of the joined text.
    """
    _, nll = token_nll(
        model, tokenizer, texts, context_length=context_length, batch_size=batch_size, prefix_token_id=prefix_token_id
    )
    return nll.double().sum().item() / math.log(2) / len("\n".join(texts).encode("utf-8"))


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


def _window_nll(model: Model, windows: list[list[int]], device: torch.device) -> list[torch.Tensor]:
    """For each window, the NLL (nats) of every token after the first."""
    width = max(map(len, windows))
    input_ids = torch.tensor([w + [0] * (width - len(w)) for w in windows], dtype=torch.long, device=device)
    mask = torch.tensor([[1] * len(w) + [0] * (width - len(w)) for w in windows], dtype=torch.long, device=device)
    logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1].float()
    targets = input_ids[:, 1:]
    # flattened: cross_entropy over (batch, classes, length) reads the transposed logits, several times slower
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets).float().cpu()
    return [nll[row, : len(window) - 1] for row, window in enumerate(windows)]
