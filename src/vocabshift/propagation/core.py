"""`vocabshift.propagate`: Learned Embedding Propagation from an adapted base model into its instruct sibling."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..arguments import check_apart, check_flag, check_output_path, check_path, check_token
from ..atomic import atomic_folder
from ..errors import InvalidArgumentError, OutputExistsError, ShardError, SiblingMismatchError
from ..headers import Header, read_header
from ..record import ExtensionRecord, require_record
from ..save import save_tokenizer
from ..shard_index import check_weight_map
from ..vocab.load import load_tokenizer
from ..vocab.replace import replacement_tokenizer
from .checks import Model, check_config_rows, check_facts, check_lineage, check_siblings
from .fit import METHODS, Fit, fit_map
from .lineage import check_rows
from .outputs import copy_instruct_files, write_configs, write_index
from .plan import RowPlan, fit_pairs, propagated_bias, propagated_blocks, row_plan
from .shards import Blocks, Matrix, copy_shard, read_vector, write_shard
from .sources import find_layout, open_source

__all__ = ["propagate", "read_input_embeddings"]


def propagate(
    adapted: str | os.PathLike,
    base: str | os.PathLike,
    instruct: str | os.PathLike,
    *,
    output_dir: str | os.PathLike,
    method: str = "conversion",
    adapted_revision: str | None = None,
    base_revision: str | None = None,
    instruct_revision: str | None = None,
    token: str | bool | None = None,
    hardlink: bool = False,
) -> Path:
    """Carry the adapted embeddings of a base model into its instruct sibling (LEP, arXiv 2412.21140).

    W maps base space to instruct space (fitted in float64 on base/instruct rows, applied in float32, cast to the
    instruct dtype at the end; input embeddings and an untied head separately). New tokens get `E_adapted W`;
    other tokens the instruct row plus the CPT change mapped by W; the instruct tokenizer's added and special tokens
    keep their instruct rows. Shards are streamed: those without embedding tensors are copied byte for byte, the
    others rewritten tensor by tensor; no model is ever loaded.

    Args:
        adapted (`str | os.PathLike`): the base model after `extend_vocabulary` (and embedding-only CPT): a folder
            or a Hub repo id.
        base (`str | os.PathLike`): the base model it was extended from (folder or repo id).
        instruct (`str | os.PathLike`): the instruct sibling fine-tuned from `base` (folder or repo id).
        output_dir (`str | os.PathLike`): where to write the instruct model with the adapted vocabulary; must be
            new or empty. Written atomically (temporary sibling folder, then rename).
        method (`str`, defaults to `"conversion"`): `"swap"` (W = I), `"overlap"` (W fitted on the shared tokens)
            or `"conversion"` (shared tokens plus the new tokens' decompositions averaged on both sides).
        adapted_revision (`str`, *optional*): branch, tag or commit of `adapted` when it is a Hub repo.
        base_revision (`str`, *optional*): the same for `base`.
        instruct_revision (`str`, *optional*): the same for `instruct`.
        token (`str | bool`, *optional*): Hub token; defaults to the logged-in one.
        hardlink (`bool`, defaults to `False`): hard-link the instruct shards that hold no embeddings instead of
            copying them (same filesystem only). Saves time and space, but the output then shares those files with
            the instruct folder or the Hub cache: never write into them in place afterwards.

    Returns:
        `Path`: `output_dir`. Its `config.json` record gains a `propagation` entry (sources, revisions, method,
        fit residuals, row counts).

    Raises:
        `InvalidArgumentError`: unknown `method`, a revision for a local folder, an empty revision or token, an
            `output_dir` under a file, or an argument of the wrong type (`InvalidArgumentTypeError`).
        `OutputExistsError`: `output_dir` holds files.
        `ModelFolderError`: an input is neither a model folder nor a readable Hub repo, or has no safetensors.
        `ShardError`: a shard is missing, truncated or corrupted.
        `SiblingMismatchError`: base and instruct differ in architecture, hidden size, vocabulary or tying.
        `LineageError`: adapted was not extended from base (per its record, and per its rows of old tokens, which
            must equal base's unless CPT trained them), base and instruct look swapped, or instruct is base.
        `RecordError`: adapted carries no record, or one its folder does not match.
        `NonFiniteWeightsError`: an input's embedding rows that the output is made from hold NaN or infinite values.

    Example:
        ```python
        >>> vocabshift.propagate("out/smollm2-ru", "HuggingFaceTB/SmolLM2-135M",
        ...                      "HuggingFaceTB/SmolLM2-135M-Instruct", output_dir="out/smollm2-ru-instruct")
        ```
    """
    options = {"adapted": (adapted, adapted_revision), "base": (base, base_revision),
               "instruct": (instruct, instruct_revision)}
    _check_arguments(options, method, token, hardlink)
    target = _check_output_dir(output_dir)
    check_apart(output_dir, name="output_dir", adapted=adapted, base=base, instruct=instruct)
    models = {role: _model(value, role, revision, token) for role, (value, revision) in options.items()}
    record = _record(models["adapted"])
    check_facts(record, models["adapted"], models["base"], models["instruct"])
    check_rows(record, models["adapted"], models["base"], models["instruct"])
    headers = _all_headers(models["instruct"])
    with atomic_folder(target) as folder:
        models, tokenizer, plan, fits = _stream(models, headers, method, record, folder, hardlink)
        entry = _entry(models, method, fits, plan, options, target)
        save_tokenizer(tokenizer, folder, like=models["adapted"].tokenizer, shown_as=target)
        write_configs(folder, models["instruct"], record, entry, tokenizer, plan.rows)
        copy_instruct_files(folder, models["instruct"].source)
    return target


def _check_arguments(options: dict[str, tuple[Any, Any]], method: Any, token: Any, hardlink: Any) -> None:
    if method not in METHODS:
        raise InvalidArgumentError(f"method={method!r} is invalid: pass one of {', '.join(map(repr, METHODS))}.")
    for role, (value, revision) in options.items():
        check_path(value, name=role)
        if revision is not None and (not isinstance(revision, str) or not revision.strip()):
            raise InvalidArgumentError(f"{role}_revision={revision!r} is invalid: pass a branch, tag or commit of "
                                       f"the {role} Hub repo, or None.")
    check_token(token, booleans=True)
    check_flag(hardlink, name="hardlink")


def _check_output_dir(output_dir: str | os.PathLike) -> Path:
    target = check_output_path(output_dir, name="output_dir")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise OutputExistsError(f"output_dir={str(output_dir)!r} exists and is not an empty folder: pass a new or "
                                "empty folder (propagate never overwrites).")
    return target


def read_input_embeddings(value: str | os.PathLike, *, role: str) -> tuple[torch.Tensor, Path]:
    """A saved model's input embedding matrix, read from its safetensors shards alone, and the model's folder.

    For a model named by path or Hub id where the API takes its matrix (SALT's helper from the command line).

    Raises:
        `ModelFolderError`, `ShardError`: see `find_layout`.
    """
    model = _model(value, role, None, None)
    return model.input.gather(torch.arange(model.input.rows)), model.source.folder


def _model(value: Any, role: str, revision: str | None, token: str | bool | None) -> Model:
    """Open a source and its embedding matrices (downloads only the shards that hold them); no tokenizer yet."""
    source = open_source(value, role=role, revision=revision, token=token)
    layout = find_layout(source)
    headers = {name: read_header(source.file(name)) for name in sorted(layout.embedding_shards)}
    matrices = {}
    for side in ("input", "output"):
        key = layout.key(side)
        if key is not None:
            header = headers[layout.weight_map[key]]
            if key not in header.tensors:
                raise ShardError(f"{key} is not in {header.path} although the index of {role}={source.name!r} says "
                                 "so: the folder is corrupted; save or download it again.")
            matrices[side] = Matrix(header, key)
    bias = None if layout.bias is None else read_vector(headers[layout.weight_map[layout.bias]], layout.bias)
    model = Model(source, source.config(), layout, None, matrices["input"], matrices.get("output"), bias)
    check_config_rows(model)
    return model


def _checked(models: dict[str, Model], record: ExtensionRecord) -> dict[str, Model]:
    """The models with their tokenizers, once base and instruct are siblings and adapted descends from base."""
    models = {role: dataclasses.replace(model, tokenizer=load_tokenizer(str(model.source.folder), argument=role))
              for role, model in models.items()}
    check_siblings(models["base"], models["instruct"])
    check_lineage(record, models["adapted"], models["base"])
    return models


def _record(adapted: Model) -> ExtensionRecord:
    return require_record(adapted.config, what=f"adapted={adapted.source.name!r}",
                          fix="pass the model saved after extend_vocabulary and CPT.")


def _all_headers(instruct: Model) -> dict[str, Header]:
    """Every shard of instruct (downloaded when remote; only headers are read), checked against the index."""
    headers = {name: read_header(instruct.source.file(name)) for name in instruct.layout.shards}
    check_weight_map(instruct.layout.weight_map, headers, index=f"The index of instruct={instruct.source.name!r}")
    return headers


def _stream(models: dict[str, Model], headers: dict[str, Header], method: str, record: ExtensionRecord,
            folder: Path, hardlink: bool) -> tuple[dict[str, Model], Any, RowPlan, dict[str, Fit]]:
    """In a thread: copy the shards without embeddings while the tokenizers are loaded and checked, then fit W
    while the output tokenizer is built (not before the checks, so a refusal never waits for a fit). Then rewrite
    the embedding shards. An error anywhere cancels what is queued (the caller drops the folder)."""
    layout = models["instruct"].layout
    for name in layout.shards:  # an index may name shards in subfolders, "sub/model-00001-of-00002.safetensors"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        copies = [pool.submit(copy_shard, headers[name].path, folder / name, hardlink=hardlink)
                  for name in layout.shards if name not in layout.embedding_shards]
        models = _checked(models, record)
        pairs = fit_pairs(method, record, models["base"].tokenizer)
        pending = {side: pool.submit(fit_map, method, getattr(models["base"], side),
                                     getattr(models["instruct"], side), pairs, side=side)
                   for side in ("input", "output") if getattr(models["instruct"], side) is not None}
        tokenizer = replacement_tokenizer(models["instruct"].tokenizer, models["adapted"].tokenizer)
        plan = row_plan(record, models["adapted"].input.rows, tokenizer, models["instruct"].tokenizer,
                        models["instruct"].input.rows)
        fits = {side: fit.result() for side, fit in pending.items()}
        change = sum([_rewrite(headers[name], folder / name, models, plan, fits) for name in layout.embedding_shards])
        for copy in copies:
            copy.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    write_index(folder, layout, change)
    return models, tokenizer, plan, fits


def _rewrite(header: Header, target: Path, models: dict[str, Model], plan: RowPlan, fits: dict[str, Fit]) -> int:
    instruct = models["instruct"]
    replaced: dict[str, tuple[tuple[int, ...], torch.dtype, Blocks]] = {}
    for key, side in instruct.layout.sides.items():
        if key in header.tensors:
            matrices = [getattr(models[role], side) for role in ("adapted", "base", "instruct")]
            blocks = functools.partial(propagated_blocks, plan, fits[side], *matrices, side=side)
            replaced[key] = ((plan.rows, instruct.input.hidden), getattr(instruct, side).dtype, blocks)
    bias = instruct.layout.bias
    if bias is not None and bias in header.tensors and instruct.bias is not None:
        replaced[bias] = ((plan.rows,), instruct.bias.dtype, functools.partial(_bias_blocks, models, plan))
    return write_shard(target, header, replaced)


def _bias_blocks(models: dict[str, Model], plan: RowPlan) -> Iterator[torch.Tensor]:
    """The output's head bias, as one block (see `propagated_bias`).

    Raises:
        `SiblingMismatchError`: instruct has a head bias but adapted or base has none.
    """
    biases = [models[role].bias for role in ("adapted", "base", "instruct")]
    if any(bias is None for bias in biases):
        raise SiblingMismatchError("instruct has a head bias but adapted or base has none: pass the models of one "
                                   "architecture.")
    adapted, base, instruct = (bias for bias in biases if bias is not None)
    yield propagated_bias(plan, adapted, base, instruct, len(models["base"].tokenizer))


def _entry(models: dict[str, Model], method: str, fits: dict[str, Fit], plan: RowPlan,
           options: dict[str, tuple[Any, str | None]], output_dir: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {"method": method}
    for role in ("base", "adapted", "instruct"):
        entry[role] = models[role].source.name
        entry[f"{role}_revision"] = models[role].source.revision
    entry["fit"] = {side: fit.to_dict() for side, fit in fits.items()}
    entry["rows"] = plan.counts(models["adapted"].input.rows)
    entry["command"] = _command(method, options, output_dir)
    entry["vocabshift_version"] = __version__
    return entry


def _command(method: str, options: dict[str, tuple[Any, str | None]], output_dir: Path) -> list[str]:
    """The `vocabshift propagate` command that reproduces the call, as its words (as the record keeps commands)."""
    words = ["vocabshift", "propagate", *(str(value) for value, _ in options.values()), str(output_dir),
             "--method", method]
    for role, (_, revision) in options.items():
        if revision:
            words += [f"--{role}-revision", revision]
    return words
