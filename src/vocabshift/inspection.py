"""`inspect_folder`: check that a saved model folder is consistent, reading only headers and the tokenizer.

Checks: embedding rows against the config's vocabulary size and the tokenizer; the output head (tied, or untied
with as many rows); the ExtensionRecord against the folder; special token ids; a tokenizer round trip on a few
strings, including texts of new tokens; BPE merges that produce the new tokens; the serving invariants
(`serving.py`). Weights are never loaded: shapes come from the safetensors headers and parameter names from a model
built on the meta device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._typing import Tokenizer
from .arguments import check_flag, check_path
from .embeddings import embedding_names, grown_from, ordinary_beyond, stored_shape
from .errors import ModelFolderError, RecordError, ShardError, TokenizerLoadError
from .headers import load_config, read_config, read_header
from .record import ExtensionRecord, find_record, has_record
from .serving import check_serving
from .shard_index import check_weight_map, folder_files, read_weight_map
from .vocab._splice import merge_pairs
from .vocab.forms import backend_state
from .vocab.load import fingerprint, load_tokenizer

__all__ = ["Inspection", "inspect_folder"]

SAMPLES = ("The quick brown fox jumps over the lazy dog.", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
           "Grüße aus Köln: 3,5 km bis zum Dom!", "def f(x):\n    return x ** 2  # 😀")
_SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")
# special tokens with a role in text: one without a row is a problem (another may be embedded otherwise)
_ROLES = ("bos", "eos", "unk", "pad", "sep", "cls", "mask")


@dataclass
class Inspection:
    """What `inspect_folder` found: facts, notes (unusual but fine) and problems (the folder is inconsistent)."""

    folder: Path
    record: ExtensionRecord | None
    facts: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        lines = [f"{self.folder}: {'consistent' if self.ok else f'{len(self.problems)} problem(s)'}"]
        lines += [f"  {label}: {value}" for label, value in self.facts]
        lines += [f"  note: {note}" for note in self.notes] + [f"  PROBLEM: {problem}" for problem in self.problems]
        return "\n".join(lines)


def record_summary(record: ExtensionRecord) -> dict[str, Any]:
    """The record as a dict, packed id lists replaced by their sizes (for printing)."""
    data = record.to_dict()
    data["decompositions"] = f"{len(record.new_ids)} decompositions (packed)"
    data["shared"] = f"{len(record.shared_pairs())} shared pairs" + (" (packed)" if record.shared else "")
    data["earlier"] = [{**entry, **{key: "(packed)" for key in ("decompositions", "shared") if entry.get(key)}}
                       for entry in record.earlier]
    return data


def inspect_folder(folder: str | os.PathLike, *, gguf: bool = False) -> Inspection:
    """Check a saved model folder (see the module docstring for the list of checks).

    Args:
        folder (`str | os.PathLike`): a folder written by `save_pretrained` (model and tokenizer).
        gguf (`bool`, *optional*, defaults to `False`): also convert the vocabulary with llama.cpp's converter
            (`export_gguf(vocab_only=True)`, into a temporary folder) and report whether it converts.

    Returns:
        `Inspection`: `.ok` is False when a problem was found; `str(inspection)` is a readable report.

    Raises:
        `ModelFolderError`: the folder has no config.json (or one transformers cannot read) or no safetensors
            weights. A truncated or corrupted shard, a damaged record or tokenizer are problems in the report.

    Example:
        ```python
        >>> report = vocabshift.inspect_folder("out/smollm2-ru")
        >>> print(report); assert report.ok
        ```
    """
    folder = check_path(folder, name="folder")
    check_flag(gguf, name="gguf")
    raw, config = _read_config(folder)
    report = Inspection(folder, None)
    if not has_record(raw):
        report.notes.append("no vocabshift record in config.json: the folder was not written after extend_vocabulary")
    else:
        try:
            record = find_record(raw)
            assert record is not None  # has_record
            record.decomposition_lists()  # unpacked here, so that damage shows before training reads them
            report.record = record
        except RecordError as error:
            report.problems.append(str(error))
    rows, tied = _check_embeddings(report, folder, config)
    try:
        tokenizer = load_tokenizer(folder, argument="folder")
    except TokenizerLoadError as error:
        report.problems.append(f"the tokenizer cannot be loaded ({error})")
        return report
    _check_sizes(report, config, tokenizer, rows, tied)
    _check_special_ids(report, config, tokenizer, rows)
    _check_round_trip(report, tokenizer)
    _check_merges(report, tokenizer)
    check_serving(report, config, tokenizer, rows, gguf=gguf)
    return report


def _read_config(folder: Path) -> tuple[dict[str, Any], Any]:
    """config.json as JSON and as transformers reads it."""
    return read_config(folder), load_config(folder)


def _saved_shapes(report: Inspection, folder: Path) -> dict[str, list[int]]:
    """The shapes of every tensor in the readable shards; each unreadable shard, or an index its shards
    contradict, is a problem."""
    index = folder / "model.safetensors.index.json"
    try:
        files = [name for name in folder_files(folder) if name.endswith(".safetensors")]
        weight_map = read_weight_map(index) if index.is_file() else {}
    except ShardError as error:  # a corrupted index: a problem; the folder's own shards are still read
        report.problems.append(str(error))
        files, weight_map = sorted(path.name for path in folder.glob("*.safetensors")), {}
    if not files:
        raise ModelFolderError(f"{str(folder)!r} has no *.safetensors weights: pass a folder written by "
                               "save_pretrained.")
    headers, broken = {}, set()
    for name in files:
        try:
            headers[name] = read_header(folder / name)
        except ShardError as error:
            report.problems.append(str(error))
            broken.add(name)
    try:
        check_weight_map({key: shard for key, shard in weight_map.items() if shard not in broken}, headers,
                         index=repr(str(index)))
    except ShardError as error:
        report.problems.append(str(error))
    return {name: list(info.shape) for header in headers.values() for name, info in header.tensors.items()}


def _check_embeddings(report: Inspection, folder: Path, config: Any) -> tuple[int | None, bool]:
    shapes = _saved_shapes(report, folder)
    names = embedding_names(config)
    input_names, head_names, tied = names.input, names.head, names.tied
    shape = stored_shape(shapes, input_names)
    if shape is None:
        report.problems.append(f"no input embedding tensor ({', '.join(input_names)}) in the readable safetensors "
                               "files")
        return None, tied
    if len(shape) != 2:
        report.problems.append(f"the input embedding tensor ({', '.join(input_names)}) has shape {shape}, where an "
                               "embedding matrix has two dimensions (rows x width): the weights are damaged; save "
                               "the model again")
        return None, tied
    rows = shape[0]
    report.facts.append(("embedding rows", f"{rows:,} x {shape[1]:,}"))
    head = None if tied or not head_names else stored_shape(shapes, [n for n in head_names if n not in input_names])
    if head is not None and len(head) != 2:
        report.problems.append(f"the output head tensor has shape {head}, where it has two dimensions (rows x "
                               "width): the weights are damaged; save the model again")
        return rows, tied
    report.facts.append(("output head", "tied to the input embeddings" if tied else
                         "none" if not head_names else f"untied, {head[0]:,} rows" if head else "untied, MISSING"))
    if head_names and not tied and head is None:
        report.problems.append("the config says the output head is untied but no head tensor is stored: loading "
                               "would give it random rows")
    elif head is not None and head[0] != rows:
        report.problems.append(f"the output head has {head[0]:,} rows but the input embeddings {rows:,}")
    _check_bias(report, shapes, names.bias, rows)
    return rows, tied


def _check_bias(report: Inspection, shapes: dict[str, list[int]], names: list[str], rows: int) -> None:
    """A head bias holds one value per row: another length (a bias a tool left at the old width) makes
    from_pretrained refuse the folder."""
    shape = stored_shape(shapes, names)
    if shape is not None and shape != [rows]:
        report.problems.append(f"the output head's bias ({', '.join(names)}) has shape {shape} but the input "
                               f"embeddings {rows:,} rows: it was not resized with them, so from_pretrained would "
                               "refuse the folder; write the folder again (extend, or propagate)")


def _check_sizes(report: Inspection, config: Any, tokenizer: Tokenizer, rows: int | None, tied: bool) -> None:
    vocab_size = config.get_text_config().vocab_size
    report.facts.append(("tokenizer", f"{len(tokenizer):,} tokens ({type(tokenizer).__name__})"))
    if rows is not None and vocab_size != rows:
        report.problems.append(f"config vocab_size is {vocab_size:,} but the embeddings have {rows:,} rows")
    if rows is not None and ordinary_beyond(tokenizer, rows):  # special tokens past the rows: `_check_special_ids`
        report.problems.append(f"the tokenizer has {len(tokenizer):,} tokens but the model only {rows:,} rows: "
                               "ids beyond them would crash the model")
    record = report.record
    if record is None:
        return
    expected = {"rows": (record.new_num_rows, rows), "tokenizer size": (record.new_vocab_size, len(tokenizer)),
                "tying": (record.tied, tied)}
    grown = grown_from(tokenizer, record)
    if grown:  # its rows are checked against the tokenizer above
        del expected["rows"], expected["tokenizer size"]
        report.notes.append(f"{len(tokenizer) - record.new_vocab_size} token(s) added to the tokenizer after "
                            f"extend_vocabulary (ids from {record.new_vocab_size:,})")
    report.problems += [f"the record says {name} {recorded} but the folder has {found}"
                        for name, (recorded, found) in expected.items() if recorded != found and rows is not None]
    if not grown and record.tokenizer_sha256 != fingerprint(tokenizer):
        report.problems.append(f"the tokenizer is not the one extend_vocabulary returned (fingerprint "
                               f"{record.tokenizer_sha256[:12]}…): AutoTokenizer loads it as a "
                               f"{type(tokenizer).__name__} that may segment text differently")
    report.facts.append(("record", f"{record.method} ({record.mode}), {len(record.new_ids):,} new tokens, "
                                   f"seed {record.seed}, from {record.source_model or '(unnamed model)'}"))
    for entry in record.propagation:  # the layers are the last instruct model's, not the source's
        report.facts.append(("propagation", f"LEP {entry.get('method') or '?'} carried the rows of "
                                            f"{entry.get('adapted') or '?'} into {entry.get('instruct') or '?'}"))


def _check_special_ids(report: Inspection, config: Any, tokenizer: Tokenizer, rows: int | None) -> None:
    specials = {token: tokenizer.convert_tokens_to_ids(token) for token in tokenizer.all_special_tokens}
    report.facts.append(("special tokens", ", ".join(f"{t}={i}" for t, i in specials.items()) or "none"))
    limit = rows if rows is not None else len(tokenizer)
    roles = {getattr(tokenizer, f"{role}_token", None) for role in _ROLES}
    beyond = {t: i for t, i in specials.items() if i is None or i >= limit}
    report.problems += [f"special token {t} has id {i}, beyond the {limit:,} rows" for t, i in beyond.items()
                        if i is None or t in roles]
    report.notes += [f"special token {t} (id {i}) has no row: a model embeds such a token otherwise, never from its "
                     "rows (Gemma-3's image token)" for t, i in beyond.items() if i is not None and t not in roles]
    record = report.record
    if record is not None and record.special_tokens != {t: i for t, i in specials.items()  # not ones added after
                                                        if i is None or i < record.new_vocab_size}:
        report.problems.append(f"the record's special token ids {record.special_tokens} differ from the "
                               f"tokenizer's {specials}")
    text_config = config.get_text_config()
    for name in _SPECIAL_IDS:
        value = getattr(text_config, name, None)
        ids = value if isinstance(value, list) else [] if value is None else [value]
        report.problems += [f"config {name}={i} is beyond the {limit:,} rows" for i in ids if i >= limit]
        token = getattr(tokenizer, name.replace("_id", ""), None)
        if token is not None and ids and tokenizer.convert_tokens_to_ids(token) not in ids:
            report.notes.append(f"config {name}={value} but the tokenizer's {token} has id "
                                f"{tokenizer.convert_tokens_to_ids(token)}")


def _check_round_trip(report: Inspection, tokenizer: Tokenizer) -> None:
    """Decoding then re-encoding must give the same ids; the texts of new tokens must give back some new tokens."""
    new_ids = report.record.new_ids[:: max(1, len(report.record.new_ids) // 20)][:20] if report.record else []
    texts = list(SAMPLES) + [tokenizer.decode([i]) for i in new_ids]
    unstable = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] != ids:
            unstable.append(text)
    exact = sum(tokenizer.decode(tokenizer(t, add_special_tokens=False)["input_ids"]) == t for t in SAMPLES)
    report.facts.append(("round trip", f"{len(texts) - len(unstable)}/{len(texts)} texts re-encode to the same ids; "
                                       f"{exact}/{len(SAMPLES)} sample texts decode back exactly"))
    if unstable:
        report.problems.append(f"decoding then re-encoding changes the ids of {unstable[:3]!r}")
    produced = sum(i in tokenizer(tokenizer.decode([i]), add_special_tokens=False)["input_ids"] for i in new_ids)
    if new_ids and not produced:
        report.problems.append("the tokenizer never produces its new tokens, even on their own text")
    elif new_ids:
        report.facts.append(("new tokens", f"{produced}/{len(new_ids)} sampled new tokens come back from their text"))


def _check_merges(report: Inspection, tokenizer: Tokenizer) -> None:
    """In a BPE that applies its merges (no `ignore_merges`), a new token of several characters that no merge
    produces is never produced: its merges were lost (the sampled round trip may miss it)."""
    model = backend_state(tokenizer)["model"]
    if report.record is None or model.get("type") != "BPE" or model.get("ignore_merges"):
        return
    produced = {left + right for left, right in merge_pairs(model)}
    tokens = {index: token for token, index in model["vocab"].items()}
    lost = [tokens[i] for i in report.record.new_ids if len(tokens.get(i, "")) > 1 and tokens[i] not in produced]
    if lost:
        report.problems.append(f"{len(lost):,} new tokens (first {lost[:3]!r}) are produced by none of the "
                               "tokenizer's merges, so it never produces them: tokenizer.json is not the one "
                               "extend_vocabulary returned; save the tokenizer it returned again")
