"""`focus` against the reference FOCUS implementation (the `deepfocus` package) on SmolLM2-135M-Instruct with the 16k
Russian tokenizer, both given the same already-trained token-level fastText model: initialization time and rows.

    pip install --no-deps deepfocus==1.0.1 entmax==1.3 fastdist==1.1.7 print-on-steroids==1.2.3
    pip install numba scipy datasets
    python benchmarks/bench_focus_vs_deepfocus.py

fastText training is timed separately (a fresh training into a temporary folder, the same settings as the cached model
both methods use). vocabshift is timed end to end (`model.extend_vocabulary(..., method="focus", word_vectors=path)`:
merge in extend mode, alignment, FOCUS, writing the rows) and its FOCUS step alone (the registered function, given the
alignment: reading the vectors, anchors, sparsemax, rows), median of 3 runs; deepfocus's `FOCUS(...)` is timed on its
first call in the process (numba compiles then) and as the median of 3 later calls. Rows: per-row cosine of the rows
both combine (tokens with a fastText vector), out of the box and with deepfocus given our shared pairs (its
decoded-string canonicalization maps partial UTF-8 tokens to U+FFFD, so it copies some rows from unrelated tokens; and
it uses fastText's line-end word "</s>" as the vector of the EOS token "</s>" where the tokenizer has one, which the
same-overlap run turns off). Results: benchmarks/results/focus_vs_deepfocus.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import AutoModelForCausalLM

import vocabshift
import wordvec_common as common
from vocabshift import registry
from vocabshift_testing.deepfocus import deepfocus_rows

RESULTS = Path(__file__).resolve().parent / "results"
REPEATS = 3  # runs of ours and later deepfocus calls per mode; medians are reported


def _deepfocus(tokenizer, source, matrix, path, shared=None, extend_tokenizer=None):
    """deepfocus's FOCUS and its seconds; with `shared`, its overlap is our shared pairs and the line-end anchor off."""
    gc.collect()
    started = time.perf_counter()
    rows = deepfocus_rows(tokenizer, source, matrix, path, shared=shared, extend_tokenizer=extend_tokenizer,
                          line_end_anchor=shared is None)
    return rows, time.perf_counter() - started


def _cosines(ours: torch.Tensor, theirs: torch.Tensor) -> dict:
    cosine = torch.cosine_similarity(ours, theirs, dim=1)
    return {"rows": len(cosine), "above_0.999": int((cosine > 0.999).sum()), "min": round(float(cosine.min()), 6)}


@contextlib.contextmanager
def _timed_method(name: str):
    """Time the registered method's function alone (FOCUS given the alignment), inside extend_vocabulary."""
    spec, seconds = registry._METHODS[name], [0.0]

    def timed(context, config):
        started = time.perf_counter()
        result = spec.function(context, config)
        seconds[0] = time.perf_counter() - started
        return result

    registry._METHODS[name] = dataclasses.replace(spec, function=timed)
    try:
        yield seconds
    finally:
        registry._METHODS[name] = spec


def _ours(mode: str, source, new, vectors) -> tuple:
    """One `extend_vocabulary(method="focus")` on a fresh SmolLM2: (model, tokenizer, seconds end to end, FOCUS
    step)."""
    model = AutoModelForCausalLM.from_pretrained(common.SMOLLM2).eval()
    gc.collect()  # each timed call (ours and deepfocus's) starts without garbage of the previous ones
    started = time.perf_counter()
    with _timed_method("focus") as method_seconds:
        tokenizer = model.extend_vocabulary(new, method="focus", mode=mode, source_tokenizer=source,
                                            word_vectors=vectors.source)
    return model, tokenizer, time.perf_counter() - started, method_seconds[0]


def run_mode(mode: str, source, new, vectors) -> dict:
    """REPEATS runs of ours (median reported), then deepfocus's first call and the median of REPEATS more."""
    model, tokenizer, *first_run = _ours(mode, source, new, vectors)
    runs = [first_run] + [_ours(mode, source, new, vectors)[2:] for _ in range(REPEATS - 1)]  # models dropped
    record = vocabshift.get_record(model)
    matrix = AutoModelForCausalLM.from_pretrained(common.SMOLLM2).get_input_embeddings().weight.detach().clone()
    words = set(vectors.words)
    compared = torch.tensor([i for i in record.new_ids if tokenizer.convert_ids_to_tokens(i) in words])
    ours = model.get_input_embeddings().weight.detach()[compared]
    extend_tokenizer = new if mode == "extend" else None
    first, first_seconds = _deepfocus(tokenizer, source, matrix, vectors.source, extend_tokenizer=extend_tokenizer)
    later = [_deepfocus(tokenizer, source, matrix, vectors.source, extend_tokenizer=extend_tokenizer)[1]
             for _ in range(REPEATS)]
    aligned, _ = _deepfocus(tokenizer, source, matrix, vectors.source, dict(record.shared_pairs()), extend_tokenizer)
    return {
        "mode": mode,
        "vocabshift_seconds": round(statistics.median(run[0] for run in runs), 2),
        "vocabshift_method_seconds": round(statistics.median(run[1] for run in runs), 2),
        "vocabshift_method_seconds_all": [round(run[1], 2) for run in runs],
        "deepfocus_first_call_seconds": round(first_seconds, 2),
        "deepfocus_second_call_seconds": round(statistics.median(later), 2),
        "deepfocus_later_calls_seconds_all": [round(x, 2) for x in later],
        "rows_out_of_the_box": _cosines(ours, first[compared]),
        "rows_same_overlap": _cosines(ours, aligned[compared]),
    }


def main() -> None:
    torch.set_num_threads(2)
    train, _ = common.split()
    source, new = common.source_tokenizer(), common.target_tokenizer(train)
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        vocabshift.train_word_vectors(train, tokenizer=new, cache_dir=folder)
        training_seconds = time.perf_counter() - started
    vectors = common.token_vectors(train, new)
    results = {"fasttext_training_seconds": round(training_seconds, 1), "fasttext": vectors.source,
               "modes": [run_mode(mode, source, new, vectors) for mode in ("replace", "extend")]}
    lines = [
        "FOCUS on SmolLM2-135M-Instruct + 16k Russian BPE, same token-level fastText model for both "
        f"(its training, timed separately: {results['fasttext_training_seconds']} s, one thread). Machine load "
        f"(1/5/15 min) at the end: {'/'.join(f'{x:.1f}' for x in os.getloadavg())} on 2 cores.",
        "",
        "| mode | vocabshift s (median of 3): end to end / FOCUS step | deepfocus s (1st call / median of 3 later) "
        "| speed-up of the FOCUS step (1st / later) | speed-up end to end (1st / later) | rows > 0.999 cosine, out "
        "of the box | same overlap |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["modes"]:
        ours, step = r["vocabshift_seconds"], r["vocabshift_method_seconds"]
        first, second = r["deepfocus_first_call_seconds"], r["deepfocus_second_call_seconds"]
        box, same = r["rows_out_of_the_box"], r["rows_same_overlap"]
        lines.append(
            f"| {r['mode']} | {ours} / {step} | {first} / {second} | {first / step:.1f}x / {second / step:.1f}x | "
            f"{first / ours:.1f}x / {second / ours:.1f}x | "
            f"{box['above_0.999']}/{box['rows']} (min {box['min']}) | {same['above_0.999']}/{same['rows']} "
            f"(min {same['min']}) |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "focus_vs_deepfocus.md").write_text(text, encoding="utf-8")
    (RESULTS / "focus_vs_deepfocus.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
