"""What a method's options name, resolved before the method runs: methods read no file and train nothing.

`extend_vocabulary` calls `resolve_inputs` on the method's config: options named `word_vectors` (a path) are loaded,
`corpus` (text) becomes token-level fastText vectors trained on it (cached), and `helper_model` (a model) becomes
its input embedding matrix, checked against the new tokenizer. A registered method with options of those names gets
them resolved the same way.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import torch
from tokenizers import Tokenizer as BackendTokenizer

from ._typing import Tokenizer
from .embeddings import input_matrix, non_finite_rows
from .errors import HelperModelError
from .word_vector_training import train_word_vectors
from .wordvectors import WordVectors, load_word_vectors

__all__ = ["check_helper_vocabulary", "helper_matrix", "resolve_inputs"]

Config = TypeVar("Config")


def resolve_inputs(config: Config, new_tokenizer: Tokenizer) -> Config:
    """`config` with its `word_vectors`, `corpus` and `helper_model` options resolved (see the module docstring).

    Raises:
        `WordVectorsError`, `CorpusError`: vectors that cannot be read, text fastText cannot train on.
        `HelperModelError`: see `helper_matrix`.
    """
    assert dataclasses.is_dataclass(config) and not isinstance(config, type)
    names = {item.name for item in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    vectors, corpus = getattr(config, "word_vectors", None), getattr(config, "corpus", None)
    helper = getattr(config, "helper_model", None)
    if "corpus" in names and corpus is not None:
        changes.update(word_vectors=train_word_vectors(corpus, tokenizer=new_tokenizer), corpus=None)
    elif "word_vectors" in names and vectors is not None and not isinstance(vectors, WordVectors):
        changes["word_vectors"] = load_word_vectors(vectors)
    if "helper_model" in names and helper is not None:
        changes["helper_model"] = helper_matrix(helper, new_tokenizer)
    return dataclasses.replace(config, **changes) if changes else config


def helper_matrix(helper: Any, tokenizer: Tokenizer) -> torch.Tensor:
    """The helper's input embeddings `(rows, hidden)`, float32, whose row i belongs to token id i of `tokenizer`.

    Raises:
        `HelperModelError`: if the helper has no input embeddings, too few rows for `tokenizer`, far more rows than
            it (another tokenizer's model), a saved tokenizer whose vocabulary differs from `tokenizer`'s, or
            embeddings without values (meta device) or with NaN or infinite rows.
    """
    matrix = helper if isinstance(helper, torch.Tensor) else _input_embeddings(helper)
    if matrix.dim() != 2 or not matrix.is_floating_point():
        raise HelperModelError(
            f"helper_model embeddings have shape {tuple(matrix.shape)} and dtype {matrix.dtype}: pass a model with a "
            "2-D floating-point input embedding matrix."
        )
    size, rows = len(tokenizer), matrix.shape[0]
    if rows < size or rows > size + max(1024, size // 10):
        raise HelperModelError(
            f"helper_model has {rows} embedding rows but new_tokenizer has {size} tokens: its vocabulary does not "
            "match. Pass a helper trained with new_tokenizer, or new_tokenizer=<the helper's tokenizer>."
        )
    check_helper_vocabulary(getattr(helper, "name_or_path", None), tokenizer)
    _check_values(matrix)
    return matrix.detach().float()


def _check_values(matrix: torch.Tensor) -> None:
    """Rows to read: not on the meta device, and finite (SALT's least squares fail to converge on NaN or inf, far
    from the cause)."""
    if matrix.is_meta:
        raise HelperModelError(
            "helper_model's input embeddings are on the meta device: their values are not loaded (a model built "
            "under `torch.device('meta')`, or offloaded by a device_map). Load the helper's weights first, e.g. "
            "AutoModel.from_pretrained(...) without a device_map that offloads."
        )
    bad = non_finite_rows(matrix)
    if bad:
        raise HelperModelError(
            f"helper_model's input embedding rows {bad[:5]}{' ...' if len(bad) > 5 else ''} ({len(bad)} in all) hold "
            "NaN or infinite values (float16 overflows beyond 65504): load the helper's original weights again, in "
            "float32 or bfloat16, or repair those rows."
        )


def _input_embeddings(helper: Any) -> torch.Tensor:
    weight = input_matrix(helper)
    if weight is None:
        raise HelperModelError(
            f"helper_model is a {type(helper).__name__} without input embeddings: pass a transformers model "
            "(e.g. AutoModel.from_pretrained(...)) or its input embedding matrix as a tensor."
        )
    return weight


def check_helper_vocabulary(folder: str | Path | None, tokenizer: Tokenizer) -> None:
    """When the helper comes from a folder that holds its tokenizer, its vocabulary must be `tokenizer`'s.

    Raises:
        `HelperModelError`: naming the first differing pieces, or a tokenizer.json that cannot be read.
    """
    if not folder or not (path := Path(folder, "tokenizer.json")).is_file():  # a tensor, a model built in memory
        return
    try:
        saved = BackendTokenizer.from_file(str(path)).get_vocab(with_added_tokens=False)
    except Exception as error:  # tokenizers raises a bare Exception for a file it cannot parse
        raise HelperModelError(f"helper_model's tokenizer ({path}) cannot be read ({type(error).__name__}: {error}): "
                               "it is damaged. Save the helper's tokenizer there again (tokenizer.save_pretrained), "
                               "or pass the helper's input embedding matrix as a tensor.") from None
    expected = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    differing = sorted(set(saved.items()) ^ set(expected.items()), key=lambda item: item[1])[:3]
    if differing:
        raise HelperModelError(
            f"helper_model's tokenizer ({path}) differs from new_tokenizer (e.g. {differing}): SALT needs the "
            "helper's rows indexed by new_tokenizer's ids. Pass the helper's own tokenizer as new_tokenizer."
        )
