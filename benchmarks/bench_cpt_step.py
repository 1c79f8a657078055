"""Embedding-only CPT step: split rows (now) vs masked rows (the previous design) vs full fine-tuning.

1. SmolLM2-135M-Instruct extended with the 16k Russian tokenizer (tied head), float32: seconds per AdamW step
   (weight decay 0.1) on one batch of Russian text, optimizer-state and gradient bytes. Steps alternate between the
   three models so that load from other processes hits them alike; medians are reported.
2. A Llama-3-8B-shaped model (128,256 x 4,096 untied embeddings, `--layers` decoder layers of the 8B's shape,
   synthetic weights, bfloat16) with `--new-rows` trainable rows: the peak resident memory of one training step,
   each design in a fresh process (the kernel's high-water mark, reset just before the step). Few tokens: memory
   goes to weights, gradients and optimizer state, and bfloat16 matrix products are slow on CPUs without native
   bfloat16 (several minutes per step on AVX2).

    python benchmarks/bench_cpt_step.py [--steps 5] [--batch-size 8] [--context-length 128]
                                        [--layers 2] [--new-rows 4000] [--big-tokens 16]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import vocabshift
from masked_rows import MaskedRows
from smollm2_ru import load_smollm2, machine_load, russian_lines, russian_tokenizer
from vocabshift.training import freeze_for_embedding_training

RESULTS = Path(__file__).parent / "results"
SPLIT, MASKED, FULL = "split rows (now)", "masked rows (before)", "full fine-tune"
MB = 2**20


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(t.nbytes for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t))


def timed_step(model, optimizer, batch, after=None) -> tuple[float, int]:
    """Seconds of one step (forward, backward, optimizer step, `after`) and the bytes of the gradients it made."""
    start = time.perf_counter()
    model(input_ids=batch, labels=batch).loss.backward()
    grads = sum(p.grad.nbytes for group in optimizer.param_groups for p in group["params"] if p.grad is not None)
    optimizer.step()
    if after is not None:
        after()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, grads


def adamw(parameters, lr: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=0.1)


def smollm2_runs() -> tuple[dict, torch.Tensor, object]:
    full, source = load_smollm2()
    tokenizer = full.extend_vocabulary(russian_tokenizer(source), method="subword", source_tokenizer=source)
    new_ids = torch.tensor(vocabshift.get_record(full).new_ids)
    split, masked = copy.deepcopy(full).train(), copy.deepcopy(full).train()
    rows, mask = freeze_for_embedding_training(split, rows="new"), MaskedRows(masked, new_ids)
    runs = {SPLIT: (split, adamw(rows.parameters, 1e-3), None),
            MASKED: (masked, adamw(mask.parameters, 1e-3), mask.restore),
            FULL: (full.train(), adamw(full.parameters(), 1e-5), None)}
    return runs, new_ids, tokenizer


def time_smollm2(options) -> dict:
    runs, new_ids, tokenizer = smollm2_runs()
    train, _ = russian_lines()
    ids = tokenizer("\n".join(train[:2000]), add_special_tokens=False)["input_ids"]
    batch = torch.tensor(ids[: options.batch_size * options.context_length]).view(options.batch_size, -1)
    times, grads = {name: [] for name in runs}, {}
    for step in range(options.steps + 1):  # step 0 warms up (allocations, optimizer state)
        for name, (model, optimizer, after) in runs.items():
            seconds, grads[name] = timed_step(model, optimizer, batch, after)
            if step:
                times[name].append(seconds)
    model = runs[SPLIT][0]
    return {"times": times, "grads": grads, "states": {n: state_bytes(o) for n, (_, o, _) in runs.items()},
            "new_rows": len(new_ids), "hidden": model.config.hidden_size, "num_rows": model.config.vocab_size,
            "trainable": {n: sum(p.numel() for g in o.param_groups for p in g["params"]) for n, (_, o, _) in
                          runs.items()}}


def resident(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def peak_of_one_step(design: str, options) -> dict:
    """In this (fresh) process: the 8B-shaped model, one step of `design`, the memory it took."""
    config = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                         num_key_value_heads=8, num_hidden_layers=options.layers, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16).train()
    ids = torch.arange(config.vocab_size - options.new_rows, config.vocab_size)
    if design == SPLIT:
        parameters, after = freeze_for_embedding_training(model, rows=ids.tolist()).parameters, None
    else:
        mask = MaskedRows(model, ids)
        parameters, after = mask.parameters, mask.restore
    optimizer = adamw(parameters, 1e-4)
    batch = torch.randint(config.vocab_size, (1, options.big_tokens), generator=torch.Generator().manual_seed(0))
    before = resident("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current resident size
    seconds, grads = timed_step(model, optimizer, batch, after)
    return {"before": before, "peak": resident("VmHWM"), "state": state_bytes(optimizer), "grads": grads,
            "seconds": seconds}


def measure_8b(options) -> dict:
    figures = {}
    for design in (SPLIT, MASKED):
        command = [sys.executable, __file__, "--peak-of", design, *_forwarded(options)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        figures[design] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _forwarded(options) -> list[str]:
    return [f"--{k}={v}" for k, v in (("layers", options.layers), ("new-rows", options.new_rows),
                                      ("big-tokens", options.big_tokens))]


def smollm2_table(options, f: dict) -> list[str]:
    times = f["times"]
    medians = {n: statistics.median(t) for n, t in times.items()}
    fastest = {n: min(t) for n, t in times.items()}
    cells = lambda values, fmt: " | ".join(fmt(values[n]) for n in (SPLIT, MASKED, FULL))  # noqa: E731
    expected = f["new_rows"] * f["hidden"] * 4
    return [
        f"| | {SPLIT} | {MASKED} | {FULL} |", "|---|---|---|---|",
        f"| seconds per step (median of {options.steps}) | {cells(medians, lambda v: f'{v:.2f}')} |",
        f"| seconds per step (fastest of {options.steps}) | {cells(fastest, lambda v: f'{v:.2f}')} |",
        f"| median step time / full fine-tune | {cells(medians, lambda v: f'{v / medians[FULL]:.2f}')} |",
        f"| AdamW state (MB) | {cells(f['states'], lambda v: f'{v / MB:.1f}')} |",
        f"| gradients (MB) | {cells(f['grads'], lambda v: f'{v / MB:.1f}')} |",
        f"| trainable parameters | {cells(f['trainable'], lambda v: f'{v:,}')} |",
        "",
        f"Trainable rows x hidden x 4 bytes = {expected / MB:.1f} MB: the split rows' gradients are "
        f"{f['grads'][SPLIT] / expected:.2f}x that and their AdamW state (two moments) "
        f"{f['states'][SPLIT] / (2 * expected):.2f}x twice that; the masked design's state is "
        f"{f['states'][MASKED] / f['states'][SPLIT]:.1f}x the split one.",
    ]


def big_table(options, f: dict) -> list[str]:
    gb = lambda key: " | ".join(f"{f[d][key] / 2**30:.2f}" for d in (SPLIT, MASKED))  # noqa: E731
    extra = {d: f[d]["peak"] - f[d]["before"] for d in f}
    return [
        f"| | {SPLIT} | {MASKED} |", "|---|---|---|",
        f"| resident before the step (GB) | {gb('before')} |",
        f"| peak resident during the step (GB) | {gb('peak')} |",
        f"| peak minus before (GB) | {extra[SPLIT] / 2**30:.2f} | {extra[MASKED] / 2**30:.2f} |",
        f"| AdamW state after the step (GB) | {gb('state')} |",
        f"| gradients (GB) | {gb('grads')} |",
        f"| seconds for the step | {f[SPLIT]['seconds']:.1f} | {f[MASKED]['seconds']:.1f} |",
        "",
        f"Peak of the step, split / masked: {f[SPLIT]['peak'] / f[MASKED]['peak']:.2f}.",
    ]


def report(options, small: dict, big: dict, load_before: str) -> None:
    text = "\n".join([
        "# Embedding-only CPT step: split rows vs masked rows vs full fine-tuning", "",
        f"## SmolLM2-135M-Instruct + {small['new_rows']:,} Russian tokens ({small['num_rows']:,} rows, tied head)", "",
        f"One batch of {options.batch_size}×{options.context_length} Russian tokens; AdamW, weight decay 0.1, "
        "float32, CPU.", "", *smollm2_table(options, small), "",
        f"## Llama-3-8B shape, {options.layers} decoder layers, {options.new_rows:,} trainable rows", "",
        f"128,256 x 4,096 untied embeddings, bfloat16 weights (the split rows train in float32), synthetic weights; "
        f"one AdamW step on {options.big_tokens} tokens, each design in a fresh process; resident memory from "
        "/proc/self/status.", "", *big_table(options, big), "",
        "Per-step seconds: " + "; ".join(f"{n} {[round(t, 2) for t in v]}" for n, v in small["times"].items()) + ".",
        f"Machine: before the run {load_before}; after it {machine_load()}.",
        "Command: `python benchmarks/bench_cpt_step.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(options).items() if k != "peak_of") + "`",
    ])
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cpt_step.md").write_text(text + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--context-length", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--new-rows", type=int, default=4000)
    parser.add_argument("--big-tokens", type=int, default=16)
    parser.add_argument("--peak-of", choices=(SPLIT, MASKED), help=argparse.SUPPRESS)  # the child process
    options = parser.parse_args()
    if options.peak_of:
        print(json.dumps(peak_of_one_step(options.peak_of, options)))
        return
    load_before = machine_load()
    small = time_smollm2(options)
    report(options, small, measure_8b(options), load_before)


if __name__ == "__main__":
    main()
