"""The README's method table is the registry's own output."""

from __future__ import annotations

import re
from pathlib import Path

from vocabshift.registry import method_table


def test_readme_method_table_matches_the_registry():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    start = text.index("<!-- methods:start")
    table = text[text.index("\n", start) + 1 : text.index("<!-- methods:end -->")].strip()
    assert table == method_table(), "README out of date: paste vocabshift.registry.method_table() between the markers"


def test_readme_names_the_repository_script_with_its_arguments():
    root = Path(__file__).resolve().parents[1]
    usage = re.search(r"usage: (get_smollm2\.sh [^\n]*)", (root / "scripts" / "get_smollm2.sh").read_text()).group(1)
    mentions = re.findall(r"`([^`\n]*get_smollm2\.sh[^`\n]*)`", (root / "README.md").read_text(encoding="utf-8"))
    assert mentions and all(mention == f"scripts/{usage}" for mention in mentions), mentions
