"""What the documentation quotes, read where it lives: benchmark figures from benchmarks/results/, the method table
from the registry, the command line's help from its parser.

mkdocs runs this file as a hook (`hooks:` in mkdocs.yml). In a page, a line that is one of these comments is
replaced by what it names:

    <!-- results FILE -->           the results file FILE (under benchmarks/results/), without its title, its
                                    headings one level down
    <!-- results FILE#HEADING -->   the part of FILE under that heading
    <!-- headline -->               the headline table: per language, the recipe against cross-entropy and the fair
                                    control after 100 steps, and English kept (the README holds a copy)
    <!-- methods -->                `vocabshift.registry.method_table()`
    <!-- cli -->                    `vocabshift COMMAND --help` of every subcommand

Every results file (Markdown and PNG) is also published under results/ in the site, so that pages link to it.

    python scripts/docs_results.py                 # print the headline table
    python scripts/docs_results.py --write README.md   # put it between the README's headline markers
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# Not published: the order in which the distillation default was found (a notebook, not a result of its own)
UNPUBLISHED = {"distillation_notes.md"}
DIRECTIVE = re.compile(r"^<!-- (results|headline|methods|cli)(?: ([^#\s]+)(?:#(.+?))?)? -->$", re.MULTILINE)
HEADING = re.compile(r"^(#+) (.*)$", re.MULTILINE)

# The headline's languages, each with the results files that hold its figures: the first file that has a figure
# gives it. The _context runs score held-out passages (the same bytes of context for every tokenizer). Greek and
# Korean are languages no default was chosen on (scripts/get_corpus.py).
HEADLINE = {
    "Russian": ("languages_ru_context.md",),
    "German": ("languages_de_context.md",),
    "Vietnamese": ("languages_vi_context.md",),
    "Greek (held out)": ("languages_el_context.md",),
    "Korean (held out)": ("languages_ko_context.md",),
}
README_MARKERS = ("<!-- headline:start (scripts/docs_results.py --write README.md; tests/test_readme.py checks it) -->",
                  "<!-- headline:end -->")


def section(text: str, heading: str | None = None) -> str:
    """The part of a Markdown text under `heading` (without the heading line), or the whole text without its title
    and with its other headings one level down."""
    if heading is None:
        text = re.sub(r"\A# .*\n+", "", text)
        return HEADING.sub(lambda match: f"#{match[1]} {match[2]}", text).strip()
    found = [match for match in HEADING.finditer(text) if match[2].strip() == heading]
    if not found:
        raise KeyError(f"no heading {heading!r}")
    start, level = found[0].end(), len(found[0][1])
    after = [m.start() for m in HEADING.finditer(text, start) if len(m[1]) <= level]
    return text[start : after[0] if after else len(text)].strip()


def table(text: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in `text`, as dicts keyed by the header's cells."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    if len(lines) < 2:
        raise KeyError("no table")
    cells = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def results_text(name: str) -> str:
    return (RESULTS / name).read_text(encoding="utf-8")


def _figure(names: tuple[str, ...], find) -> tuple[str, str]:
    """`(value, file)`: the first of the results files `names` (those that exist) where `find(text)` gives a value."""
    for name in names:
        if (RESULTS / name).is_file():
            with contextlib.suppress(KeyError, StopIteration):
                value = find(results_text(name))
                if value not in ("", "-"):
                    return value, name
    raise LookupError(f"no figure in any of {names}")


def _seed_mean(arm: str):
    def find(text: str) -> str:
        heading = next(m[2] for m in HEADING.finditer(text) if m[2].startswith("Seeds at "))
        return next(row["mean"] for row in table(section(text, heading)) if row["arm"] == arm)

    return find


def _parity(arm: str):
    def find(text: str) -> str:
        row = next(row for row in table(section(text, "Parity")) if row["arm"] == arm)
        return re.sub(r" \(.*", "", row["passes the untrained original"])  # the step, without the tokens read

    return find


def _english(arm: str):
    def find(text: str) -> str:
        return next(row["x the original's"] for row in table(section(text, "Cost and English")) if row["arm"] == arm)

    return find


def _original(text: str) -> str:
    match = re.search(r"The untrained original model with its own tokenizer: ([0-9.]+)\.", text)
    if match is None:
        raise KeyError("no original")
    return match[1]


def _steps(text: str) -> str:
    return next(m[1] for m in re.finditer(r"^## Seeds at (\d+) steps$", text, re.MULTILINE))


def headline_table(link: str = "benchmarks/results/") -> str:
    """Per language: held-out bits per byte of the untrained original, the fair control, cross-entropy and the
    recipe after the same steps, English after the recipe and the control; the files quoted are linked with `link`
    before their names."""
    rows, steps = [], set()
    for language, names in HEADLINE.items():
        figures = {
            "original": _figure(names, _original),
            "control": _figure(names, _seed_mean("control")),
            "cross-entropy": _figure(names, _seed_mean("cross-entropy")),
            "recipe": _figure(names, _seed_mean("default")),
            "parity": _figure(names, _parity("default")),
            "english": _figure(names, _english("default")),
            "english control": _figure(names, _english("control")),
        }
        steps.add(_figure(names, _steps)[0])
        files = sorted({name for _, name in figures.values()}, key=names.index)
        value = {key: figure[0] for key, figure in figures.items()}
        rows.append(f"| {language} | {value['original']} | {value['control']} | {value['cross-entropy']} | "
                    f"**{value['recipe']}** | {value['parity']} | {value['english']}x / {value['english control']}x | "
                    + ", ".join(f"[{name}]({link}{name})" for name in files) + " |")
    if len(steps) != 1:
        raise LookupError(f"the languages' files are at different steps: {sorted(steps)}")
    return "\n".join([
        f"Held-out bits per byte after {steps.pop()} steps (mean of the seeds each arm ran; lower is better):", "",
        "| language | untrained original | fair control | cross-entropy | recipe | recipe passes the original | "
        "English: recipe / control (x the original's) | from |", "|---|---|---|---|---|---|---|---|", *rows])


def method_table() -> str:
    from vocabshift.registry import method_table

    return method_table()


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse wraps help to $COLUMNS: a fixed width keeps the pages the same on every terminal."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def cli_help() -> str:
    """`vocabshift COMMAND --help` of every subcommand, in the parser's order."""
    from vocabshift.cli import build_parser

    with _columns(100):
        parser = build_parser()
        commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        parts = [f"### `vocabshift {name}`\n\n```text\n{sub.format_help().strip()}\n```"
                 for name, sub in commands.choices.items()]
    return "\n\n".join(parts)


