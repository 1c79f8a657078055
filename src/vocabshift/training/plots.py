"""PNG plots of training curves (matplotlib, an optional dependency: `pip install 'vocabshift[plot]'`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..atomic import atomic_file

__all__ = ["plot_curves", "require_matplotlib"]


def plot_curves(
    curves: Mapping[str, Sequence[tuple[int, float]]],
    path: str | os.PathLike,
    *,
    reference: tuple[str, float] | None = None,
    title: str = "",
    xlabel: str = "step",
    ylabel: str = "held-out bits per byte",
) -> Path:
    """Draw one line per curve (step, value) and an optional horizontal reference line; write a PNG atomically.

    Uses matplotlib's object API only (no pyplot), so the caller's backend and figures are left alone.

    Raises:
        `ImportError`: if matplotlib is not installed, with the pip command that adds it.
    """
    figure = require_matplotlib()(figsize=(7, 4.5), layout="constrained")
    axes = figure.subplots()
    for name, points in curves.items():
        steps, values = zip(*points)
        axes.plot(steps, values, marker="o", markersize=3, label=name)
    if reference is not None:
        axes.axhline(reference[1], color="grey", linestyle="--", label=reference[0])
    if xlabel == "step":
        axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    axes.grid(alpha=0.3)
    axes.legend()
    with atomic_file(path) as partial:
        figure.savefig(partial, format="png", dpi=120)
    return Path(path)


def require_matplotlib() -> Any:
    """matplotlib's `Figure` class.

    Raises:
        `ImportError`: if matplotlib is not installed, with the pip command that adds it.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "Writing the probe's PNG needs matplotlib, which is not installed: pip install 'vocabshift[plot]' "
            "(or pass output_dir=None to skip the files)."
        ) from None
    return Figure
