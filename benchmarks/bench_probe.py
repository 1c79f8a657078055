"""`vocabshift.probe` on SmolLM2-135M-Instruct + a 16k Russian tokenizer: which initialization wins after 50 steps?

Every method: extend (mode "extend"), then embedding-only CPT of the new rows with identical batches and seed;
held-out Russian bits per byte (the tests' 200 held-out lines) every `--eval-every` steps. Writes
benchmarks/results/probe_smollm2_ru/probe.md (table) and probe.png (curves), and prints the best method against
the named baseline `random`, both after the last step.

    python benchmarks/bench_probe.py [--methods random mean multivariate subword] [--steps 50]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import vocabshift
from smollm2_ru import load_smollm2, machine_load, russian_lines, russian_tokenizer

OUTPUT = Path(__file__).parent / "results" / "probe_smollm2_ru"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--methods", nargs="+", default=["random", "mean", "multivariate", "subword"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    options = parser.parse_args()
    load_before, start = machine_load(), time.perf_counter()
    train, held_out = russian_lines()
    model, source = load_smollm2()
    ru = russian_tokenizer(source)
    result = vocabshift.probe(
        model, ru, train[::8], held_out, methods=options.methods, steps=options.steps,
        eval_every=options.eval_every, batch_size=options.batch_size, context_length=options.context_length,
        learning_rate=options.learning_rate, source_tokenizer=source, output_dir=OUTPUT,
    )
    minutes = (time.perf_counter() - start) / 60
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_minutes = (usage.ru_utime + usage.ru_stime) / 60
    best, random = result.curves[result.best][-1][1], result.curves["random"][-1][1]
    summary = "\n".join([
        "",
        f"Best after {options.steps} steps: {result.best} at {best:.3f} bits/byte vs the baseline random at "
        f"{random:.3f} (ratio {best / random:.3f}).",
        f"Wall time of the whole script: {minutes:.1f} min; CPU time {cpu_minutes:.1f} min (under contention this "
        "includes OpenMP threads spinning while their partner thread is descheduled, so it is no load-free figure).",
        f"Machine: before {load_before}; after {machine_load()}.",
        "Command: `python benchmarks/bench_probe.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(options).items()) + "`",
    ])
    with open(result.table_path, "a", encoding="utf-8") as handle:
        handle.write(summary + "\n")
    print(result.table_path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
