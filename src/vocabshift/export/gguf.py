"""`export_gguf`: a saved model folder as one GGUF file, written by llama.cpp's own converter.

The converter runs in a child process (`_convert.py`), unchanged but for one lookup made in memory: the BPE
pre-tokenizer is named from the model's original tokenizer (`original.py`), because the new merges of an adapted
tokenizer change the ids llama.cpp hashes to recognize it. The GGUF is written to a temporary sibling and renamed
into place, so a failure leaves no partial file; the model folder is only read.
"""

from __future__ import annotations

import collections
import importlib.util
import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from huggingface_hub.utils import tqdm

from .._disk import scratch_folder
from ..arguments import check_choice, check_flag, check_output_path, check_path
from ..atomic import atomic_file
from ..embeddings import embedding_names, stored_shape
from ..errors import (
    ConversionError,
    InvalidArgumentError,
    ModelFolderError,
    OutputExistsError,
    TokenizerMismatchError,
    UnknownPreTokenizerError,
)
from ..headers import Header, check_links, load_config, missing_config, read_config
from ..record import find_record
from ..shard_index import check_folder_files, folder_files
from ..vocab.spm_file import sentencepiece_mismatch
from ._convert import UNKNOWN_PRE_TOKENIZER
from .llama_cpp import converter_dir
from .original import original_tokenizer

__all__ = ["OUTTYPES", "export_gguf"]

logger = logging.getLogger(__name__)

OUTTYPES = ("f32", "f16", "bf16", "q8_0")
# modules the converter imports beyond vocabshift's own requirements -> the package that provides each
_CONVERTER_NEEDS = {"sentencepiece": "sentencepiece", "yaml": "pyyaml"}
_WRITTEN = re.compile(r"\s*Writing:\s+(\d+)%")  # the converter's (gguf-py's) progress bar of the tensors written


def export_gguf(model_dir: str | os.PathLike, output_path: str | os.PathLike, *, outtype: str = "f16",
                vocab_only: bool = False, source_tokenizer: str | os.PathLike | None = None,
                llama_cpp: str | os.PathLike | None = None) -> Path:
    """Convert a saved model folder to GGUF with llama.cpp's converter, for llama.cpp, Ollama or LM Studio.

    A folder written after `extend_vocabulary` gets its BPE pre-tokenizer named from its original tokenizer, which
    llama.cpp recognizes where the adapted one is refused. In extend mode the original is rebuilt from the folder's
    tokenizer and checked against the ExtensionRecord's fingerprint; in replace mode (or when the rebuilt one does
    not match) pass `source_tokenizer`. A folder without a record is converted as llama.cpp converts it.

    Args:
        model_dir (`str | os.PathLike`): a folder written by `save_pretrained` (safetensors, config, tokenizer).
        output_path (`str | os.PathLike`): the .gguf file to write (replaced if it exists; never inside
            `model_dir`).
        outtype (`str`, *optional*, defaults to `"f16"`): the tensor type, one of `OUTTYPES`.
        vocab_only (`bool`, *optional*, defaults to `False`): write the vocabulary and metadata only (no tensors).
        source_tokenizer (`str | os.PathLike`, *optional*): the tokenizer of the model `model_dir` was made from
            (folder, tokenizer.json or Hub id); must have the fingerprint its record keeps.
        llama_cpp (`str | os.PathLike`, *optional*): a llama.cpp checkout whose `convert_hf_to_gguf.py` to run;
            default: the converter of `llama-cpp-python==LLAMA_CPP_PYTHON`, downloaded once from PyPI with pip and
            cached under `$VOCABSHIFT_CACHE` (`~/.cache/vocabshift`).

    Returns:
        `Path`: `output_path`.

    Raises:
        `ModelFolderError`: `model_dir` is not a folder with config.json (a JSON object), or (unless `vocab_only`)
            has no `*.safetensors` weights, both `model.safetensors` and a shard index, or embedding rows that are
            not its config's `vocab_size`.
        `ShardError`: a truncated or corrupted `*.safetensors` file or shard index.
        `InvalidArgumentError`: a bad `outtype` or `output_path`; replace mode without `source_tokenizer`;
            `source_tokenizer` for a folder without a record.
        `TokenizerMismatchError`: the original tokenizer (rebuilt or given) does not match the record, or the folder
            holds a tokenizer.model whose pieces are not its tokenizer's vocabulary (the converter would read it).
        `UnknownPreTokenizerError`: llama.cpp does not know the pre-tokenizer, or the adapted tokenizer does not cut
            text as its original does.
        `LlamaCppError`: no converter at `llama_cpp`, or the download failed.
        `ConversionError`: the converter failed (its last lines of output are in the message).
        `OutputExistsError`: `output_path` is an existing file that is not a GGUF.
        `ImportError`: a module the converter needs is missing (`pip install 'vocabshift[gguf]'`).

    Example:
        ```python
        >>> vocabshift.export_gguf("out/smollm2-ru", "out/smollm2-ru-f16.gguf")
        PosixPath('out/smollm2-ru-f16.gguf')
        ```
    """
    folder, output = _check_paths(model_dir, output_path)
    check_choice(outtype, OUTTYPES, name="outtype")
    check_flag(vocab_only, name="vocab_only")
    record = find_record(read_config(folder))
    if not vocab_only:  # a truncated or corrupted shard fails now, not inside the converter
        _check_weights(folder)
    if record is None and source_tokenizer is not None:
        raise InvalidArgumentError(f"source_tokenizer is given, but model_dir={str(folder)!r} carries no vocabshift "
                                   "record to check it against: leave it out (the folder's own tokenizer names its "
                                   "pre-tokenizer).")
    _check_converter_needs()
    if record is not None:
        _check_sentencepiece_file(folder)
    converter = converter_dir(llama_cpp)
    with scratch_folder("vocabshift-gguf-") as scratch:
        original = None if record is None else original_tokenizer(folder, record, Path(scratch) / "original",
                                                                   source_tokenizer=source_tokenizer)
        _convert(converter, folder, original, output, ["--outtype", outtype] + (["--vocab-only"] if vocab_only else []))
    return output


