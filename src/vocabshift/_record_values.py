"""The values of a vocabshift record read from config.json, checked.

A record is written by vocabshift, but config.json is a text file people edit, and a config merged from two models
can carry another model's record. A damaged value would otherwise fail far from its cause (a string of ranges as a
raw `ValueError` in the model card, ranges past the matrix as an `IndexError` in training), or pass silently (an
unknown mode). So `ExtensionRecord.from_dict` checks each field's type, the fields inside the tokenizer report and
the history entries that the model card and the commands read, and that the new ids' ranges lie inside the matrix,
and names the field that is wrong.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

from .errors import RecordError

__all__ = ["check_values", "damaged_record"]


def damaged_record(detail: str) -> RecordError:
    """The one error for a record that is there but damaged. Its fix keeps the weights: they do not depend on it."""
    return RecordError(f"The vocabshift record in config.json is damaged: {detail}. Restore config.json from the "
                       "folder vocabshift saved (the weights do not depend on the record).")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _list_of(kind: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, list) and all(isinstance(item, kind) for item in value)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _command(value: Any) -> bool:
    """A command as its words, or as one shell string (earlier versions wrote propagation's so) that splits."""
    if isinstance(value, str):
        try:
            return bool(shlex.split(value))
        except ValueError:  # an unclosed quote
            return False
    return isinstance(value, list) and all(isinstance(word, str) for word in value)


def _string_map(values: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, Mapping) and all(isinstance(key, str) and values(item)
                                                             for key, item in value.items())


_TEXT = (lambda value: isinstance(value, str), "a string")
_COUNT = (_count, "a whole number >= 0")
_FLAG = (lambda value: isinstance(value, bool), "true or false")
_MAPPING = (lambda value: isinstance(value, Mapping), "a mapping")
_HISTORY = (_list_of(Mapping), "a list of mappings")
_NAME = (_optional(lambda value: isinstance(value, str)), "a string or null")
_FOLDER = (_optional(lambda value: isinstance(value, bool)), "true, false or null")
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "method": _TEXT,
    "mode": (lambda value: value in ("extend", "replace"), "'extend' or 'replace'"),
    "seed": _COUNT,
    "source_model": _TEXT,
    "source_revision": _NAME,
    "source_is_folder": _FOLDER,
    "old_vocab_size": _COUNT,
    "old_num_rows": _COUNT,
    "new_vocab_size": _COUNT,
    "new_num_rows": _COUNT,
    "tied": _FLAG,
    "new_token_ranges": (_list_of(list), "a list of [start, stop] pairs"),
    "special_tokens": (_string_map(lambda value: value is None or _count(value)), "a mapping of token to id"),
    "source_tokenizer_sha256": _TEXT,
    "new_tokenizer_sha256": _TEXT,
    "tokenizer_sha256": _TEXT,
    "decompositions": (_string_map(lambda item: isinstance(item, str)), "a mapping of 'ids' and 'lengths' to "
                       "packed id lists"),
    "shared": _TEXT,
    "method_config": _MAPPING,
    "diagnostics": _MAPPING,
    "tokenizer_report": _MAPPING,
    "pad_to_multiple_of": (lambda value: value is None or _count(value), "a whole number or null"),
    "keep_source_segmentation": _FLAG,
    "method_options": _MAPPING,
    "command": (_list_of(str), "a list of strings"),
    "cpt": _HISTORY,
    "propagation": _HISTORY,
    "evaluations": _HISTORY,
    "vocabshift_version": _TEXT,
    "earlier": _HISTORY,
}
# Fields inside the tokenizer report and in each history entry, checked where present (an entry may lack any).
_COMMAND = (_command, "a list of strings")
_INNER: dict[str, dict[str, tuple[Callable[[Any], bool], str]]] = {
    "tokenizer_report": {
        **dict.fromkeys(("tokens_added", "tokens_dropped", "tokens_dropped_for_source"), _COUNT),
        "source_lines_checked": (_optional(_count), "a whole number >= 0 or null"),
        **dict.fromkeys(("target_tokens_per_word_before", "target_tokens_per_word_after", "source_lines_changed"),
                        (_optional(_number), "a number or null")),
    },
    "cpt": {"command": _COMMAND, "propagations": _COUNT},
    "evaluations": {"cpt_runs": _COUNT, "propagations": _COUNT},
    "propagation": {"command": _COMMAND, "method": _NAME,
                    **{f"{role}{suffix}": _NAME for role in ("base", "adapted", "instruct")
                       for suffix in ("", "_revision")}},
    "earlier": {"method": _NAME, "source_model": _NAME, "source_revision": _NAME, "source_is_folder": _FOLDER},
}


def check_values(data: Mapping[str, Any]) -> None:
    """Refuse a record (its known keys, read from config.json) with a value of another type than vocabshift writes,
    new-id ranges that are not increasing `[start, stop)` pairs inside its `new_num_rows` rows, or an extension that
    added no token (`RecordError`)."""
    for key, value in data.items():
        accepts, accepted = _CHECKS.get(key, (lambda _: True, ""))
        if not accepts(value):
            raise damaged_record(f"{key!r} is {value!r:.80}, where vocabshift writes {accepted}")
    _check_inner(data)
    if "ids" not in data["decompositions"] or "lengths" not in data["decompositions"]:
        raise damaged_record(f"'decompositions' lacks 'ids' or 'lengths' (it has {sorted(data['decompositions'])})")
    _check_ranges(data["new_token_ranges"], data["new_num_rows"])
    if data["mode"] == "extend" and data["new_vocab_size"] <= data["old_vocab_size"]:
        raise damaged_record(f"'new_vocab_size' is {data['new_vocab_size']}, not above 'old_vocab_size' "
                             f"({data['old_vocab_size']}), where an extension adds tokens")


def _check_inner(data: Mapping[str, Any]) -> None:
    """The fields of `_INNER` in the tokenizer report and in each history entry (their containers are checked)."""
    for key, fields in _INNER.items():
        value = data.get(key)
        entries: list[tuple[int | None, Mapping[str, Any]]] = (
            [(None, value)] if isinstance(value, Mapping) else list(enumerate(value or [])))
        for index, entry in entries:
            for name, (accepts, accepted) in fields.items():
                if name in entry and not accepts(entry[name]):
                    where = repr(key) if index is None else f"{key!r}[{index}]"
                    raise damaged_record(f"{where}[{name!r}] is {entry[name]!r:.80}, where vocabshift writes "
                                         f"{accepted}")


def _check_ranges(ranges: list[list[Any]], rows: int) -> None:
    """Each range a `[start, stop)` pair of ids, after the one before it, none past the matrix's `rows`."""
    stop = 0
    for pair in ranges:
        if len(pair) != 2 or not all(_count(end) for end in pair) or not stop <= pair[0] < pair[1] <= rows:
            raise damaged_record(f"'new_token_ranges' holds {pair!r:.40}, where vocabshift writes increasing "
                                 f"[start, stop) pairs of ids inside the matrix's {rows} rows ('new_num_rows')")
        stop = pair[1]
    if not ranges:
        raise damaged_record("'new_token_ranges' is empty: every record holds the new ids' ranges")
