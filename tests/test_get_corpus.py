"""scripts/get_corpus.py's cleaning: the held-out benchmark corpora keep only the language's own paragraphs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import unicodedata

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "get_corpus.py"
PAGE = """<html><head><script>var s = "Ενεργοποιήστε τη JavaScript για τη σελίδα";</script></head><body>
<h1>Εισαγωγή πίνακα στο έγγραφο</h1>
<p>Επιλέξτε <span>Εισαγωγή</span> - Πίνακας για   να ανοίξετε
 τον διάλογο.</p>
<p>Choose Insert - Table to open the dialog box.</p>
<p>Άνοιγμα αρχείου</p>
<ul><li>Πατήστε το πλήκτρο Enter για να επιβεβαιώσετε.</li></ul>
<p>Επιλέξτε <span>Εισαγωγή</span> - Πίνακας για να ανοίξετε τον διάλογο.</p>
<table><tr><td>Ο πίνακας (table) έχει δύο στήλες LibreOffice Writer Calc.</td></tr></table>
<p>Η σελίδα \u03b1\u0301 έχει ένα σημείο.</p>
</body></html>"""


def _get_corpus():
    spec = importlib.util.spec_from_file_location("get_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_clean_lines_keep_the_languages_own_paragraphs_once(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    lines = _get_corpus().clean_lines([page, page], "GREEK")
    assert lines == [
        "Εισαγωγή πίνακα στο έγγραφο",  # a heading
        "Επιλέξτε Εισαγωγή - Πίνακας για να ανοίξετε τον διάλογο.",  # inline tags and line breaks joined, once
        "Πατήστε το πλήκτρο Enter για να επιβεβαιώσετε.",  # a list item with one Latin word
        "Η σελίδα \u03ac έχει ένα σημείο.",  # composed (NFC)
    ]  # gone: the script's text, the English paragraph, a two-word line, a cell that is half Latin letters
    assert all(unicodedata.is_normalized("NFC", line) for line in lines)


def test_an_unknown_language_is_refused_with_the_known_ones(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "fr", str(tmp_path / "fr.txt.xz")], capture_output=True,
                          text=True)
    assert done.returncode != 0 and "['el', 'hi', 'ko']" in done.stderr
    assert not list(tmp_path.iterdir())
