"""Embedding-only CPT vs full fine-tuning on SmolLM2-135M-Instruct + 16k Russian tokens: step time, optimizer state.

Both take AdamW steps (weight decay 0.1) on the same batch of Russian text; the embedding-only model trains the new
rows through `freeze_for_embedding_training(rows="new")` (restore included in its step time). Steps alternate
between the two so that load from other processes hits both alike; medians are reported.

    python benchmarks/bench_cpt_step.py [--steps 5] [--batch-size 8] [--context-length 128]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import torch

import vocabshift
from smollm2_ru import load_smollm2, machine_load, russian_lines, russian_tokenizer
from vocabshift.training import freeze_for_embedding_training

RESULTS = Path(__file__).parent / "results"


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(t.nbytes for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t))


def timed_step(model, optimizer, batch, after=None) -> float:
    start = time.perf_counter()
    model(input_ids=batch, labels=batch).loss.backward()
    optimizer.step()
    if after is not None:
        after()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--context-length", type=int, default=128)
    options = parser.parse_args()
    load_before = machine_load()
    train, _ = russian_lines()
    full, source = load_smollm2()
    tokenizer = full.extend_vocabulary(russian_tokenizer(source), method="subword", source_tokenizer=source)
    ids = tokenizer("\n".join(train[:2000]), add_special_tokens=False)["input_ids"]
    size = options.batch_size * options.context_length
    batch = torch.tensor(ids[:size]).view(options.batch_size, options.context_length)
    embedding = copy.deepcopy(full).train()
    guard = freeze_for_embedding_training(embedding, rows="new")
    runs = {
        "embedding-only": (embedding, torch.optim.AdamW(guard.parameters, lr=1e-3, weight_decay=0.1), guard.restore),
        "full fine-tune": (full.train(), torch.optim.AdamW(full.parameters(), lr=1e-5, weight_decay=0.1), None),
    }
    times = {name: [] for name in runs}
    for step in range(options.steps + 1):  # step 0 warms up (allocations, optimizer state)
        for name, (model, optimizer, after) in runs.items():
            seconds = timed_step(model, optimizer, batch, after)
            if step:
                times[name].append(seconds)
    report(options, runs, times, guard, load_before)


def report(options, runs, times, guard, load_before) -> None:
    medians = {name: statistics.median(t) for name, t in times.items()}
    fastest = {name: min(t) for name, t in times.items()}
    states = {name: state_bytes(optimizer) for name, (_, optimizer, _) in runs.items()}
    trainable = {name: sum(p.numel() for p in model.parameters() if p.requires_grad)
                 for name, (model, _, _) in runs.items()}
    e, f = "embedding-only", "full fine-tune"
    rows = [
        "| | embedding-only (rows='new') | full fine-tune | ratio |",
        "|---|---|---|---|",
        f"| seconds per step (median of {options.steps}) | {medians[e]:.2f} | {medians[f]:.2f} | "
        f"{medians[e] / medians[f]:.2f} |",
        f"| seconds per step (fastest of {options.steps}, least disturbed by load) | {fastest[e]:.2f} | "
        f"{fastest[f]:.2f} | {fastest[e] / fastest[f]:.2f} |",
        f"| AdamW state (MB) | {states[e] / 2**20:.0f} | {states[f] / 2**20:.0f} | {states[e] / states[f]:.3f} |",
        f"| trainable parameters | {trainable[e]:,} | {trainable[f]:,} | {trainable[e] / trainable[f]:.3f} |",
    ]
    record = vocabshift.get_record(runs[e][0])
    text = "\n".join([
        "# Embedding-only CPT step vs full fine-tuning step",
        "",
        f"SmolLM2-135M-Instruct extended with a {record.new_vocab_size - record.old_vocab_size:,}-token Russian "
        f"vocabulary (subword init, {record.new_num_rows:,} rows, tied head); one batch of "
        f"{options.batch_size}×{options.context_length} Russian tokens; AdamW, weight decay 0.1, float32, CPU.",
        "",
        *rows,
        "",
        f"Rows that train: {len(guard.rows):,} of {record.new_num_rows:,}; the optimizer still holds state for the "
        "whole embedding matrix (row masking keeps the other rows fixed, it does not shrink the matrix).",
        "",
        f"Per-step seconds: embedding-only {[round(t, 2) for t in times[e]]}, "
        f"full {[round(t, 2) for t in times[f]]}.",
        f"Machine: before the run {load_before}; after it {machine_load()}.",
        "Command: `python benchmarks/bench_cpt_step.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(options).items()) + "`",
    ])
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cpt_step.md").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
