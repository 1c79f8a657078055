"""The shell commands of a generated card's "how to reproduce" block, from the record's command words and
histories (the earlier extensions' included)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..record import OUTPUT_PLACEHOLDER, ExtensionRecord

__all__ = ["card_command", "earlier_lines", "extend_lines", "history_lines", "path_word"]


def extend_lines(record: ExtensionRecord, output: str) -> list[str]:
    """The record's `vocabshift extend` command, one flag per line (`output` for a call made from Python, whose
    output folder the record cannot know)."""
    if not record.command:
        return [f"# the extend command is not in this record (vocabshift {record.vocabshift_version or '< 0.2'}): "
                "method, mode and seed are in the table above"]
    return _split_flags(record.command, output)


def _split_flags(command: Sequence[str], output: str) -> list[str]:
    """An extend command as shell words, one flag per line, `output` in place of `OUTPUT_PLACEHOLDER`."""
    words = [output if word == OUTPUT_PLACEHOLDER else word for word in command]
    lines: list[list[str]] = [[]]
    for word in words:
        if word.startswith("--"):
            lines.append([])
        lines[-1].append(shlex.quote(word))
    return [" \\\n    ".join(" ".join(line) for line in lines)]


def earlier_lines(record: ExtensionRecord) -> list[str]:
    """The commands of the earlier extensions (oldest first), each with its training and propagation: each writes
    the folder the next one starts from (its `source_model`), or the adapted folder its propagation read."""
    lines = []
    outputs = [entry.get("source_model") for entry in record.earlier[1:]] + [record.source_model]
    for entry, output in zip(record.earlier, outputs):
        cpt, lep = _entries(entry, "cpt"), _entries(entry, "propagation")
        if lep and isinstance(lep[-1], Mapping) and lep[-1].get("adapted"):
            output = lep[-1]["adapted"]  # the folder LEP read
        command, fingerprint = entry.get("command"), entry.get("new_tokenizer_sha256")
        if isinstance(fingerprint, str):
            lines.append(f"# new tokenizer: fingerprint starts {fingerprint[:16]}…")
        lines += (_split_flags(command, str(output or "path/to/extended-model")) if isinstance(command, list)
                  and command else [f"# an earlier extension (`{entry.get('method')}`): its command is not in the "
                                    "record (config.json, vocabshift.earlier)"])
        lines += history_lines(cpt, lep, "see config.json, vocabshift.earlier")
    return lines


def _entries(entry: Mapping[str, Any], key: str) -> list[Any]:
    """An earlier extension's `cpt` or `propagation` history (empty where the record holds none)."""
    value = entry.get(key)
    return value if isinstance(value, list) else []


def card_command(output: str, options: dict[str, Any]) -> str:
    """`vocabshift card` with the options the card was generated with (lists as repeated flags)."""
    parts = [f"vocabshift card {path_word(output)}"]
    for name, value in options.items():
        values = [] if value is None else [value] if isinstance(value, str) else list(value)
        parts += [f"--{name.replace('_', '-')} {shlex.quote(v)}" for v in values]
    return " ".join(parts)


def path_word(path: str) -> str:
    """`path` as one shell word that argparse reads as a path, not as a flag (a name such as `-ru` or `out ü`)."""
    return shlex.quote(f"./{path}" if path.startswith("-") else path)


def history_lines(cpt: list[Any], propagation: list[Any], where: str) -> list[str]:
    """The train and propagate commands in the order they ran: a CPT run after the propagations it counts (a run
    before 0.2 counts none), else `# then ...: {where}` for steps without one."""
    lines = []
    for index in range(len(propagation) + 1):
        runs = [run for run in cpt if isinstance(run, Mapping) and min(_count(run.get("propagations")),
                                                                         len(propagation)) == index]
        for step, entries in (("embedding-only continued pretraining", runs),
                              ("LEP propagation", propagation[index : index + 1])):
            commands = [words if isinstance(words, str) else shlex.join(words) for words in
                        (entry.get("command") for entry in entries if isinstance(entry, Mapping)) if words]
            lines += commands or ([f"# then {step}: {where}"] if entries else [])
    return lines


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
