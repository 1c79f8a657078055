"""What an initialization method returns, checked before anything is written: methods may be user-registered, and
their bugs must end in a `MethodResultError` that names the method, with the model as it was."""

from __future__ import annotations

import json
from typing import Any

import torch

from .embeddings import non_finite_rows
from .errors import MethodResultError, NonFiniteWeightsError
from .methods import InitContext, InitResult

__all__ = ["check_result"]


def check_result(result: Any, context: InitContext, method: str) -> None:
    """Refuse anything but an `InitResult` of finite real floating-point `(num_new, hidden)` rows (per side) and
    JSON diagnostics.

    Raises:
        `MethodResultError`: naming the method and what it returned.
        `NonFiniteWeightsError`: when rows are not finite because the model's own rows are not.
    """
    if not isinstance(result, InitResult):
        raise MethodResultError(f"Method {method!r} returned {type(result).__name__}, not an InitResult.")
    _check_diagnostics(result.diagnostics, method)
    shape = (context.num_new, context.source_input.shape[1])
    checked: list[tuple[str, Any]] = [("input_rows", result.input_rows)]
    if context.source_output is not None:
        checked.append(("output_rows", result.output_rows))
    elif result.output_rows is not None:
        raise MethodResultError(
            f"Method {method!r} returned output_rows for a model without an output embedding of its own (tied to "
            "the input embedding, or headless), where they would be dropped: return output_rows=None when "
            "context.source_output is None; the model is unchanged."
        )
    for name, rows in checked:
        problem = _problem(rows, shape)
        if problem is None and not torch.isfinite(rows).all():
            _refuse_non_finite_source(context)
            problem = "it holds NaN or infinite values"
        if problem is not None:
            raise MethodResultError(
                f"Method {method!r} returned {name} that are not a finite {shape} tensor of real floating-point "
                f"values ({problem}); the model is unchanged."
            )


def _problem(rows: Any, shape: tuple[int, int]) -> str | None:
    """What makes `rows` no tensor of real floating-point values of `shape` with values to read, if anything."""
    if not isinstance(rows, torch.Tensor):
        return f"it is a {type(rows).__name__}"
    if tuple(rows.shape) != shape:
        return f"its shape is {tuple(rows.shape)}"
    if not rows.dtype.is_floating_point:  # complex rows would lose their imaginary part, ints and bools be cast
        return f"its dtype is {rows.dtype}"
    if rows.is_meta:
        return "it is on the meta device, without values"
    return None


def _check_diagnostics(diagnostics: Any, method: str) -> None:
    """The record stores diagnostics in config.json: refuse what `json` cannot write, or writes as another thing."""
    try:
        json.dumps(diagnostics)
    except (TypeError, ValueError) as error:
        problem = f"{type(error).__name__}: {error}"
    else:
        if not isinstance(diagnostics, dict):
            problem = f"a {type(diagnostics).__name__}"
        elif not all(isinstance(key, str) for key in diagnostics):
            problem = f"keys {sorted({type(key).__name__ for key in diagnostics} - {'str'})} besides str"
        else:
            return
    raise MethodResultError(
        f"Method {method!r} returned diagnostics that are no JSON object ({problem}): return a dict of str keys "
        "to JSON values (numbers, strings, lists, dicts; a tensor as .tolist() or float(...)), which the record "
        "stores in config.json; the model is unchanged."
    )


def _refuse_non_finite_source(context: InitContext) -> None:
    """New rows are built from the model's own: blame non-finite ones there, not the method."""
    for name, rows in (("input embedding", context.source_input), ("output embedding", context.source_output)):
        bad = [] if rows is None else non_finite_rows(rows)
        if bad:
            tokens = context.source_tokenizer.convert_ids_to_tokens(bad[:5])
            raise NonFiniteWeightsError(
                f"The model's own {name} rows {bad[:5]}{' ...' if len(bad) > 5 else ''} ({len(bad)} in all; tokens "
                f"{tokens}) hold NaN or infinite values, and new rows are built from the model's rows; the model is "
                "unchanged. Load the model's original weights again (a failed training step or a bad conversion "
                "may have written them), or repair those rows before extending."
            )
