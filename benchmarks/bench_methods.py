"""Time and peak memory of `extend_vocabulary` per method on SmolLM2-135M-Instruct + a 16k Russian BPE, next to
transformers' `resize_token_embeddings(mean_resizing=True)` in the same run.

    python benchmarks/bench_methods.py [--mode extend|replace]

Each measurement runs in a fresh process: the model and tokenizers are loaded first, then the call is timed, and the
peak memory is the growth of the process's peak RSS during the call. The transformers baseline is given the merged
tokenizer's size (it neither merges tokenizers nor aligns, so it does strictly less work).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import vocabshift


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(method: str, mode: str) -> dict:
    """Runs inside the child process."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vocabshift_testing.corpora import smollm2, target_tokenizer

    torch.set_num_threads(2)
    source = AutoTokenizer.from_pretrained(smollm2())
    new = target_tokenizer(source, "ru")
    model = AutoModelForCausalLM.from_pretrained(smollm2())
    if method == "transformers":
        size = len(vocabshift.merge_tokenizers(source, new)[0])
    before = _peak_rss_mb()
    start = time.perf_counter()
    if method == "transformers":
        model.resize_token_embeddings(size, mean_resizing=True)
    else:
        model.extend_vocabulary(new, method=method, mode=mode, source_tokenizer=source)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mb": _peak_rss_mb() - before, "rows": model.config.vocab_size}


def _runs_without_options(name: str) -> bool:
    from vocabshift.errors import MethodOptionError
    from vocabshift.registry import build_config

    try:
        build_config(vocabshift.get_method(name), {})
    except MethodOptionError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="extend", choices=["extend", "replace"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.mode)))
        return
    embedding_mb = 49152 * 576 * 4 / 2**20
    # methods that need inputs of their own (word vectors, a helper model) have their benchmarks: bench_wordvec_*.py
    names = ["transformers"] + [name for name in vocabshift.list_methods() if _runs_without_options(name)]
    results = {}
    for name in names:
        command = [sys.executable, __file__, "--child", name, "--mode", args.mode]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[name] = json.loads(output.strip().splitlines()[-1])
    base = results["transformers"]
    print(f"SmolLM2-135M-Instruct + 16k Russian BPE, mode={args.mode}; embedding matrix {embedding_mb:.0f} MB (fp32)")
    print("| method | seconds | vs transformers | peak extra RSS (MB) | x embedding | rows |")
    print("|---|---|---|---|---|---|")
    for name in names:
        r = results[name]
        label = "transformers resize_token_embeddings(mean_resizing=True)" if name == "transformers" else name
        print(f"| {label} | {r['seconds']:.2f} | {r['seconds'] / base['seconds']:.1f}x | {r['peak_mb']:.0f} "
              f"| {r['peak_mb'] / embedding_mb:.1f} | {r['rows']} |")


if __name__ == "__main__":
    main()
