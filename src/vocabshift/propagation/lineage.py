"""Lineage from the tensors: adapted's rows of old tokens against base's and instruct's, on a sample of rows.

`extend_vocabulary` copies the rows of old tokens bit for bit (extend mode: every id of the old vocabulary;
replace mode: the record's shared pairs), and embedding-only CPT with `rows="new"` leaves them so. Those rows tell,
whatever the record says, whether `base` is the model adapted was made from and whether base and instruct were
swapped; base's rows against instruct's tell whether instruct is a sibling at all or base itself. Only a sample is
read (at most `_SAMPLE` pairs in 16 evenly spaced runs: a few `pread` calls per matrix, the same cost for any model
size); whole tensors are compared only when base and instruct agree on the sample.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .._record_values import damaged_record
from ..errors import LineageError
from ..headers import Header, TensorInfo, read_header
from ..record import ExtensionRecord
from .checks import Model, lineage_fix, refuse_non_finite
from .fit import spread_runs
from .shards import same_bytes
from .sources import Source

__all__ = ["check_rows"]

logger = logging.getLogger(__name__)
_SAMPLE = 512


def check_rows(record: ExtensionRecord, adapted: Model, base: Model, instruct: Model) -> None:
    """Refuse an instruct that is base itself, base and instruct swapped, and a base adapted was not made from.

    Run after `check_facts` (same hidden size; base has the rows the record names).

    Raises:
        `LineageError`: naming the argument that looks wrong. `RecordError`: shared rows beyond the matrices.
    """
    if base.source.folder.resolve() == instruct.source.folder.resolve():
        raise LineageError(_same_weights(base.source, instruct.source, "is the same model as"))
    pairs = _sampled_pairs(record, adapted, instruct)
    if not len(pairs):
        return
    rows = (adapted.input.gather(pairs[:, 0]), base.input.gather(pairs[:, 1]), instruct.input.gather(pairs[:, 1]))
    for role, model, block in zip(("adapted", "base", "instruct"), (adapted, base, instruct), rows, strict=True):
        if not bool(torch.isfinite(block).all()):  # NaN rows compare unequal: blame them, not the lineage
            refuse_non_finite({role: model.input}, found="the output")
    if bool(_equal_rows(rows[1], rows[2]).all()) and _identical(base, instruct):
        raise LineageError(_same_weights(base.source, instruct.source, "holds the same weights as"))
    trained = [entry.get("rows") for entry in record.cpt if entry.get("rows") != "new"]
    if trained:
        _check_trained(record, rows, base, instruct, f"CPT with rows={trained[0]!r}")
    else:
        _check_frozen(record, rows, base, instruct)


def _sampled_pairs(record: ExtensionRecord, adapted: Model, instruct: Model) -> torch.Tensor:
    """At most `_SAMPLE` of the record's `(adapted id, base id)` pairs of copied rows, in runs."""
    pairs = torch.tensor(record.shared_pairs(), dtype=torch.long).reshape(-1, 2)
    if len(pairs) and (pairs.min() < 0 or pairs[:, 0].max() >= adapted.input.rows):
        raise damaged_record(f"the rows adapted={adapted.source.name!r} copied from its source model (old_vocab_size, "
                             f"or 'shared' in replace mode) reach id {int(pairs[:, 0].max())} of its "
                             f"{adapted.input.rows} rows, or lie below 0")
    # old ids lie below record.old_num_rows, base's rows (`check_facts`); instruct's may be fewer (not siblings)
    return spread_runs(pairs[pairs[:, 1] < instruct.input.rows], total=_SAMPLE)


def _check_frozen(record: ExtensionRecord, rows: tuple[torch.Tensor, ...], base: Model, instruct: Model) -> None:
    """Nothing trained the old rows (per the record): adapted's must equal base's exactly."""
    equal = _equal_rows(rows[0], rows[1])
    if bool(equal.all()):
        return
    if bool(_equal_rows(rows[0], rows[2]).all()):
        raise LineageError(f"adapted's rows of old tokens differ from base's and equal instruct's "
                           f"({len(equal)} sampled rows): {_swapped(record, base, instruct)}.")
    why = ("its record says CPT trained only the new rows" if record.cpt else "its record shows no CPT (if a "
           "training loop of your own changed them, record it with vocabshift.record.add_cpt_entry(model, "
           "{'rows': 'all'}) before saving)")
    raise LineageError(f"adapted's rows of old tokens differ from base's ({int((~equal).sum())} of {len(equal)} "
                       f"sampled rows), although {why}: base={base.source.name!r} is not the model adapted was made "
                       f"from; {lineage_fix(record)}")


