"""`vocabshift.probe`: rank initialization methods by held-out bits per byte after a short embedding-only CPT.

Step-0 figures mislead (every method starts worse than a uniform guess on real models); what matters is where a
method gets after a few steps of training. The probe gives every method the same data, order and seed.
"""

from __future__ import annotations

import copy
import itertools
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub.utils import tqdm

from .._typing import Model, TokenizerLike
from ..arguments import (
    check_count,
    check_output_path,
    check_positions,
    check_rate,
    check_seed,
    check_texts,
    model_positions,
)
from ..atomic import atomic_write_text
from ..embeddings import check_tokenizer
from ..errors import InvalidArgumentError, ModelFolderError
from ..extend import extend_vocabulary
from ..registry import build_config, get_method
from ..vocab.load import load_tokenizer
from ._probe_loop import Batches, train_probe_run
from .cpt.freeze import ROW_CHOICES
from .distill.weights import DistillationWeights
from .metrics import bits_per_byte, check_causal_lm
from .plots import plot_curves, require_matplotlib

__all__ = ["ProbeResult", "check_output_dir", "probe"]

logger = logging.getLogger(__name__)

SCORED_WINDOW = 512  # tokens per held-out window (evaluate's default), or the model's positions where fewer

_OBJECTIVES = {"next_token": DistillationWeights.next_token_only(),  # probe's loop reads no source text:
               "distillation": DistillationWeights(source=0.0)}  # its report says so


@dataclass(frozen=True)
class ProbeResult:
    """Curves of held-out bits per byte, one per method; `str(result)` is the ranking as a Markdown table.

    Attributes:
        curves (`dict[str, list[tuple[int, float]]]`): method -> (step, held-out bits per byte), step 0 included.
        original_bits_per_byte (`float`): the unchanged model with its own tokenizer, for reference.
        seconds (`dict[str, float]`): wall time per method (initialization, training and scoring).
        settings (`dict`): steps, batch size, context length, learning rate, ... of the run.
        table_path / plot_path (`Path | None`): the files written when `output_dir` was given.
    """

    curves: dict[str, list[tuple[int, float]]]
    original_bits_per_byte: float
    seconds: dict[str, float]
    settings: dict[str, Any]
    table_path: Path | None = None
    plot_path: Path | None = None
    ranking: list[str] = field(init=False)

    def __post_init__(self) -> None:
        # a run that diverged (NaN) ranks last: NaN compares false with everything, so it could have come first
        last = {method: curve[-1][1] for method, curve in self.curves.items()}
        object.__setattr__(self, "ranking", sorted(last, key=lambda m: (math.isnan(last[m]), last[m])))

    @property
    def best(self) -> str:
        """The method with the lowest held-out bits per byte after the last step."""
        return self.ranking[0]

    def to_markdown(self) -> str:
        steps = self.settings["steps"]
        lines = [f"| rank | method | bits/byte at step 0 | after {steps} steps | change | seconds |",
                 "|---|---|---|---|---|---|"]
        for rank, method in enumerate(self.ranking, 1):
            first, last = self.curves[method][0][1], self.curves[method][-1][1]
            lines.append(f"| {rank} | {method} | {first:.3f} | {last:.3f} | {last - first:+.3f} | "
                         f"{self.seconds[method]:.0f} |")
        s = self.settings
        lines += ["", f"Original model with its own tokenizer: {self.original_bits_per_byte:.3f} bits/byte "
                      "(no training).",
                  f"Embedding-only CPT ({s['mode']} mode, rows={s['rows']!r}, {_objectives(s['objectives'])}): "
                  f"{steps} steps of {s['batch_size']}×{s['context_length']} tokens, AdamW lr {s['learning_rate']:g}, "
                  f"weight decay {s['weight_decay']:g}, seed {s['seed']}; {s['held_out_lines']} held-out lines."]
        return "\n".join(lines)

    __str__ = to_markdown

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def _objectives(objectives: Mapping[str, Any]) -> str:
    """The objectives of a probe as its table says them: the probe's `distillation` reads no source text."""
    named = [f"{label} (without the source-language replay)" if label == "distillation" else label
             for label in objectives]
    return f"objective{'s' if len(named) > 1 else ''} {', '.join(named)}"


