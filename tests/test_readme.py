"""The README's method table is the registry's own output."""

from __future__ import annotations

from pathlib import Path

from vocabshift.registry import method_table


def test_readme_method_table_matches_the_registry():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    start = text.index("<!-- methods:start")
    table = text[text.index("\n", start) + 1 : text.index("<!-- methods:end -->")].strip()
    assert table == method_table(), "README out of date: paste vocabshift.registry.method_table() between the markers"