def _check_weights(folder: Path) -> None:
    """Safetensors weights, each shard whole (the converter writes a GGUF without tensors from a folder without
    any, and fails on a truncated one), one set of them, with the rows config.json names."""
    files = folder_files(folder)
    if not any(name.endswith(".safetensors") for name in files):
        raise ModelFolderError(f"model_dir={str(folder)!r} has no *.safetensors weights: pass a folder written by "
                               "save_pretrained, or vocab_only=True for the vocabulary alone.")
    headers = check_folder_files(folder, files)
    if {"model.safetensors", "model.safetensors.index.json"} <= set(files):  # the converter prefers the index
        raise ModelFolderError(
            f"model_dir={str(folder)!r} holds both model.safetensors and model.safetensors.index.json: transformers "
            "loads model.safetensors, llama.cpp's converter the shards the index names, so the GGUF could hold other "
            "weights than the model. Delete the stale copy (model.safetensors, or the index with the shards it names), "
            "or convert a copy of the folder without it; vocab_only=True (--vocab-only) reads no weights.")
    _check_rows(folder, headers)


def _check_rows(folder: Path, headers: dict[str, Header]) -> None:
    """The stored embedding rows are config.json's vocab_size, by which the converter sizes the vocabulary."""
    config = load_config(folder)
    shapes = {name: list(info.shape) for header in headers.values() for name, info in header.tensors.items()}
    shape, vocab_size = stored_shape(shapes, embedding_names(config).input), config.get_text_config().vocab_size
    rows = shape[0] if shape is not None and len(shape) == 2 else None
    if rows is not None and rows != vocab_size:
        raise ModelFolderError(
            f"model_dir={str(folder)!r} stores {rows} embedding rows but its config.json says vocab_size={vocab_size}: "
            "its files come from different models (from_pretrained refuses it too), and the GGUF would hold another "
            "number of tokens than rows, which llama.cpp cannot load. Save or download the model again.")