def _check_trained(record: ExtensionRecord, rows: tuple[torch.Tensor, ...], base: Model, instruct: Model,
                   trained: str) -> None:
    """CPT moved the old rows away from base's: they must still be nearer base's than instruct's."""
    adapted_rows, base_rows, instruct_rows = (block.double() for block in rows)
    to_base = float((adapted_rows - base_rows).norm() / base_rows.norm())
    to_instruct = float((adapted_rows - instruct_rows).norm() / instruct_rows.norm())
    if to_instruct < to_base:
        raise LineageError(f"adapted's rows of old tokens are closer to instruct's than to base's (relative "
                           f"distance {to_instruct:.3g} vs {to_base:.3g} over {len(base_rows)} sampled rows), "
                           f"although {trained} started from base's: {_swapped(record, base, instruct)}, or base is "
                           f"not the model adapted was made from; {lineage_fix(record)}")


def _swapped(record: ExtensionRecord, base: Model, instruct: Model) -> str:
    """The likely cause of adapted's old rows being instruct's: adapted is already a propagation's output (its rows
    of old tokens are then instruct's), else base and instruct were given in each other's place."""
    if record.propagation:
        into = record.propagation[-1].get("instruct")
        return (f"adapted is itself the output of a propagation into instruct={into!r} (per its record): pass as "
                "adapted the base model saved after extend_vocabulary and CPT, not a propagation's output")
    return (f"base and instruct look swapped; pass base={instruct.source.name!r} and "
            f"instruct={base.source.name!r}")


def _same_weights(base: Source, instruct: Source, relation: str) -> str:
    return (f"instruct={instruct.name!r} {relation} base={base.name!r}: LEP needs the instruct sibling fine-tuned "
            "from base; pass it as instruct.")


def _equal_rows(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Per row, whether the two are equal in the narrower of their dtypes (a bfloat16 copy of float32 rows is
    equal to them)."""
    dtype = first.dtype if first.dtype.itemsize <= second.dtype.itemsize else second.dtype
    return (first.to(dtype) == second.to(dtype)).all(dim=1)


def _identical(base: Model, instruct: Model) -> bool:
    """Whether instruct stores base's weights, tensor for tensor: embeddings first, then (base being a folder) the
    rest, since a sibling fine-tuned without touching its embeddings differs in its body only."""
    for first, second in ((base.input, instruct.input), (base.output, instruct.output)):
        if first is None or second is None:
            if first is not second:
                return False
        elif not _same_stored((first.path, first.info), (second.path, second.info)):
            return False
    if base.source.repo_id is not None:  # its other shards are not downloaded; reading them would cost a download
        logger.warning("instruct=%r stores the same embedding matrices as base=%r; vocabshift did not compare the "
                       "other weights (base is a Hub repo). Make sure instruct is the fine-tuned sibling.",
                       instruct.source.name, base.source.name)
        return False
    return _same_body(base, instruct)


def _same_body(base: Model, instruct: Model) -> bool:
    """Every tensor of instruct other than the embeddings is stored by base, with the same bytes."""
    headers: dict[tuple[str, str], Header] = {}

    def stored(model: Model, key: str) -> tuple[Path, TensorInfo] | None:
        shard = model.layout.weight_map.get(key)
        if shard is None:
            return None
        if (model.source.role, shard) not in headers:
            headers[model.source.role, shard] = read_header(model.source.file(shard))
        header = headers[model.source.role, shard]
        return (header.path, header.tensors[key]) if key in header.tensors else None

    return all(_same_stored(stored(base, key), stored(instruct, key))
               for key in instruct.layout.weight_map if key not in instruct.layout.sides)


def _same_stored(first: tuple[Path, TensorInfo] | None, second: tuple[Path, TensorInfo] | None) -> bool:
    """Two stored tensors of the same dtype and shape, byte for byte."""
    if first is None or second is None:
        return False
    (first_path, a), (second_path, b) = first, second
    return (a.dtype, a.shape) == (b.dtype, b.shape) and same_bytes(first_path, a.begin, second_path, b.begin,
                                                                   a.end - a.begin)
