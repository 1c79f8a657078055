"""The README is a short product page: its headline table is the results files' figures, its links resolve."""

from __future__ import annotations

import importlib.util
import re

from conftest import ROOT

README = ROOT / "README.md"


def _docs_results():
    spec = importlib.util.spec_from_file_location("docs_results", ROOT / "scripts" / "docs_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_headline_table_quotes_the_results_files():
    docs_results, text = _docs_results(), README.read_text(encoding="utf-8")
    start, end = (text.index(marker) for marker in docs_results.README_MARKERS)
    table = text[start + len(docs_results.README_MARKERS[0]) : end].strip()
    assert table == docs_results.headline_table(), "README out of date: run scripts/docs_results.py --write README.md"


def test_readme_is_a_short_page_whose_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def test_readme_names_the_repository_script_with_its_arguments():
    usage = re.search(r"usage: (get_smollm2\.sh [^\n]*)", (ROOT / "scripts" / "get_smollm2.sh").read_text()).group(1)
    mentions = re.findall(r"`([^`\n]*get_smollm2\.sh[^`\n]*)`", README.read_text(encoding="utf-8"))
    assert mentions and all(mention == f"scripts/{usage}" for mention in mentions), mentions
