"""The body of a generated model card: the template variables, computed from the ExtensionRecord."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..errors import UnknownMethodError
from ..record import ExtensionRecord
from ..registry import get_method
from ..training.evaluation import Evaluation
from ._commands import card_command, earlier_lines, extend_lines, history_lines, path_word
from ._tables import Table, cell, tables

__all__ = ["body", "named_repo"]

LEP_URL = "https://arxiv.org/abs/2412.21140"
_CACHE_PATH = re.compile(r"models--([\w.-]+)--([\w.-]+)/snapshots/")
_AUTO_CLASSES = {"text-generation": "AutoModelForCausalLM", "fill-mask": "AutoModelForMaskedLM"}


def _valid_repo_id(text: str) -> bool:
    """`namespace/name` as the Hub accepts it (no `--` or `..`, allowed characters, length)."""
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return text.count("/") == 1 and not text.startswith((".", "/"))


def named_repo(entry: Any, key: str = "source_model") -> str | None:
    """The Hub repo id of the model that `entry[key]` names, None when that name is, or may be, a local folder.

    `entry` is a record (or an `earlier` one) with `key="source_model"`, or a propagation entry with `key` one of
    `base`, `adapted`, `instruct`. A path in the Hub cache gives its repo. Otherwise the name is a repo id only
    when the entry says it was no folder: a record's `source_is_folder` is False (`extend_vocabulary` writes it
    from `os.path.isdir(name_or_path)`, the test `from_pretrained` makes), or, in a record from before that field,
    `source_revision` holds the commit a Hub download reported; a propagation entry's `{key}_revision` holds the
    commit of a Hub repo and is null for a folder. A name the entry cannot place (an older record of a model
    loaded under transformers 5, which reports no commit) is taken as a possible folder: a relative path such as
    `models/base` looks like a repo id, and publishing it as `base_model` would name someone else's repo.
    """
    text = entry.get(key) if isinstance(entry, Mapping) else getattr(entry, key, None)
    if not isinstance(text, str) or not text:
        return None
    cached = _CACHE_PATH.search(text)
    if cached and _valid_repo_id(f"{cached.group(1)}/{cached.group(2)}"):
        return f"{cached.group(1)}/{cached.group(2)}"
    facts = entry if isinstance(entry, Mapping) else vars(entry)
    if key == "source_model":
        folder = facts.get("source_is_folder")
        remote = folder is False or (folder is None and facts.get("source_revision") is not None)
    else:
        remote = facts.get(f"{key}_revision") is not None
    return text if remote and _valid_repo_id(text) else None


def _link(entry: Any, key: str = "source_model", fallback: str = "a model") -> str:
    """The model `entry[key]` names, as a link to its Hub repo, else as code (a folder), else `fallback`."""
    repo, value = named_repo(entry, key), (entry.get(key) if isinstance(entry, Mapping) else getattr(entry, key))
    if repo is not None:
        return f"[{repo}](https://huggingface.co/{repo})"
    return f"`{value}`" if value else fallback


def _method(record: ExtensionRecord) -> dict[str, Any]:
    """Display name, paper and non-default options of the record's method (registered or not)."""
    try:
        spec = get_method(record.method)
    except UnknownMethodError:  # a method from a plugin that is not imported here: name and options only
        return {"name": record.method, "pretty_name": record.method, "paper_url": None,
                "options": dict(record.method_config)}
    defaults = {f.name: f.default for f in dataclasses.fields(spec.config_class)
                if f.default is not dataclasses.MISSING}
    options = {k: v for k, v in record.method_config.items() if k not in defaults or defaults[k] != v}
    return {"name": spec.name, "pretty_name": spec.pretty_name, "paper_url": spec.paper_url, "options": options}


def _ranges(record: ExtensionRecord) -> str:
    return ", ".join(f"{a}" if b == a + 1 else f"{a}–{b - 1}" for a, b in record.new_token_ranges)


