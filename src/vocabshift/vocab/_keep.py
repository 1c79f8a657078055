"""`keep_source_segmentation`: the new pieces that change how source-language lines are cut, left out of a merged
BPE model (with the pieces built from them) until the lines are cut as before."""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from typing import Any

from huggingface_hub.utils import tqdm
from tokenizers import Tokenizer

from ._splice import built_from, drop_pieces

__all__ = ["TARGET_LEAN", "keep_source"]

# keep_source_segmentation with target texts keeps a new token that changes source lines when it (with the tokens
# built from it, which go with it) is at least this many times as frequent, per token, in the target texts as in
# the source texts (measured: benchmarks/results/languages_*_english.md)
TARGET_LEAN = 4.0


def keep_source(state: dict[str, Any], texts: Sequence[str], first_new_id: int, target: Sequence[str]) -> int:
    """Drop the new pieces that appear when `texts` is cut by the merged model (with `target` lines: those not
    `TARGET_LEAN` times as frequent there, counting the pieces built from them), until none does; return how many.

    A source-language line is cut differently exactly when a new piece appears in it (old merges, pieces and
    entries never produce new ones), so once none appears every line is cut as before.
    """
    dropped = 0
    for _ in tqdm(range(16), desc="Keeping source segmentation", leave=False):
        backend = Tokenizer.from_str(json.dumps(state))
        counts, total = _new_piece_counts(backend, texts, first_new_id)
        used = {str(backend.id_to_token(i)): n for i, n in counts.items()}  # ids exist
        if target and used:
            share = _target_share(state, backend, target, first_new_id, used)
            used = {piece: n for piece, n in used.items() if share[piece] < TARGET_LEAN * n / total}
        if not used:
            return dropped
        dropped += drop_pieces(state, set(used), first_new_id=first_new_id)
    raise RuntimeError("keep_source_segmentation did not converge in 16 rounds")  # each round drops >= 1 piece


def _target_share(state: dict[str, Any], backend: Tokenizer, target: Sequence[str], first_new_id: int,
                  pieces: dict[str, int]) -> dict[str, float]:
    """The share of the target's tokens each piece accounts for with the pieces built from it (dropped with it)."""
    in_target, target_total = _new_piece_counts(backend, target, first_new_id)
    share = {}
    for piece, family in built_from(state["model"], pieces, first_new_id=first_new_id).items():
        ids = [backend.token_to_id(member) for member in family]
        share[piece] = sum(in_target.get(i, 0) for i in ids if i is not None) / target_total
    return share


def _new_piece_counts(backend: Tokenizer, texts: Sequence[str], first_new_id: int) -> tuple[dict[int, int], int]:
    """How often each new piece occurs when `texts` is cut, and how many tokens they are cut into in all."""
    counts: collections.Counter[int] = collections.Counter()
    total = 0
    for encoding in backend.encode_batch(list(texts), add_special_tokens=False):
        total += len(encoding.ids)
        counts.update(i for i in encoding.ids if i >= first_new_id)
    return dict(counts), max(total, 1)
