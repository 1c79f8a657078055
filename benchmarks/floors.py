"""What any propagation of the synthetic model must do, timed on this machine: the floor under `propagate`'s time.

- `tokenizers`: parse the three tokenizers with `tokenizers.Tokenizer.from_file` (the least a tool that checks the
  vocabularies can do; transformers' `AutoTokenizer` costs more).
- `read_adapted` + `write_output`: read the adapted model's embedding tensors once and write as many bytes as the
  output's embedding tensors hold: the row I/O of a plain swap (`E_new = E_adapted`).
- `read_siblings`: read the base and instruct embedding tensors once, which vocabshift's formula adds
  (`E_instruct + (E_adapted - E_base) W` keeps the instruct rows that CPT left unchanged).
- `products`: the float64 normal equations of a fit over `pairs` row pairs per side (AᵀA as a symmetric rank-k
  update, AᵀB as a gemm, in 128 MB blocks of random rows): the arithmetic of `overlap` and `conversion`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

from vocabshift.headers import read_header
from vocabshift.propagation.shards import _write_all

EMBEDDINGS = ("model.embed_tokens.weight", "lm_head.weight")


def floors(root: Path, out: Path, shapes: dict[str, int]) -> dict[str, float]:
    """Seconds per part; `shapes` holds `output_bytes`, `pairs`, `hidden` and `sides`."""
    out.mkdir()
    return {"tokenizers": _timed(_tokenizers, root),
            "read_adapted": _timed(_read, root / "adapted"),
            "write_output": _timed(_write, out / "rows.bin", shapes["output_bytes"]),
            "read_siblings": _timed(_read, root / "base") + _timed(_read, root / "instruct"),
            "products": _timed(_products, shapes["pairs"], shapes["hidden"], shapes["sides"])}


def _timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def _tokenizers(root: Path) -> None:
    for role in ("adapted", "base", "instruct"):
        Tokenizer.from_file(str(root / role / "tokenizer.json"))


def _read(folder: Path) -> None:
    buffer = memoryview(bytearray(32 * 2**20))
    for shard in sorted(folder.glob("*.safetensors")):
        ranges = [(info.begin, info.end) for key, info in read_header(shard).tensors.items() if key in EMBEDDINGS]
        with open(shard, "rb", buffering=0) as handle:
            for begin, end in ranges:
                while begin < end:
                    begin += os.preadv(handle.fileno(), [buffer[: min(len(buffer), end - begin)]], begin)


def _write(path: Path, size: int) -> None:
    data = memoryview(bytearray(os.urandom(2**20)) * 32)
    with open(path, "wb", buffering=0) as handle:
        while size > 0:
            block = data[: min(len(data), size)]
            size -= len(block)
            _write_all(handle.fileno(), block)  # in 256 kB slices, as propagate writes


def _products(pairs: int, hidden: int, sides: int) -> None:
    step = max(1, 128 * 2**20 // (8 * hidden))
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(step, hidden, dtype=torch.float64, generator=generator) for _ in range(2))
    gram, cross = (torch.zeros(hidden, hidden, dtype=torch.float64) for _ in range(2))
    for _ in range(sides):
        for start in range(0, pairs, step):
            rows = a[: min(step, pairs - start)]
            gram += torch.from_numpy(rows.numpy().T @ rows.numpy())
            cross.addmm_(rows.T, b[: len(rows)])
