"""Which output row comes from where, and the rows themselves, block by block.

The output vocabulary is the adapted one plus the instruct tokenizer's added tokens it lacks. Each output row is
- copied from instruct for the instruct tokenizer's added and special tokens (chat markers keep their tuning);
- for the other tokens the adapted vocabulary shares with the base one: the instruct row plus what CPT changed in
  the adapted row, mapped by W (`E_i[old] + (E_a[new] − E_b[old]) W`): exactly the instruct row when CPT left
  the row as it was, and `E_a W` corrected by the fit's own error on that token otherwise;
- for new tokens (and padding rows): the adapted row mapped by W (`E_a W`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from huggingface_hub.utils import tqdm

from ..errors import InvalidArgumentError, NonFiniteWeightsError
from ..record import ExtensionRecord
from .checks import refuse_non_finite
from .fit import Fit, FitPairs
from .shards import Matrix

__all__ = ["RowPlan", "fit_pairs", "propagated_bias", "propagated_blocks", "row_plan"]

_BLOCK_BYTES = 32 * 2**20


@dataclass(frozen=True)
class RowPlan:
    """Where each output row starts from.

    Attributes:
        old_of (`torch.Tensor`): per output row, the base/instruct id of the same token, or -1 (new or padding).
        copy_of (`torch.Tensor`): per output row, the instruct id whose row is copied as it is, or -1.
    """

    old_of: torch.Tensor
    copy_of: torch.Tensor

    @property
    def rows(self) -> int:
        return len(self.old_of)

    def counts(self, adapted_rows: int) -> dict[str, int]:
        copied = self.copy_of >= 0
        shared = (self.old_of >= 0) & ~copied
        mapped = int((~copied & ~shared)[:adapted_rows].sum())
        return {"mapped": mapped, "shared": int(shared.sum()), "copied_from_instruct": int(copied.sum())}


def row_plan(record: ExtensionRecord, adapted_rows: int, output_tokenizer: Any, instruct_tokenizer: Any,
             instruct_rows: int) -> RowPlan:
    """The plan for an output of `max(adapted_rows, len(output_tokenizer))` rows. An instruct special token beyond
    instruct's rows (Gemma-3's image token) has no row to copy: like a new token, it gets adapted's row mapped by W
    (the mean row extend gave it)."""
    rows = max(adapted_rows, len(output_tokenizer))
    old_of = torch.full((rows,), -1, dtype=torch.long)
    pairs = torch.tensor(record.shared_pairs(), dtype=torch.long).reshape(-1, 2)
    old_of[pairs[:, 0]] = pairs[:, 1]
    copy_of = torch.full((rows,), -1, dtype=torch.long)
    backend = output_tokenizer.backend_tokenizer
    for instruct_id, token in instruct_tokenizer.backend_tokenizer.get_added_tokens_decoder().items():
        if instruct_id < instruct_rows:
            copy_of[backend.token_to_id(token.content)] = instruct_id
    return RowPlan(old_of, copy_of)


def fit_pairs(kind: str, record: ExtensionRecord, base_tokenizer: Any) -> FitPairs:
    """The pairs W is fitted on: shared ordinary tokens (added and special ones left out), plus for `conversion`
    the decompositions of the new tokens."""
    added, size = set(base_tokenizer.backend_tokenizer.get_added_tokens_decoder()), len(base_tokenizer)
    single = sorted({old for _, old in record.shared_pairs() if old not in added and old < size})
    decomposed = [ids for ids in record.decomposition_lists() if ids]
    groups = decomposed if kind == "conversion" else []
    if kind != "swap" and not single and not groups:  # W would be fitted on nothing: all zeros
        fix = "method='conversion' (fitted on the new tokens' decompositions) or " if decomposed else ""
        raise InvalidArgumentError(
            f"method={kind!r} fits W on the ordinary tokens adapted's vocabulary shares with base's, and per adapted's "
            f"record there are none{'' if kind == 'overlap' else ', nor decompositions of new tokens'} (at most "
            f"special and added tokens are shared): pass {fix}method='swap' (W = I).")
    return FitPairs(torch.tensor(single, dtype=torch.long), groups)


def propagated_blocks(plan: RowPlan, fit: Fit, adapted: Matrix, base: Matrix, instruct: Matrix, *, side: str
                      ) -> Iterator[torch.Tensor]:
    """The output rows of one side in float32, in blocks of about 32 MB (see the module docstring).

    The blocks share reused memory (fresh memory costs a page fault per 4 kB): each is valid until the next one.
    """
    step = max(1, _BLOCK_BYTES // (4 * adapted.hidden))
    raw = [torch.empty(step * matrix.row_bytes, dtype=torch.uint8) for matrix in (adapted, base, instruct)]
    work = [torch.empty(step, adapted.hidden) for _ in range(2)]
    for start in tqdm(range(0, plan.rows, step), desc=f"Propagating rows ({side})", leave=False):
        stop = min(start + step, plan.rows)
        inside = max(0, min(stop, adapted.rows) - start)
        out = torch.zeros(stop - start - inside, adapted.hidden)
        if inside:
            old = plan.old_of[start : start + inside]
            shared = (old >= 0).nonzero().squeeze(1)
            delta = _as_float(adapted.read(start, start + inside, buffer=raw[0]), work[0])
            _add_rows(delta, shared, base.gather(old[shared], buffer=raw[1]), sign=-1)
            mapped = fit.apply(delta, out=work[1])
            _add_rows(mapped, shared, instruct.gather(old[shared], buffer=raw[2]), sign=1)
            out = torch.cat([mapped, out]) if len(out) else mapped
        copy = plan.copy_of[start:stop]
        copied = (copy >= 0).nonzero().squeeze(1)
        if len(copied):
            out[copied] = instruct.gather(copy[copied]).float()
        _check_block(out, (adapted, base, instruct), f"the output's {side} rows {start}..{stop - 1}")
        yield out


def _check_block(out: torch.Tensor, matrices: tuple[Matrix, Matrix, Matrix], found: str) -> None:
    """The block is finite, and stays so once cast to instruct's dtype (which the output is stored in).

    Raises:
        `NonFiniteWeightsError`: naming the input rows that are not finite, or the dtype the values overflow.
    """
    dtype = matrices[2].dtype
    low, high = torch.aminmax(out) if out.numel() else (torch.tensor(0.0), torch.tensor(0.0))
    if bool(torch.finfo(dtype).min <= low) and bool(high <= torch.finfo(dtype).max):  # False for NaN
        return
    if not bool(torch.isfinite(out).all()):
        refuse_non_finite(dict(zip(("adapted", "base", "instruct"), matrices, strict=True)), found=found)
    raise NonFiniteWeightsError(
        f"{found} reach {max(-float(low), float(high)):.4g}, beyond the range of {dtype} (at most "
        f"{torch.finfo(dtype).max:.4g}), instruct's dtype, in which the output is stored: they would be written as "
        "infinite. Rows that large suggest a diverged CPT of adapted; otherwise save instruct in bfloat16 or float32 "
        "first and propagate into that.")


def propagated_bias(plan: RowPlan, adapted: torch.Tensor, base: torch.Tensor, instruct: torch.Tensor, num_old: int
                    ) -> torch.Tensor:
    """The output's head bias (float32). A bias has no hidden space for W to map, so the rows' rules hold with W = I
    and one shift: the instruct bias plus what CPT changed for shared tokens, instruct's for its added tokens, and
    for new tokens (and padding) the adapted bias moved by the difference of the mean biases of the `num_old` old
    tokens, so that a new token extend gave base's mean bias gets instruct's."""
    adapted, base, instruct = adapted.double(), base.double(), instruct.double()
    shift = instruct[:num_old].mean() - base[:num_old].mean()
    out = torch.full((plan.rows,), float(instruct[:num_old].mean()), dtype=torch.float64)
    out[: len(adapted)] = adapted[: plan.rows] + shift
    shared = (plan.old_of >= 0).nonzero().squeeze(1)
    old = plan.old_of[shared]
    out[shared] = instruct[old] + adapted[shared] - base[old]
    copied = (plan.copy_of >= 0).nonzero().squeeze(1)
    out[copied] = instruct[plan.copy_of[copied]]
    return out.float()


def _as_float(rows: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
    """`rows` in float32: as they are, or converted into `work`."""
    return rows if rows.dtype == torch.float32 else work[: len(rows)].copy_(rows)


def _add_rows(target: torch.Tensor, index: torch.Tensor, rows: torch.Tensor, *, sign: int) -> None:
    """`target[index] += sign * rows` in place; without indexing when `index` is every row (the common block)."""
    if len(index) == len(target):  # index is sorted and unique: it is 0..n-1
        target.add_(rows, alpha=sign)
    else:
        target.index_add_(0, index, rows.to(target.dtype), alpha=sign)
