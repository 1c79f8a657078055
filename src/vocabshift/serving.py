"""The serving invariants of a saved model folder, for `inspect_folder`: what vLLM, TGI and llama.cpp rely on.

- every id below `config.vocab_size` decodes to a token: a server may sample any of them (vLLM can, and its
  detokenizer fails on an id without a token);
- the rows split evenly over tensor-parallel shards (TGI requires it; vLLM pads each shard itself);
- a `tokenizer.model` beside `tokenizer.json` holds the same pieces: `sentencepiece`, slow tokenizers and llama.cpp's
  converter read it instead;
- one set of weights: beside `model.safetensors`, a shard index would be what vLLM and llama.cpp's converter read;
- on request, the folder converts to GGUF (llama.cpp's converter, vocabulary only).
Violations are problems in a folder vocabshift wrote (it keeps these invariants), notes in any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._disk import scratch_folder
from ._typing import Tokenizer
from .errors import OutputWriteError, VocabShiftError
from .vocab.spm_file import sentencepiece_mismatch

if TYPE_CHECKING:
    from .inspection import Inspection

__all__ = ["SENTENCEPIECE_PROBLEM", "check_serving"]

SENTENCEPIECE_PROBLEM = "its tokenizer.model disagrees with tokenizer.json"


def check_serving(report: Inspection, config: Any, tokenizer: Tokenizer, rows: int | None, *, gguf: bool) -> None:
    """Add the serving facts of `report.folder` to `report`, and its violations."""
    complain = report.problems.append if report.record is not None else report.notes.append
    vocab_size = config.get_text_config().vocab_size
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    missing = [i for i, token in enumerate(tokens) if token is None]
    if missing:
        complain(f"ids below config vocab_size {vocab_size:,} without a token: {len(missing):,} (first "
                 f"{missing[:5]}); a server that samples one (vLLM can) cannot decode it: extend_vocabulary names "
                 "such rows with placeholder tokens")
    shards = _largest_power_of_two(rows) if rows else 0
    split = f"; the rows split evenly over up to {shards} tensor-parallel shards" if rows else ""  # rows unread
    report.facts.append(("serving", f"{vocab_size - len(missing):,} of {vocab_size:,} ids decode to a token{split}"))
    if rows and shards < 8:  # a choice (pad_to_multiple_of=1), not an inconsistency
        report.notes.append(f"{rows:,} rows split evenly over at most {shards} tensor-parallel shards: extend with "
                            "pad_to_multiple_of=128 for any power of two up to 128")
    for problem in _file_problems(report.folder):
        complain(problem)
    if gguf:
        _check_gguf(report)


def _file_problems(folder: Path) -> list[str]:
    """Files that other readers take instead of the ones transformers reads."""
    problems = []
    if all((folder / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")):
        problems.append("it holds both model.safetensors and model.safetensors.index.json: transformers loads "
                        "model.safetensors, vLLM and llama.cpp's converter the shards the index names; delete the "
                        "stale copy (model.safetensors, or the index with its shards)")
    mismatch = sentencepiece_mismatch(folder)
    if mismatch is not None:
        problems.append(f"{SENTENCEPIECE_PROBLEM} ({mismatch}): sentencepiece, slow tokenizers and llama.cpp's "
                        "converter read that file and would get another vocabulary; delete it (tokenizer.json is the "
                        "tokenizer) or save the folder again with vocabshift.save_pretrained_atomic")
    return problems


def _check_gguf(report: Inspection) -> None:
    """Convert the vocabulary to GGUF in a temporary folder: a fact when llama.cpp's converter takes it, a problem
    (its error) when it refuses."""
    from .export import export_gguf

    with scratch_folder("vocabshift-inspect-") as scratch:
        try:
            export_gguf(report.folder, scratch / "vocab.gguf", vocab_only=True)
        except OutputWriteError:  # the disk, not the model
            raise
        except (VocabShiftError, ImportError) as error:
            report.problems.append(f"it does not convert to GGUF: {error}")
            return
    report.facts.append(("GGUF", "converts (llama.cpp's converter, vocabulary only)"))


def _largest_power_of_two(rows: int) -> int:
    """The largest power of two that divides `rows`, at most 128."""
    return min(rows & -rows, 128)
