"""Generic, readable Markdown tables for whatever dicts and lists the record holds (CPT history, evaluation, ...)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Table", "cell", "tables"]

_MAX_CELL = 260  # a distillation objective with all its weights and switches fits


@dataclass(frozen=True)
class Table:
    """A Markdown table, or a text block when `header` is empty (`rows` then holds one line per row)."""

    caption: str
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = [f"**{self.caption}**", ""] if self.caption else []
        if not self.header:
            return "\n".join(lines + [row[0] for row in self.rows])
        lines.append("| " + " | ".join(self.header) + " |")
        lines.append("|" + "|".join("---" for _ in self.header) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


def cell(value: Any) -> str:
    """One table cell: short numbers, yes/no, compact JSON for nested values, pipes escaped."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def tables(value: Any, caption: str = "") -> list[Table]:
    """Tables for `value`: a list of dicts is one table (a row per item); in a dict, scalars make a two-column table,
    flat dicts one table with a row per key, deeper values tables of their own; a string is kept as text."""
    if value is None or value == {} or value == []:
        return []
    if isinstance(value, str):
        return [Table(caption, [], [[value]])]
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return [_records(value, caption)] if any(value) else []  # only empty entries: no column to show
    if isinstance(value, list):
        return [Table(caption, ["value"], [[cell(item)] for item in value])]
    if not isinstance(value, dict):
        return [Table(caption, [], [[cell(value)]])]
    flat = {key: item for key, item in value.items() if isinstance(item, dict) and item
            and all(_scalar(v) for v in item.values())}
    scalars = {key: item for key, item in value.items() if _scalar(item)}
    out = [Table(caption, ["", "value"], [[cell(k), cell(v)] for k, v in scalars.items()])] if scalars else []
    if flat:
        out.append(_records([{"": key, **item} for key, item in flat.items()], caption if not scalars else ""))
    for key, item in value.items():
        if key not in flat and key not in scalars:
            out += tables(item, f"{caption} · {key}" if caption else str(key))
    return out


def _records(items: list[dict[str, Any]], caption: str) -> Table:
    header: list[str] = []
    for item in items:
        header += [key for key in item if key not in header]
    return Table(caption, header, [[cell(item.get(key)) for key in header] for item in items])
