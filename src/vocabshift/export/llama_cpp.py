"""Where llama.cpp's own converter comes from: a llama.cpp checkout given by path, or the copy that the
`llama-cpp-python` source distribution on PyPI ships, downloaded once with pip and kept unpacked in the cache.

Only the converter's files are unpacked (`convert_hf_to_gguf.py`, `conversion/`, `gguf-py/`, the license): nothing is
compiled. The download is checked against the sha256 pinned here (`pip download --require-hashes`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ..arguments import check_path
from ..errors import LlamaCppError

__all__ = ["LLAMA_CPP_PYTHON", "cached_converter", "converter_dir"]

LLAMA_CPP_PYTHON = "0.3.36"  # the llama-cpp-python release whose vendored llama.cpp converts
_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
_SCRIPT = "convert_hf_to_gguf.py"
_MEMBERS = (_SCRIPT, "conversion/", "gguf-py/", "LICENSE")


def converter_dir(llama_cpp: str | os.PathLike | None = None) -> Path:
    """The folder holding `convert_hf_to_gguf.py`: `llama_cpp` when given, else the cached copy of the converter
    from `llama-cpp-python==LLAMA_CPP_PYTHON` (downloaded from PyPI and unpacked on first use).

    Raises:
        `LlamaCppError`: `llama_cpp` holds no `convert_hf_to_gguf.py`, or the source distribution cannot be
            downloaded.
    """
    if llama_cpp is not None:
        folder = check_path(llama_cpp, name="llama_cpp").expanduser()
        if not (folder / _SCRIPT).is_file():
            raise LlamaCppError(f"llama_cpp={os.fspath(llama_cpp)!r} holds no {_SCRIPT}: pass the root of a llama.cpp "
                                "checkout (git clone https://github.com/ggml-org/llama.cpp), or leave it out to use "
                                f"the converter of llama-cpp-python=={LLAMA_CPP_PYTHON} from PyPI.")
        return folder.resolve()
    return cached_converter() or _download(_cache_folder())


def cached_converter() -> Path | None:
    """The cached converter of `llama-cpp-python==LLAMA_CPP_PYTHON`, None when it was not downloaded yet."""
    folder = _cache_folder()
    return folder if (folder / _SCRIPT).is_file() else None


def _cache_folder() -> Path:
    cache = Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift")).expanduser()
    return cache / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-converter"


def _download(folder: Path) -> Path:
    """Fetch the source distribution with pip (hash pinned), unpack the converter next to `folder`, rename it in."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.") as scratch:
        requirement = Path(scratch) / "requirements.txt"
        requirement.write_text(f"llama-cpp-python=={LLAMA_CPP_PYTHON} --hash=sha256:{_SDIST_SHA256}\n")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--require-hashes",
                   "--quiet", "-r", str(requirement), "-d", scratch]
        done = subprocess.run(command, capture_output=True, text=True, errors="replace")
        archives = sorted(Path(scratch).glob("*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise LlamaCppError(f"`{' '.join(command[2:6])} llama-cpp-python=={LLAMA_CPP_PYTHON}` failed "
                                f"({done.stderr.strip()[-600:]}): connect to PyPI, or pass llama_cpp= the path of "
                                "a llama.cpp checkout.")
        unpacked = _unpack(archives[0], Path(scratch) / "converter")
        if not (folder / _SCRIPT).is_file():  # another process may have finished first: keep its copy
            shutil.rmtree(folder, ignore_errors=True)
            unpacked.rename(folder)
    return folder


def _unpack(archive: Path, destination: Path) -> Path:
    """Extract the converter's files of the sdist's `vendor/llama.cpp` into `destination`."""
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"
    with tarfile.open(archive, mode="r:gz") as tar:
        members = []
        for member in tar.getmembers():
            name = member.name[len(prefix):] if member.name.startswith(prefix) else ""
            if (member.isfile() or member.isdir()) and name.startswith(_MEMBERS) and ".." not in name.split("/"):
                member.name = name
                members.append(member)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(destination, members=members, filter="data")
        else:  # Python before 3.10.12 has no filters: the members are checked above (files and folders, no "..")
            tar.extractall(destination, members=members)
    if not (destination / _SCRIPT).is_file():
        raise LlamaCppError(f"{archive.name} holds no {prefix}{_SCRIPT}: pass llama_cpp= a llama.cpp checkout.")
    return destination