def _placeholders(record: ExtensionRecord) -> str:
    """How many of an extension's new tokens are placeholders that only name padding rows (`vocab.placeholders`)."""
    count = record.new_vocab_size - record.old_vocab_size - len(record.new_ids)
    return f" ({count:,} of them unused placeholders for padding rows)" if record.mode == "extend" and count > 0 else ""


def _facts(record: ExtensionRecord, method: dict[str, Any]) -> Table:
    name = method["pretty_name"]
    rows = [["Method", f"[{name}]({method['paper_url']}) (`{method['name']}`)" if method["paper_url"]
             else f"{name} (`{method['name']}`)"],
            ["Mode", "extend: old tokens keep their ids and rows, new tokens are appended" if record.mode == "extend"
             else "replace: the new tokenizer is the vocabulary; rows of tokens it shares with the old one are copied"],
            ["Vocabulary", f"{record.old_vocab_size:,} → {record.new_vocab_size:,} tokens{_placeholders(record)}"],
            ["Embedding rows", f"{record.old_num_rows:,} → {record.new_num_rows:,}"],
            ["New tokens initialized", f"{len(record.new_ids):,} (ids {_ranges(record)})"],
            ["Output head", "tied to the input embeddings" if record.tied else "untied (initialized separately)"],
            ["Seed", str(record.seed)]]
    if record.mode == "replace":
        rows.insert(5, ["Rows copied from the base", f"{len(record.shared_pairs()):,}"])
    report = record.tokenizer_report
    if report.get("target_tokens_per_word_before") is not None:
        before, after = report["target_tokens_per_word_before"], report.get("target_tokens_per_word_after")
        rows.append(["Tokens per word (target text)", f"{cell(before)} → {cell(after)}"])
    if report.get("tokens_dropped"):
        rows.append(["New tokens left out (unreachable by the merged BPE)", f"{report['tokens_dropped']:,}"])
    return Table("", ["", ""], rows)


def _evaluation(record: ExtensionRecord, entry: dict[str, Any]) -> str:
    """An evaluation's table under what it measured: which model (the adapted one of a later propagation is not this
    model) and after how much training. Records before 0.2 do not say: their tables stand alone."""
    table = Evaluation.from_dict(entry).to_markdown()
    runs, lep = entry.get("cpt_runs"), entry.get("propagations")
    if runs is None or lep is None:
        return table
    measured = "this model" if lep >= len(record.propagation) else (
        f"{_link(record.propagation[lep], 'adapted', 'the adapted model')}, whose rows LEP carried into this "
        "model (not on this model itself)")
    done = [run["steps"] for run in record.cpt[:runs] if isinstance(run.get("steps"), int)]
    count = f" ({sum(done):,} steps)" if len(done) == runs else ""
    stage = ("right after the extension, before any training" if not runs else
             f"after the embedding-only continued pretraining below{count}" if runs >= len(record.cpt) else
             f"after the first {runs} of the {len(record.cpt)} continued-pretraining runs below{count}")
    return f"Measured on {measured}, {stage}:\n\n{table}"


def _lineage(record: ExtensionRecord) -> list[str]:
    chains = []
    for entry in record.propagation:
        steps = [_link(entry, key) for key in ("base", "adapted", "instruct") if entry.get(key)]
        method = f" (LEP `{entry['method']}`)" if entry.get("method") else ""
        chains.append(" → ".join(steps + [f"**this model**{method}"]))
    return chains


def _extensions(record: ExtensionRecord) -> str | None:
    """For a model extended more than once: the chain of models each extension started from."""
    if not record.earlier:
        return None
    steps = [f"{_link(entry)} (`{entry.get('method')}`)" for entry in record.earlier]
    return " → ".join([*steps, f"{_link(record)} (`{record.method}`)", "**this model**"])