def probe(
    model: Model,
    new_tokenizer: TokenizerLike,
    train_texts: Sequence[str],
    held_out_texts: Sequence[str],
    *,
    methods: Sequence[str],
    objectives: Sequence[str | DistillationWeights] = ("next_token",),
    steps: int = 50,
    eval_every: int = 10,
    mode: str = "extend",
    source_tokenizer: TokenizerLike | None = None,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
    rows: str = "new",
    batch_size: int = 8,
    context_length: int = 128,
    learning_rate: float = 1e-3,
    weight_decay: float = 0.0,
    seed: int = 0,
    output_dir: str | os.PathLike | None = None,
) -> ProbeResult:
    """Initialize the new rows with each method, train `steps` embedding-only steps, rank by held-out bits per byte.

    Every (method, objective) run gets a fresh copy of `model`, the same batches in the same order and the same seed;
    the model passed in is not changed. Training is a plain loop over `freeze_for_embedding_training` with AdamW at a
    constant learning rate. Every argument is checked before any training.

    Args:
        model (`PreTrainedModel`): the causal LM before `extend_vocabulary`.
        new_tokenizer: the target-language tokenizer (as for `extend_vocabulary`).
        train_texts (`Sequence[str]`): target-language training text; lines are packed (joined by newlines) into
            sequences of up to `context_length` tokens, cut at a boundary both tokenizations share.
        held_out_texts (`Sequence[str]`): target-language text not in `train_texts`, scored every `eval_every` steps.
        methods (`Sequence[str]`): names from `vocabshift.list_methods()`.
        objectives (`Sequence`, defaults to `("next_token",)`): training objectives to compare, each on every
            method: `"next_token"` (plain cross-entropy), `"distillation"` (the `DistillationTrainer` default) or a
            `DistillationWeights`. With several, curves are named `"<method> / <objective>"`. The teacher is the
            model passed in.
        steps (`int`, defaults to 50): training steps.
        eval_every (`int`, defaults to 10): scoring interval, in steps.
        mode (`str`, defaults to `"extend"`): as for `extend_vocabulary`.
        source_tokenizer (*optional*): as for `extend_vocabulary`.
        method_options (`dict[str, dict]`, *optional*): options per method, e.g. `{"subword": {...}}`.
        rows (`str`, defaults to `"new"`): rows trained, as for `EmbeddingOnlyCallback`.
        batch_size (`int`, defaults to 8): sequences per step.
        context_length (`int`, defaults to 128): tokens per sequence.
        learning_rate (`float`, defaults to 1e-3): AdamW's learning rate.
        weight_decay (`float`, defaults to 0.0): AdamW's weight decay.
        seed (`int`, defaults to 0): seed of the initialization, of the batch order and of dropout.
        output_dir (*optional*): where to write `probe.md` (the table) and `probe.png` (the curves; needs
            matplotlib: `pip install 'vocabshift[plot]'`).

    Returns:
        `ProbeResult`: curves, ranking (`result.best`), and the written paths.

    Raises:
        `UnknownMethodError`: a name in `methods` that is not registered.
        `MethodOptionError`: an option that a method's config does not accept.
        `InvalidArgumentError`: texts that are not non-empty lists of strings, counts below 1, a context below 2
            tokens, rates that are not finite and positive, a negative seed, bad rows, an unknown method in
            `method_options`, too little training text.
        `ModelFolderError`: an `output_dir` that is a file (`InvalidArgumentError`: under a file).
        `ImportError`: `output_dir` without matplotlib.
        `VocabShiftError`: what `extend_vocabulary` raises for bad tokenizers.

    Example:
        ```python
        >>> result = vocabshift.probe(model, ru_tokenizer, ru_train, ru_held_out,
        ...                           methods=["random", "mean", "subword"], output_dir="probe")
        >>> result.best
        'subword'
        ```
    """
    options = _check(methods, method_options)
    if isinstance(objectives, (str, DistillationWeights)) or not isinstance(objectives, Sequence) or not objectives:
        raise InvalidArgumentError(f"objectives={objectives!r} is invalid: pass a list, e.g. ['next_token', "
                                   "'distillation'].")
    weights = {_label(o): _weights(o) for o in objectives}
    if len(weights) < len(objectives):
        raise InvalidArgumentError(f"objectives={list(objectives)!r} names an objective more than once: name each "
                                   "once.")
    train_texts = check_texts(train_texts, name="train_texts")
    held_out_texts = check_texts(held_out_texts, name="held_out_texts")
    counts = {"steps": steps, "eval_every": eval_every, "batch_size": batch_size, "context_length": context_length}
    for name, count in counts.items():
        check_count(count, name=name, minimum=2 if name == "context_length" else 1)
    check_seed(seed)
    check_rate(learning_rate, name="learning_rate")
    check_rate(weight_decay, name="weight_decay", positive=False)
    if rows not in ROW_CHOICES:
        raise InvalidArgumentError(f"rows={rows!r} is invalid: pass 'new' or 'all'.")
    if output_dir is not None:  # fail now, not after the whole run
        check_output_dir(output_dir, model=getattr(model, "name_or_path", None), new_tokenizer=new_tokenizer)
        require_matplotlib()
    embeddings = check_causal_lm(model, argument="model")
    check_positions(model, context_length, name="context_length", argument="model")
    new_tokenizer = load_tokenizer(new_tokenizer, argument="new_tokenizer")
    source = load_tokenizer(source_tokenizer if source_tokenizer is not None else model.name_or_path,
                            argument="source_tokenizer")
    check_tokenizer(model, source, embeddings.num_rows, argument="source_tokenizer")  # before the original is scored
    scoring = min(SCORED_WINDOW, model_positions(model) or SCORED_WINDOW)  # a model of fewer positions scores too
    original = bits_per_byte(model, source, held_out_texts, context_length=scoring)  # in eval mode
    curves, seconds, data = {}, {}, None
    for method, (label, objective) in tqdm(list(itertools.product(methods, weights.items())), desc="Probing"):
        start = time.perf_counter()
        candidate = copy.deepcopy(model)
        tokenizer = extend_vocabulary(candidate, new_tokenizer, method=method, mode=mode, source_tokenizer=source,
                                      seed=seed, **options.get(method, {}))
        data = data or Batches(model, tokenizer, source, train_texts, steps, batch_size, context_length, seed)
        name = method if len(weights) == 1 else f"{method} / {label}"
        curves[name] = train_probe_run(candidate, tokenizer, data, objective, held_out_texts, rows=rows,
                                       eval_every=eval_every, lr=learning_rate, weight_decay=weight_decay, seed=seed,
                                       scored_window=scoring)
        seconds[name] = time.perf_counter() - start
        del candidate
    settings = {"steps": steps, "batch_size": batch_size, "context_length": context_length, "rows": rows,
                "learning_rate": learning_rate, "weight_decay": weight_decay, "seed": seed, "mode": mode,
                "held_out_lines": len(held_out_texts), "objectives": {k: w.to_dict() for k, w in weights.items()}}
    result = ProbeResult(curves, original, seconds, settings)
    _warn_of_divergence(result)
    return result if output_dir is None else _write(result, Path(output_dir))