def _check_paths(model_dir: str | os.PathLike, output_path: str | os.PathLike) -> tuple[Path, Path]:
    folder, output = check_path(model_dir, name="model_dir"), check_output_path(output_path, name="output_path")
    if folder.is_dir():
        check_links(folder, f"model_dir={str(model_dir)!r}")
    if not (folder / "config.json").is_file():
        raise missing_config(folder, f"model_dir={str(model_dir)!r}")
    if output.is_dir() or output.resolve().is_relative_to(folder.resolve()):
        where = "is a folder" if output.is_dir() else "is inside model_dir, which vocabshift never modifies"
        raise InvalidArgumentError(f"output_path={str(output_path)!r} {where}: pass a .gguf file path elsewhere.")
    if output.is_file() and _head(output) != b"GGUF":  # replace an earlier GGUF, never other data
        raise OutputExistsError(f"output_path={str(output_path)!r} exists and is not a GGUF file: pass a new path, "
                                "or delete it first.")
    return folder, output


def _head(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(4)


def _check_converter_needs() -> None:
    missing = sorted(package for module, package in _CONVERTER_NEEDS.items()
                     if importlib.util.find_spec(module) is None)
    if missing:
        raise ImportError(f"llama.cpp's converter needs {', '.join(missing)}, which is not installed: "
                          "pip install 'vocabshift[gguf]'")


def _check_sentencepiece_file(folder: Path) -> None:
    """A tokenizer.model beside tokenizer.json holds its vocabulary: llama.cpp's converter reads it first (Llama-2,
    Mistral, Gemma), so one left from the source model would put the old vocabulary in the GGUF. vocabshift's own
    saves write one in step or none."""
    reason = sentencepiece_mismatch(folder)
    if reason is not None:
        raise TokenizerMismatchError(
            f"model_dir={str(folder)!r} holds a tokenizer.model that disagrees with its tokenizer.json ({reason}); "
            "llama.cpp's converter would read the tokenizer.model and write the wrong vocabulary. Save the folder "
            "with vocabshift.save_pretrained_atomic (which writes a tokenizer.model in step, or none), or convert a "
            "copy of the folder without tokenizer.model.")


def _convert(converter: Path, folder: Path, original: Path | None, output: Path, options: list[str]) -> None:
    """Run the converter in a child process, writing `output` through a temporary sibling."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(output) as partial:
        command = [sys.executable, str(Path(__file__).with_name("_convert.py")), str(converter),
                   str(original or "-"), str(folder), *options, "--outfile", str(partial)]
        logger.info("running llama.cpp's converter: %s", shlex.join(command))
        status, tail = _run(command, progress="--vocab-only" not in options)
        if status == UNKNOWN_PRE_TOKENIZER:
            raise UnknownPreTokenizerError(
                f"llama.cpp ({converter}) does not know the BPE pre-tokenizer of "
                f"{'the original tokenizer of ' if original else ''}model_dir={str(folder)!r}: a llama.cpp "
                "newer than the one used may know it (pass llama_cpp= a checkout); otherwise llama.cpp cannot "
                "tokenize as this model's tokenizer does.")
        if status != 0 or not partial.is_file():
            raise ConversionError(f"llama.cpp's converter ({converter}) failed on model_dir={str(folder)!r} with "
                                  f"exit status {status}; its last lines:\n" + "\n".join(tail))


def _run(command: list[str], *, progress: bool) -> tuple[int, list[str]]:
    """Run `command`; return its exit status and last lines of output. The converter's own progress bar (tensors
    written, in %) is followed by one of huggingface_hub's, which users can switch off."""
    tail: collections.deque[str] = collections.deque(maxlen=15)
    bar = tqdm(total=100, desc="Writing GGUF", unit="%", disable=not progress, leave=False)
    with bar, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace") as child:
        assert child.stdout is not None
        for line in child.stdout:  # text mode: the \r of a progress bar ends a line too
            tail.append(line.rstrip())
            if (written := _WRITTEN.match(line)) is not None:
                bar.update(int(written.group(1)) - bar.n)
    return child.returncode, list(tail)
