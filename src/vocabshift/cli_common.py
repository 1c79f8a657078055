"""What every `vocabshift` subcommand module uses: the `subcommand` decorator, `arg`, and loading a model folder.

`cli.py` (extend, propagate, card, push, ...) and `cli_train.py` (train, evaluate, probe) register their subcommands
here; `cli.py` builds the parser from them. Neither imports the other's commands, so there is no import cycle.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import transformers

from ._typing import Model, Tokenizer
from .arguments import check_apart, check_repo_id
from .errors import InvalidArgumentError, ModelFolderError
from .headers import CONFIG_ERRORS, check_folder_files, read_config
from .save import check_replaceable
from .vocab.load import load_tokenizer

__all__ = ["SUBCOMMANDS", "Argument", "arg", "check_output", "load_model", "model_tokenizer", "subcommand"]

Argument = tuple[tuple[str, ...], dict[str, Any]]
Command = Callable[[argparse.Namespace], int]
SUBCOMMANDS: list[tuple[str, str, tuple[Argument, ...], Command]] = []
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # either: AutoTokenizer can load the folder


def arg(*names: str, **options: Any) -> Argument:
    """An argument of a subcommand, as `argparse.ArgumentParser.add_argument(*names, **options)` takes it."""
    return names, options


def subcommand(name: str, help: str, *arguments: Argument) -> Callable[[Command], Command]:
    """Register `function(args) -> exit code` as `vocabshift <name>` (decorator)."""

    def decorator(function: Command) -> Command:
        SUBCOMMANDS.append((name, help, arguments, function))
        return function

    return decorator


def load_model(path: str, *, argument: str = "model") -> Model:
    """A model folder or Hub id, loaded with the architecture saved in its config.

    Raises:
        `ModelFolderError`: a folder without config.json (or a corrupted one), or a path or repo id transformers
            cannot load. `ShardError`: a truncated or corrupted safetensors file.
    """
    _check_model_path(path, argument)
    if Path(path).is_dir():  # a truncated or corrupted shard is named, before transformers fails on it
        check_folder_files(Path(path), sorted(file.name for file in Path(path).iterdir()))
    try:
        config = transformers.AutoConfig.from_pretrained(path)
        architecture = (config.architectures or ["AutoModel"])[0]
        model, info = getattr(transformers, architecture, transformers.AutoModel).from_pretrained(
            path, output_loading_info=True, ignore_mismatched_sizes=True)  # a mismatch is named below
    except CONFIG_ERRORS as error:  # what transformers raises for missing, unknown or unreadable files
        why = f"{type(error).__name__}: {' '.join(str(error).split())}"
        raise ModelFolderError(f"{argument}={path!r} cannot be loaded ({why}): pass a folder written by "
                               "save_pretrained, or a Hub repo id.") from None
    _check_loaded(info, path, argument)
    return model


def _check_loaded(info: dict[str, Any], path: str, argument: str) -> None:
    """Refuse a model whose weights files lack tensors its config needs, or hold them in other shapes: transformers
    would initialize them at random and go on."""
    wrong = [f"{key} (missing)" for key in sorted(info["missing_keys"])]
    wrong += [f"{key} ({list(saved)} saved, {list(needed)} in config.json)"
              for key, saved, needed in sorted(info["mismatched_keys"])]
    if wrong:
        raise ModelFolderError(f"{argument}={path!r} does not hold the weights its config.json describes: "
                               f"{', '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''}. The folder is incomplete "
                               "or its files come from different models; save the model again.")


def model_tokenizer(path: str, *, argument: str = "model") -> Tokenizer:
    """The tokenizer saved with a model (folder or Hub id).

    Raises:
        `ModelFolderError`: as for `load_model`. `TokenizerLoadError`, `InvalidTokenizerError`: no tokenizer
            there, or not a fast one.
    """
    _check_model_path(path, argument)
    if Path(path).is_dir() and not any((Path(path) / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelFolderError(f"{argument}={path!r} holds no tokenizer ({' or '.join(_TOKENIZER_FILES)}): save "
                               "the tokenizer next to the model (tokenizer.save_pretrained(folder)).")
    return load_tokenizer(path, argument=f"the tokenizer of {argument}")


def check_output(output: str, *, holds: str = "model", **inputs: str | None) -> None:
    """Before any work: the output folder can be replaced as a whole (`save.check_replaceable`), and it is not an
    input folder, nor holds one, nor lies inside one (inputs are never written); `holds`: "model" or "tokenizer",
    what it is written with.

    Raises:
        `ModelFolderError`: see `check_replaceable`. `InvalidArgumentError`: naming the input.
    """
    check_apart(output, name="output_dir", **inputs)
    check_replaceable(output, name="output_dir", holds=holds)


def _check_model_path(path: str, argument: str) -> None:
    """A folder with config.json, or something that can be a Hub repo id (checked before anything is loaded)."""
    folder = Path(path)
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ModelFolderError(f"{argument}={path!r} has no config.json: pass a folder written by "
                                   "save_pretrained, or a Hub repo id.")
        read_config(folder)  # a JSON object, or the error says it is corrupted
    if not folder.exists():
        try:
            check_repo_id(path, argument=argument)
        except InvalidArgumentError:
            raise ModelFolderError(f"{argument}={path!r} is neither a folder nor a Hub repo id: check the "
                                   "path.") from None
