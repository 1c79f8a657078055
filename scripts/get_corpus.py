"""Build a held-out benchmark corpus from Debian's LibreOffice help in one more language (none of shared/data's).

The team's corpora (shared/data/mono) hold Russian, German and Vietnamese, the languages every recipe was measured
on. A language none of them was tuned on checks that a default holds elsewhere: this script fetches
`libreoffice-help-<language>` from the Debian archive (`apt-get download`: only the package registry is contacted),
takes the text of each help page's paragraphs, headings, list items and table cells, and cleans it as
shared/data/README.md describes its corpora (Unicode NFC, lines of at least 20 characters and 3 words, at least
70% of the letters in the language's script so that untranslated English drops out, exact duplicates removed).

    python scripts/get_corpus.py LANGUAGE OUT.txt.xz

LANGUAGE is one of `SCRIPTS` (a language written in its own script: Latin-script help pages keep too much
untranslated English to filter by script). Writes one paragraph per line, xz-compressed, through a temporary file.
"""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
import tempfile
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

SCRIPTS = {"el": "GREEK", "hi": "DEVANAGARI", "ko": "HANGUL"}
BLOCKS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td"}


class Paragraphs(HTMLParser):
    """The whitespace-normalized text of each block element of an HTML page (scripts and styles left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._parts: list[str] | None = None
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._hidden += tag in ("script", "style")
        if tag in BLOCKS:
            self.close_block()
            self._parts = []

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("script", "style")
        if tag in BLOCKS:
            self.close_block()

    def handle_data(self, data: str) -> None:
        if self._parts is not None and not self._hidden:
            self._parts.append(data)

    def close_block(self) -> None:
        if self._parts:
            self.found.append(" ".join("".join(self._parts).split()))
        self._parts = None


def in_script(line: str, script: str) -> bool:
    """At least 70% of the line's letters are of `script` (a prefix of their Unicode names)."""
    letters = [c for c in line if c.isalpha()]
    return bool(letters) and sum(unicodedata.name(c, "").startswith(script) for c in letters) >= 0.7 * len(letters)


def clean_lines(pages: list[Path], script: str) -> list[str]:
    kept: dict[str, None] = {}
    for page in pages:
        parser = Paragraphs()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        parser.close_block()
        for line in parser.found:
            line = unicodedata.normalize("NFC", line)
            if len(line) >= 20 and len(line.split()) >= 3 and in_script(line, script):
                kept.setdefault(line, None)
    return list(kept)


def help_pages(language: str, work: Path) -> list[Path]:
    """The help pages of `libreoffice-help-<language>`, downloaded and unpacked into `work`."""
    subprocess.run(["apt-get", "download", f"libreoffice-help-{language}"], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)
    package = next(work.glob("libreoffice-help-*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(package), str(work / "root")], check=True)
    return sorted((work / "root" / "usr/share/libreoffice/help" / language).rglob("*.html"))


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in SCRIPTS:
        sys.exit(f"usage: get_corpus.py LANGUAGE OUT.txt.xz, with LANGUAGE one of {sorted(SCRIPTS)}")
    language, out = sys.argv[1], Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as work:
        lines = clean_lines(help_pages(language, Path(work)), SCRIPTS[language])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, suffix=".tmp", delete=False) as handle:
        handle.write(lzma.compress("".join(f"{line}\n" for line in lines).encode("utf-8")))
    os.replace(handle.name, out)
    print(f"get_corpus: {len(lines):,} lines of {language} in {out}")


if __name__ == "__main__":
    main()
