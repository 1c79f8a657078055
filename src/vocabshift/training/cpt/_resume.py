"""Resume only into the training setup a checkpoint's optimizer state was built for.

An optimizer state saved for one set of trainable parameters and loaded into another is memory-unsafe: AdamW's
moments of whole matrices applied to split-off rows (or the reverse) crash the fused step or train on garbage.
`EmbeddingOnlyCallback` writes which rows trained next to each checkpoint it saves (`MARKER`). When a Trainer
resumes, it checks the marker and the number of parameters in the checkpoint's optimizer state while the
checkpoint's weights load, before the optimizer state does; the loaded state's shapes, before the first step.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from transformers import Trainer

from ...atomic import atomic_write_text
from ...errors import TrainingSetupError
from ...headers import json_object

__all__ = ["MARKER", "check_marker", "check_optimizer_size", "check_optimizer_state", "damaged_checkpoint_json",
           "install_resume_check", "read_checkpoint_json", "remove_resume_check", "resumed_checkpoint", "setup_of",
           "write_marker"]

MARKER = "vocabshift_training.json"
OPTIMIZER = "optimizer.pt"  # where the Trainer saves the optimizer state
RESUME_CHECK = "_vocabshift_resume_check"  # on the model: the handle of the load hook, until training ends


def setup_of(rows: Any, ids: torch.Tensor | None, parameters: list[torch.nn.Parameter]) -> dict[str, Any]:
    """What a run trains: the `rows` argument, how many rows, a digest of their ids, the trainable shapes."""
    digest = None if ids is None else hashlib.sha256(ids.cpu().numpy().tobytes()).hexdigest()[:16]
    return {"rows": rows if isinstance(rows, str) else "custom", "trainable_rows": None if ids is None else len(ids),
            "ids_sha256": digest, "shapes": [list(p.shape) for p in parameters]}


def write_marker(folder: str | os.PathLike[str], setup: dict[str, Any]) -> None:
    """Write the setup into the checkpoint folder (atomically, as the checkpoint's other files are readable)."""
    atomic_write_text(Path(folder, MARKER), json.dumps(setup, indent=2))


def check_marker(folder: str | os.PathLike[str], setup: dict[str, Any]) -> None:
    """Refuse to resume from `folder` when its marker records another training setup.

    Raises:
        `TrainingSetupError`: naming both setups and the fix.
    """
    path = Path(folder, MARKER)
    if not path.is_file():  # written by a plain Trainer: the optimizer state's size and shapes tell
        return
    saved = read_checkpoint_json(path, what="which rows the checkpoint trained", without="with the optimizer "
                                 "state's shapes as the only check")
    if {k: saved.get(k) for k in setup} != setup:
        raise TrainingSetupError(
            f"The checkpoint {str(folder)!r} was saved by EmbeddingOnlyCallback(rows={_rows(saved)}), and this run "
            f"trains rows={_rows(setup)}: its optimizer state belongs to other parameters. Resume with "
            f"EmbeddingOnlyCallback(rows={_rows(saved)}), or start a new run from the checkpoint's weights "
            "(from_pretrained(checkpoint), then train() without resume_from_checkpoint)."
        )


def read_checkpoint_json(path: Path, *, what: str, without: str) -> dict[str, Any]:
    """A JSON object vocabshift wrote into a checkpoint (`what` it records; `without`: how a resume goes on
    without it).

    Raises:
        `TrainingSetupError`: it is not valid JSON or not an object (written atomically, so edited or damaged).
    """
    return json_object(path, lambda why: damaged_checkpoint_json(path, what=what, without=without, why=why))


def damaged_checkpoint_json(path: Path, *, what: str, without: str, why: str) -> TrainingSetupError:
    """The error for a damaged file of `read_checkpoint_json`, or one whose values cannot be restored (`why`)."""
    return TrainingSetupError(
        f"{str(path)!r} cannot be read ({why}): it records {what}, and it is damaged. Resume from another "
        f"checkpoint, or delete the file to resume {without}."
    )


def check_optimizer_state(optimizer: Any, setup: dict[str, Any]) -> None:
    """Refuse an optimizer whose loaded state was saved by another kind of optimizer, or does not have the shapes of
    the parameters it steps.

    Raises:
        `TrainingSetupError`: before the first step would read the state.
    """
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper
    for group in inner.param_groups:
        _check_settings(inner, group)
        for parameter in group["params"]:
            for name, value in inner.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != parameter.shape:
                    raise TrainingSetupError(
                        f"The optimizer state loaded from the checkpoint ({name} of shape {list(value.shape)}) was "
                        f"built for other parameters than this run's (shape {list(parameter.shape)}; this run trains "
                        f"rows={_rows(setup)}). Resume with the EmbeddingOnlyCallback rows the checkpoint was "
                        "saved with, or start a new run from the checkpoint's weights (from_pretrained(checkpoint), "
                        "then train() without resume_from_checkpoint)."
                    )


def _check_settings(optimizer: Any, group: dict[str, Any]) -> None:
    """A group loaded from a checkpoint takes the saved optimizer's settings: another kind of optimizer (`optim`
    changed) lacks some of this one's, and its first step would fail on them (a raw `KeyError`)."""
    missing = sorted(name for name in optimizer.defaults if name not in group)
    if missing:
        raise TrainingSetupError(
            f"The optimizer state loaded from the checkpoint was saved by another optimizer than this run's "
            f"{type(optimizer).__name__} (its settings lack {', '.join(map(repr, missing))}): the optimizer changed "
            "since it was saved (TrainingArguments(optim=...)). Resume with the optim the checkpoint was saved with, "
            "or start a new run from the checkpoint's weights (from_pretrained(checkpoint), then train() without "
            "resume_from_checkpoint)."
        )


def install_resume_check(model: torch.nn.Module, setup: dict[str, Any]) -> None:
    """Check the checkpoint a Trainer resumes from against `setup` while its weights load (`resumed_checkpoint`),
    in place of the check an earlier run of the model left (built and abandoned, or interrupted)."""
    remove_resume_check(model)
    model.__dict__[RESUME_CHECK] = model.register_load_state_dict_pre_hook(
        functools.partial(_check_resumed_checkpoint, setup=setup))  # plain data: the model stays deep-copyable


def remove_resume_check(model: torch.nn.Module) -> None:
    handle = model.__dict__.pop(RESUME_CHECK, None)
    if handle is not None:
        handle.remove()


def _check_resumed_checkpoint(*args: Any, setup: dict[str, Any]) -> None:
    """The model's load hook: when a Trainer resumes, refuse its checkpoint before its optimizer state loads."""
    folder = resumed_checkpoint()
    if folder is not None and Path(folder).is_dir():
        check_marker(folder, setup)
        check_optimizer_size(folder, setup)


def resumed_checkpoint() -> str | None:
    """The checkpoint folder a Trainer resumes from, called while it loads the checkpoint's weights (None for any
    other load of the model's weights).

    transformers runs no callback event between loading a checkpoint's weights (`Trainer._load_from_checkpoint`)
    and loading its optimizer state, which fails with torch's own `ValueError` when the state was saved for other
    parameters: the callback's load hook on the model finds the folder in the Trainer's frame instead.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_load_from_checkpoint" and isinstance(frame.f_locals.get("self"), Trainer):
            folder = frame.f_locals.get("resume_from_checkpoint")
            return str(folder) if isinstance(folder, (str, os.PathLike)) else None
        frame = frame.f_back
    return None


def check_optimizer_size(folder: str | os.PathLike[str], setup: dict[str, Any]) -> None:
    """Refuse a checkpoint whose optimizer state holds another number of parameters than this run trains (saved
    without the callback: its optimizer stepped every parameter), before the Trainer loads it.

    Raises:
        `TrainingSetupError`: naming both numbers and the fix.
    """
    path = Path(folder, OPTIMIZER)
    if not path.is_file():  # saved without optimizer state (save_only_model=True): nothing is loaded
        return
    try:
        groups = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("param_groups", [])
    except (RuntimeError, EOFError, pickle.UnpicklingError) as error:
        raise TrainingSetupError(
            f"{str(path)!r} cannot be read ({type(error).__name__}): the checkpoint's optimizer state is damaged. "
            "Resume from another checkpoint, or start a new run from this checkpoint's weights "
            "(from_pretrained(checkpoint), then train() without resume_from_checkpoint)."
        ) from error
    saved = sum(len(group.get("params", [])) for group in groups)
    if saved != len(setup["shapes"]):
        raise _plain_checkpoint_error(folder, setup, saved)


def _plain_checkpoint_error(folder: str | os.PathLike[str], setup: dict[str, Any], saved: int) -> TrainingSetupError:
    """The error for a checkpoint whose optimizer state holds `saved` parameters, not this run's."""
    return TrainingSetupError(
        f"The checkpoint {str(folder)!r} was saved without EmbeddingOnlyCallback (its optimizer state holds {saved} "
        f"parameters, this run trains {len(setup['shapes'])}), and this run trains rows={_rows(setup)} only: its "
        "optimizer state does not fit. Start a new run from the checkpoint's weights (from_pretrained(checkpoint), "
        "then train() without resume_from_checkpoint), or resume without the callback as it was saved."
    )


def _rows(setup: dict[str, Any]) -> str:
    rows = setup.get("rows")
    return repr(rows) if rows != "custom" else f"[{setup.get('trainable_rows')} explicit ids]"