def _reproduce(record: ExtensionRecord, output: str, repo_id: str, card_options: dict[str, Any]) -> list[str]:
    last = record.propagation[-1] if record.propagation else {}
    adapted = named_repo(last, "adapted")
    extended = adapted.split("/")[-1] if adapted else last.get("adapted") or output  # the folder LEP read
    version = f"=={record.vocabshift_version}" if record.vocabshift_version else ""
    lines = [f"pip install vocabshift{version}", *earlier_lines(record),
             f"# new tokenizer: the one whose vocabulary fingerprint (sha256 of its sorted (id, token) pairs, "
             f"vocabshift.vocab.fingerprint) starts {record.new_tokenizer_sha256[:16]}…",
             *extend_lines(record, extended)]
    lines += history_lines(record.cpt, record.propagation, "see the table above")
    return lines + [card_command(output, card_options), f"vocabshift push {path_word(output)} {shlex.quote(repo_id)}"]


def _shell_commands(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History entries with their commands (words in the record) as the shell line a reader copies."""
    return [{**entry, "command": shlex.join(entry["command"])} if entry.get("command") else entry for entry in entries]


def _limits(record: ExtensionRecord) -> list[str]:
    instruct = record.propagation[-1].get("instruct") if record.propagation else None
    owner = f"those of {_link(record.propagation[-1], 'instruct')}, " if instruct else "the base model's, "
    limits = ["vocabshift changed the vocabulary and the embedding rows (input and output); the transformer layers "
              f"are {owner}with its knowledge, biases and limitations."]
    if not record.cpt:
        limits.append("The new rows were initialized but not trained: expect weak text in the new language until "
                      "embedding-only continued pretraining.")
    if record.mode == "replace":
        limits.append("The vocabulary was replaced: text in the base model's languages is now cut by the new "
                      "tokenizer, which may segment it poorly.")
    changed = record.tokenizer_report.get("source_lines_changed")
    if changed:
        limits.append(f"The merged tokenizer segments {cell(100 * changed)}% of the measured source-language lines "
                      "differently from the base tokenizer.")
    return limits


def _base_link(record: ExtensionRecord, base_model: str | list[str] | None) -> str | None:
    """The model the card's first sentence says this one is, with a new vocabulary."""
    base = base_model[0] if isinstance(base_model, list) else base_model
    if record.propagation and record.propagation[-1].get("instruct"):  # LEP wrote instruct's weights (repo or folder)
        return _link(record.propagation[-1], "instruct")
    if record.earlier or not base:  # the last extension (the chain follows), or its source
        return _link(record) if record.source_model else None
    return f"[{base}](https://huggingface.co/{base})"  # a repo id: checked when given, named_repo's when not


def body(record: ExtensionRecord, *, title: str, repo_id: str, base_model: str | list[str] | None,
         pipeline_tag: str | None, plots: Sequence[str], transformers_version: str | None,
         card_options: dict[str, Any]) -> dict[str, Any]:
    """Template variables of the card's body."""
    method = _method(record)
    return {
        "title": title,
        "base_link": _base_link(record, base_model),
        "method": method,
        "record": record,
        "new_tokens": f"{len(record.new_ids):,}",
        "facts": _facts(record, method).rows,
        "options": sorted((k, cell(v)) for k, v in method["options"].items()),
        "diagnostics": [t.markdown() for t in tables(record.diagnostics)],
        "evaluation": [_evaluation(record, entry) for entry in record.evaluations],
        "cpt": [t.markdown() for t in tables(_shell_commands(record.cpt))],
        "plots": list(plots),
        "lineage": _lineage(record),
        "extensions": _extensions(record),
        "propagation": [t.markdown() for t in tables(_shell_commands(record.propagation))],
        "lep_url": LEP_URL,
        "repo_id": repo_id,
        "auto_class": _AUTO_CLASSES.get(pipeline_tag or "", "AutoModel"),
        "causal": pipeline_tag == "text-generation",
        "reproduce": _reproduce(record, title, repo_id, card_options),
        "limits": _limits(record),
        "versions": [("vocabshift", record.vocabshift_version or "unknown"),
                     ("transformers", transformers_version or "unknown")],
    }
