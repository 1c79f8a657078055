"""The wheel ships the library alone: the `vocabshift` package and its metadata, no test or benchmark helper
(`vocabshift_testing` stays in the checkout), and no absolute path of the machine that built it.

The wheel is built once per session from a copy of the checkout (the `wheel` fixture in conftest.py).
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

from conftest import ROOT

# An absolute path of a user's or a build machine's folders, as source code or a docstring would hold one.
ABSOLUTE = re.compile(rb"(?<![\w.~-])/(?:work|home|Users|root|tmp)/")


def _files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_the_wheel_holds_the_package_and_its_metadata_only(wheel):
    names = set(_files(wheel))
    tops = {name.split("/")[0] for name in names}
    metadata = {top for top in tops if top.endswith(".dist-info")}
    assert len(metadata) == 1 and tops - metadata == {"vocabshift"}, sorted(tops)
    assert {"vocabshift/__init__.py", "vocabshift/py.typed", "vocabshift/model_cards/template.md",
            "vocabshift/data/english.txt.xz", "vocabshift/training/cpt/callback.py"} <= names
    helpers = sorted(name for name in names if re.search(r"(^|/)(testing|tests?|benchmarks|vocabshift_testing)/"
                                                         r"|(^|/)(conftest|test_\w+)\.py$", name))
    assert not helpers, f"test or benchmark helpers in the wheel: {helpers}"


def test_the_wheel_holds_no_absolute_path(wheel):
    machine = {str(ROOT), str(wheel.parents[1]), sys.prefix, f"{Path.home()}/"}
    found = sorted(name for name, data in _files(wheel).items()
                   if ABSOLUTE.search(data) or any(path.encode() in data for path in machine))
    assert not found, f"files of the wheel that hold an absolute path: {found}"


def test_the_path_check_sees_what_it_looks_for():
    """The helpers once held `Path("/work/shared")`; the pattern finds such a path and leaves URLs and ~ alone."""
    assert ABSOLUTE.search(b'candidates += [Path("/work/shared")]')
    assert ABSOLUTE.search(b"/home/user/.cache/vocabshift")
    assert not ABSOLUTE.search(b"https://example.org/home/page ~/work/x ./tmp/y")