def _warn_of_divergence(result: ProbeResult) -> None:
    """Name the runs whose held-out bits per byte ended NaN or infinite (their rows diverged): ranked last."""
    diverged = [method for method in result.ranking if not math.isfinite(result.curves[method][-1][1])]
    if diverged:
        logger.warning(f"The probe runs {diverged} diverged (held-out bits per byte NaN or infinite after "
                       f"{result.settings['steps']} steps), so they rank last: probe again with a learning_rate "
                       f"lower than {result.settings['learning_rate']:g}.")


def _check(methods: Any, method_options: Any) -> dict[str, Any]:
    """The options of each method, once every name and option is known to be valid."""
    if isinstance(methods, str) or not isinstance(methods, Sequence) or len({*map(repr, methods)}) < len(methods) \
            or not methods:
        raise InvalidArgumentError(f"methods={methods!r} is invalid: pass a list of distinct names, e.g. ['mean', "
                                   "'subword'].")
    if method_options is not None and not isinstance(method_options, Mapping):
        raise InvalidArgumentError(f"method_options={method_options!r:.60} is invalid: pass a dict of method name to "
                                   "its options, e.g. {'subword': {'input_weighting': 'uniform'}}.")
    options = dict(method_options or {})
    unknown = sorted(set(options) - set(methods), key=repr)
    if unknown:
        raise InvalidArgumentError(f"method_options names {unknown}, which are not in methods={list(methods)}.")
    wrong = next((name for name, value in options.items() if not isinstance(value, Mapping)), None)
    if wrong is not None:
        raise InvalidArgumentError(f"method_options[{wrong!r}]={options[wrong]!r:.60} is invalid: pass a dict of "
                                   "that method's options, e.g. {'subword': {'input_weighting': 'uniform'}}, or {} "
                                   "for its defaults.")
    for method in methods:  # unknown names and bad options fail now, not after other methods have trained
        build_config(get_method(method), dict(options.get(method, {})))
    return options