def expand(markdown: str, link: str = "results/") -> str:
    """`markdown` with every directive line replaced by what it names (see the module's docstring)."""

    def replace(match: re.Match) -> str:
        kind, name, heading = match.groups()
        if kind == "results":
            if name is None or not (RESULTS / name).is_file():
                raise FileNotFoundError(f"{match[0]}: no such file in {RESULTS}")
            return section(results_text(name), heading)
        if name is not None:
            raise ValueError(f"{match[0]}: `{kind}` takes no file")
        return {"headline": lambda: headline_table(link), "methods": method_table, "cli": cli_help}[kind]()

    return DIRECTIVE.sub(replace, markdown)


# mkdocs hooks


def on_files(files, config):
    """Publish every results file under results/ (pages link to them)."""
    from mkdocs.structure.files import File

    for path in sorted(RESULTS.rglob("*")):
        if path.suffix in (".md", ".png") and path.name not in UNPUBLISHED:
            files.append(File.generated(config, f"results/{path.relative_to(RESULTS).as_posix()}", abs_src_path=path))
    return files


def on_page_markdown(markdown, page, config, files):
    """Expand the directives; links to results files are relative to the page."""
    depth = page.file.src_uri.count("/")
    return expand(markdown, link="../" * depth + "results/")


def write_readme(path: Path) -> bool:
    """Put the headline table between the README's markers; True when that changed the file."""
    text = path.read_text(encoding="utf-8")
    start, end = (text.index(marker) for marker in README_MARKERS)
    start += len(README_MARKERS[0])
    updated = f"{text[:start]}\n{headline_table()}\n{text[end:]}"
    path.write_text(updated, encoding="utf-8")
    return updated != text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="README", help="update the headline table in this file")
    options = parser.parse_args()
    if options.write is None:
        print(headline_table())
    else:
        print(f"{options.write}: {'updated' if write_readme(options.write) else 'already current'}")


if __name__ == "__main__":
    main()
