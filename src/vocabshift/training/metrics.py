"""Held-out metrics that compare models across tokenizers: bits per byte."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from huggingface_hub.utils import tqdm

from ..errors import InvalidArgumentError

__all__ = ["bits_per_byte"]


@torch.no_grad()
def bits_per_byte(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    context_length: int = 512,
    batch_size: int = 4,
    prefix_token_id: int | None = None,
) -> float:
    """Bits per UTF-8 byte of `texts` under a causal LM: comparable across tokenizers.

    The texts are joined by newlines, tokenized once and cut into windows of `context_length` tokens, each starting
    with `prefix_token_id` (default: the tokenizer's bos, else eos), so that every text token is scored exactly once.

    Returns:
        total negative log-likelihood in bits / total bytes of the joined text.
    """
    if not texts:
        raise InvalidArgumentError("texts is empty: pass at least one held-out line.")
    text = "\n".join(texts)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    prefix = prefix_token_id if prefix_token_id is not None else _default_prefix(tokenizer)
    step = context_length - 1
    windows = [[prefix, *ids[i : i + step]] for i in range(0, len(ids), step)]
    device = next(model.parameters()).device
    total = 0.0
    for start in tqdm(range(0, len(windows), batch_size), desc="Scoring held-out text", leave=False):
        total += _window_nll(model, windows[start : start + batch_size], device)
    return total / math.log(2) / len(text.encode("utf-8"))


def _default_prefix(tokenizer: Any) -> int:
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if prefix is None:
        raise InvalidArgumentError("The tokenizer has neither bos nor eos token: pass prefix_token_id.")
    return prefix


def _window_nll(model: Any, windows: list[list[int]], device: torch.device) -> float:
    """Summed NLL (nats) of every token after the first in each window."""
    width = max(map(len, windows))
    input_ids = torch.zeros(len(windows), width, dtype=torch.long)
    mask = torch.zeros(len(windows), width, dtype=torch.long)
    for row, window in enumerate(windows):
        input_ids[row, : len(window)] = torch.tensor(window)
        mask[row, : len(window)] = 1
    logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits[:, :-1].float()
    targets = input_ids[:, 1:].to(device).masked_fill(mask[:, 1:].to(device) == 0, -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum").item()
