"""Time and peak memory of focus, salt and ofa at 7B shape: hidden 4096, 32k old rows, ~30k new tokens, word
vectors of dimension 300, on this machine (2 cores), next to the `subword` baseline in the same run.

    python benchmarks/bench_wordvec_7b.py

Shapes are real, weights synthetic: the old tokenizer is a 32,000-token byte-level BPE trained on the English and
German corpora, the new one a byte-level BPE trained on the Russian and Vietnamese corpora (sized so that ~30k of its
tokens are new); the embedding matrix (tied, float32, 32,000 x 4096 = 500 MiB) is random with the anisotropy of
trained LLMs. FOCUS and SALT use real token-level fastText (dim 300) trained on the Russian and Vietnamese text cut by
the new tokenizer; SALT's helper matrix is random, 768-d (BERT-base width), one row per new-tokenizer id. OFA uses the
real word list of the four corpora (words seen at least 3 times) with random 300-d vectors: matching and top-k cost
depend on the shapes, not on the values.

Each method runs in a fresh process: inputs are built first, the peak RSS is reset (/proc/self/clear_refs), then only
the method call is timed. Reported: seconds, the process's peak RSS during the call (inputs included) and that peak
over the embedding matrix's bytes. Results: benchmarks/results/wordvec_7b.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import numpy as np
import torch

import wordvec_common as common

RESULTS = Path(__file__).resolve().parent / "results"
HIDDEN, OLD_ROWS, HELPER_HIDDEN, DIM = 4096, 32000, 768, 300
NEW_VOCAB = 40000  # gives ~30k tokens that the old tokenizer lacks
METHODS = ("subword", "focus", "salt", "ofa")


def _tokenizer(name: str, languages: tuple[str, ...], size: int):
    from transformers import AutoTokenizer

    import vocabshift

    folder = common.CACHE / f"wordvec-7b-{name}-{size}"
    if not (folder / "tokenizer.json").exists():
        texts = [line for language in languages for line in common.lines(language)]
        trained = vocabshift.train_tokenizer(texts, like=AutoTokenizer.from_pretrained(common.SMOLLM2), vocab_size=size)
        trained.save_pretrained(str(folder) + ".tmp")
        os.replace(str(folder) + ".tmp", folder)
    return AutoTokenizer.from_pretrained(folder)


def _word_list() -> list[str]:
    path = common.CACHE / "wordvec-7b-words.json"
    if not path.exists():
        counts = collections.Counter(w for language in ("en", "de", "ru", "vi") for line in common.lines(language)
                                     for w in line.split())
        path.write_text(json.dumps([w for w, c in counts.most_common() if c >= 3], ensure_ascii=False))
    return json.loads(path.read_text())


def _vectors() -> str:
    """Train (or find in the cache) the token-level fastText model; its path (run in its own process)."""
    import vocabshift

    texts = common.lines("ru") + common.lines("vi")
    new = _tokenizer("new-ru-vi", ("ru", "vi"), NEW_VOCAB)
    return vocabshift.train_word_vectors(texts, tokenizer=new, dim=DIM, min_count=10).source


def _inputs(method: str, vectors: str):
    import vocabshift
    from vocabshift.methods.base import InitContext

    source = _tokenizer("old-en-de", ("en", "de"), OLD_ROWS)
    new = _tokenizer("new-ru-vi", ("ru", "vi"), NEW_VOCAB)
    target, _ = vocabshift.merge_tokenizers(source, new)
    alignment = vocabshift.align(source, target, keep_source_ids=True, new=new)
    generator = torch.Generator().manual_seed(0)
    matrix = (torch.randn(HIDDEN, generator=generator) * 0.7
              + torch.randn(OLD_ROWS, HIDDEN, generator=generator) * 0.72)
    matrix /= HIDDEN**0.5
    options = {}
    if method in ("focus", "salt"):
        options["word_vectors"] = vocabshift.load_word_vectors(vectors)
    if method == "salt":
        options["helper_model"] = torch.randn(len(new), HELPER_HIDDEN, generator=generator) / HELPER_HIDDEN**0.5
    if method == "ofa":
        words = _word_list()
        vectors = np.random.default_rng(0).standard_normal((len(words), DIM), dtype=np.float32)
        options["word_vectors"] = vocabshift.WordVectors(words, vectors, level="word", source="random 300-d")
    context = InitContext(matrix, None, alignment, source, target, 0, True, new)
    return context, options


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(method: str, vectors: str) -> dict:
    import ctypes
    import gc

    from vocabshift.inputs import resolve_inputs
    from vocabshift.registry import build_config, get_method

    torch.set_num_threads(2)
    context, options = _inputs(method, vectors)
    spec = get_method(method)
    config = resolve_inputs(build_config(spec, options), context.new_tokenizer)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # give freed build-up memory (tokenizer training) back to the OS
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
    start_rss = _rss_bytes()
    started = time.perf_counter()
    result = spec.function(context, config)
    seconds = time.perf_counter() - started
    return {"method": method, "seconds": round(seconds, 1), "peak_rss_bytes": _peak_rss_bytes(),
            "start_rss_bytes": start_rss,
            "new_tokens": context.num_new, "rows_shape": list(result.input_rows.shape),
            "diagnostics": {k: v for k, v in result.diagnostics.items() if k in ("support_size", "anchors",
                                                                                 "random_fallback", "new_in_words")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--vectors", help=argparse.SUPPRESS)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args()
    if args.child == "vectors":
        print(_vectors())
        return
    if args.child:
        print(json.dumps(child(args.child, args.vectors)))
        return
    matrix_bytes = OLD_ROWS * HIDDEN * 4
    load = os.getloadavg()
    vectors = subprocess.run([sys.executable, __file__, "--child", "vectors"], check=True, stdout=subprocess.PIPE,
                             text=True).stdout.strip().splitlines()[-1]
    results = []
    for method in args.methods:
        output = subprocess.run([sys.executable, __file__, "--child", method, "--vectors", vectors], check=True,
                                stdout=subprocess.PIPE, text=True).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
        common.log(results[-1])
    base = next((r for r in results if r["method"] == "subword"), None)
    extended = (OLD_ROWS + results[0]["new_tokens"]) * HIDDEN * 4
    lines = [
        f"7B shape: hidden {HIDDEN}, {OLD_ROWS} old rows (tied, float32: {matrix_bytes / 2**20:.0f} MiB), "
        f"{results[0]['new_tokens']} new tokens, word vectors of dimension {DIM}; 2 threads; load average "
        f"(1/5/15 min) at start {'/'.join(f'{x:.1f}' for x in load)}, end "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())} (2 shared cores).",
        "Peak RSS is the whole process's during the method call: Python, torch, both tokenizers, the old matrix, the",
        "word vectors, the helper matrix and the new rows included; 'start' is the RSS when the call begins.",
        "",
        f"'old' is the {matrix_bytes / 2**20:.0f} MiB matrix before the call, 'extended' the "
        f"{extended / 2**20:.0f} MiB "
        "matrix it must produce (old + new rows).",
        "",
        "| method | seconds | vs subword | start RSS (MiB) | peak RSS (MiB) | peak / old matrix "
        "| peak / extended matrix "
        "| under 60 s | under 3x old | under 3x extended |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        old, new = r["peak_rss_bytes"] / matrix_bytes, r["peak_rss_bytes"] / extended
        versus = f"{r['seconds'] / max(base['seconds'], 1e-9):.1f}x" if base else "n/a"
        within = " | ".join("yes" if ok else "NO" for ok in (r["seconds"] < 60, old < 3, new < 3))
        lines.append(f"| {r['method']} | {r['seconds']} | {versus} | {r['start_rss_bytes'] / 2**20:.0f} | "
                     f"{r['peak_rss_bytes'] / 2**20:.0f} | {old:.2f} | {new:.2f} | {within} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "wordvec_7b.md").write_text(text, encoding="utf-8")
    (RESULTS / "wordvec_7b.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