def _weights(objective: Any) -> DistillationWeights:
    if isinstance(objective, DistillationWeights):
        return objective
    if objective not in _OBJECTIVES:
        raise InvalidArgumentError(f"objectives holds {objective!r}: pass 'next_token', 'distillation' or a "
                                   "DistillationWeights.")
    return _OBJECTIVES[objective]


def _label(objective: Any) -> str:
    if isinstance(objective, DistillationWeights):
        return "distillation(" + ", ".join(f"{k}={v:g}" for k, v in objective.to_dict().items()) + ")"
    return str(objective)


def check_output_dir(output_dir: Any, **inputs: Any) -> Path:
    """The folder probe writes probe.md and probe.png into: no file, and never inside an input folder (`inputs`:
    their paths by argument name; what is no existing folder, a Hub id or an object, is skipped).

    Raises:
        `ModelFolderError`: a file. `InvalidArgumentError`: inside an input folder, or no path.
    """
    folder = check_output_path(output_dir, name="output_dir")
    if folder.exists() and not folder.is_dir():
        raise ModelFolderError(f"output_dir={str(output_dir)!r} is a file: pass a folder, where probe writes probe.md "
                               "and probe.png.")
    for name, value in inputs.items():
        given = isinstance(value, (str, os.PathLike)) and str(value) != "" and Path(value).is_dir()
        if given and folder.resolve().is_relative_to(Path(value).resolve()):
            raise InvalidArgumentError(f"output_dir={str(output_dir)!r} is inside the input {name}={str(value)!r}, "
                                       "which vocabshift never modifies: pass another folder.")
    return folder


def _write(result: ProbeResult, folder: Path) -> ProbeResult:
    """Write the table and the PNG (each to a temporary name, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    s = result.settings
    plot = plot_curves(result.curves, folder / "probe.png",
                       reference=("original model, own tokenizer", result.original_bits_per_byte),
                       title=f"Embedding-only CPT probe: {s['batch_size']}×{s['context_length']} tokens/step, "
                             f"lr {s['learning_rate']:g}")
    table = atomic_write_text(folder / "probe.md", result.to_markdown() + "\n")
    return ProbeResult(result.curves, result.original_bits_per_byte, result.seconds, result.settings, table, plot)
