"""Streaming LEP on a synthetic multi-shard model of at least 2 GB: peak memory and wall time of `propagate`.

The script writes, in a temporary folder (deleted at the end), an untied Llama-shaped instruct model (SmolLM2's
49,152-token vocabulary, hidden 2048, float32) as safetensors shards of about 400 MB, its base sibling (its own
embedding shards; the other shards hard links to the instruct ones, which propagate never reads from base) and the
adapted base: a one-layer model holding the base embeddings, extended with the shared 16k Russian tokenizer.

`propagate` (`swap`, no fit: the streaming alone; `conversion`, the default, with the float64 fit of W; each also
with `hardlink=True`, which hard-links the shards without embeddings instead of copying them), a plain copy of the
instruct shards (`shutil.copyfile`, the baseline) and the floor (benchmarks/floors.py: the parts of the work any
propagation must do, each timed alone) each run in a fresh child process, alternating, `--repeats` times, after one
untimed read of every shard of the three models (the page cache warm for all). The child reports its peak RSS
(`VmHWM`, the high-water mark of its own address space: unlike `ru_maxrss` it does not inherit the parent's size
across fork and exec) and the seconds of the call alone (the imports of vocabshift excluded). Bounds (issue 5):
peak RSS <= 3 x (input + output embedding bytes) + 300 MB, and propagate's time <= 1.5 x the copy's.

    nice -n 10 python benchmarks/bench_lep_stream.py [--layers 7] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

import vocabshift
from smollm2_ru import machine_load, russian_tokenizer
from vocabshift_testing.corpora import smollm2

RESULTS = Path(__file__).parent / "results"
HIDDEN, INTERMEDIATE, HEADS = 2048, 5632, 16
SHARD_BYTES = 400 * 2**20

CHILD = """
import json, shutil, sys, time
from pathlib import Path
import vocabshift
from floors import floors
what, root, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
start = time.perf_counter()
if what == "copy":
    out.mkdir()
    for shard in sorted((root / "instruct").glob("*.safetensors")):
        shutil.copyfile(shard, out / shard.name)
elif what == "floors":
    figures = floors(root, out, json.loads(sys.argv[4]))
else:
    method, _, hardlink = what.partition("+")
    vocabshift.propagate(root / "adapted", root / "base", root / "instruct", output_dir=out, method=method,
                         hardlink=bool(hardlink))
seconds = time.perf_counter() - start
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
result = {"seconds": seconds, "peak_rss": int(status["VmHWM"].split()[0]) * 1024}
print(json.dumps(result | (figures if what == "floors" else {})))
"""
METHODS = ("swap", "swap+hardlink", "conversion", "conversion+hardlink")


def config(layers: int, vocab: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=layers,
                       num_attention_heads=HEADS, num_key_value_heads=HEADS, tie_word_embeddings=False,
                       architectures=["LlamaForCausalLM"])


def layer_tensors(index: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    prefix = f"model.layers.{index}."
    shapes = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (HIDDEN, HIDDEN),
              "self_attn.v_proj": (HIDDEN, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
              "mlp.gate_proj": (INTERMEDIATE, HIDDEN), "mlp.up_proj": (INTERMEDIATE, HIDDEN),
              "mlp.down_proj": (HIDDEN, INTERMEDIATE)}
    tensors = {f"{prefix}{name}.weight": torch.randn(shape, generator=generator) * 0.02
               for name, shape in shapes.items()}
    tensors[f"{prefix}input_layernorm.weight"] = torch.ones(HIDDEN)
    tensors[f"{prefix}post_attention_layernorm.weight"] = torch.ones(HIDDEN)
    return tensors


def build(root: Path, layers: int) -> dict[str, int]:
    """Write base, instruct and adapted under `root`; returns the instruct shards' bytes and embedding bytes."""
    tokenizer, generator = AutoTokenizer.from_pretrained(smollm2()), torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    base = {"model.embed_tokens.weight": torch.randn(vocab, HIDDEN, generator=generator) * 0.02,
            "lm_head.weight": torch.randn(vocab, HIDDEN, generator=generator) * 0.02}
    _write_adapted(root / "adapted", tokenizer, base)
    instruct = {key: rows + 0.005 * torch.randn(rows.shape, generator=generator) for key, rows in base.items()}
    for role in ("base", "instruct"):
        (root / role).mkdir()
        config(layers, vocab).save_pretrained(root / role)
        tokenizer.save_pretrained(root / role)
    per_shard = max(1, SHARD_BYTES // sum(t.nbytes for t in layer_tensors(0, generator).values()))
    groups = [range(start, min(start + per_shard, layers)) for start in range(0, layers, per_shard)]
    names = [f"model-{n:05d}-of-{len(groups) + 2:05d}.safetensors" for n in range(1, len(groups) + 3)]
    weight_map = {"model.embed_tokens.weight": names[0], "model.norm.weight": names[-1], "lm_head.weight": names[-1]}
    for role, rows in (("base", base), ("instruct", instruct)):
        save_file({"model.embed_tokens.weight": rows["model.embed_tokens.weight"]}, root / role / names[0],
                  metadata={"format": "pt"})
        save_file({"model.norm.weight": torch.ones(HIDDEN), "lm_head.weight": rows["lm_head.weight"]},
                  root / role / names[-1], metadata={"format": "pt"})
    for name, group in zip(names[1:-1], groups):
        tensors = {key: value for index in group for key, value in layer_tensors(index, generator).items()}
        save_file(tensors, root / "instruct" / name, metadata={"format": "pt"})
        (root / "base" / name).hardlink_to(root / "instruct" / name)  # never read from base
        weight_map |= dict.fromkeys(tensors, name)
    shards = sum(p.stat().st_size for p in (root / "instruct").glob("*.safetensors"))
    for role in ("base", "instruct"):
        index = {"metadata": {"total_size": shards}, "weight_map": weight_map}
        (root / role / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return {"shards": shards, "embeddings": sum(t.nbytes for t in base.values())}


def _write_adapted(folder: Path, tokenizer, rows: dict[str, torch.Tensor]) -> None:
    """A one-layer model with the base embeddings, extended with the Russian tokenizer (subword init), saved."""
    model = LlamaForCausalLM(config(1, len(tokenizer)))
    model.model.embed_tokens.weight.data.copy_(rows["model.embed_tokens.weight"])
    model.lm_head.weight.data.copy_(rows["lm_head.weight"])
    new = model.extend_vocabulary(russian_tokenizer(tokenizer), method="subword", source_tokenizer=tokenizer)
    vocabshift.save_pretrained_atomic(model, new, folder)


def run_child(what: str, root: Path, shapes: dict | None = None) -> dict:
    out = root / f"out-{what}"
    command = [sys.executable, "-c", CHILD, what, str(root), str(out), *([json.dumps(shapes)] if shapes else [])]
    path = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ | {"PYTHONPATH": path})
    if result.returncode:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-3000:]}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    if what in METHODS:
        figures["embeddings"] = _embedding_bytes(out)
        fit = json.loads((out / "config.json").read_text())["vocabshift"]["propagation"][-1]["fit"]
        figures["pairs"], figures["sides"] = fit["input"]["rows"], len(fit)
    shutil.rmtree(out)
    os.sync()  # no writeback of this run's files during the next one
    return figures


def _embedding_bytes(folder: Path) -> int:
    from vocabshift.headers import read_header

    total = 0
    for shard in folder.glob("*.safetensors"):
        for key, info in read_header(shard).tensors.items():
            if key in ("model.embed_tokens.weight", "lm_head.weight"):
                total += info.end - info.begin
    return total


def measure(root: Path, options) -> dict:
    start = time.perf_counter()
    sizes = build(root, options.layers)
    sizes["build_seconds"] = time.perf_counter() - start
    for shard in root.glob("*/*.safetensors"):  # warm-up: every shard of the three models in the page cache
        with open(shard, "rb") as handle:
            while handle.read(2**24):
                pass
    runs = {what: [] for what in ("copy", *METHODS, "floors")}
    for _ in range(options.repeats):
        for what in runs:
            conversion = runs["conversion"][-1] if runs["conversion"] else {}
            shapes = {"output_bytes": conversion.get("embeddings"), "pairs": conversion.get("pairs"),
                      "sides": conversion.get("sides"), "hidden": HIDDEN}
            runs[what].append(run_child(what, root, shapes if what == "floors" else None))
    return {"sizes": sizes, "runs": runs}


def _floor_rows(floors: dict[str, float], copy: float) -> list[str]:
    parts = {"tokenizers": "parse the 3 tokenizers (`tokenizers.Tokenizer.from_file`)",
             "read_adapted": "read the adapted embedding tensors", "write_output": "write the output embedding bytes",
             "read_siblings": "read the base and instruct embedding tensors (vocabshift's formula)",
             "products": "float64 normal equations of the conversion fit (syrk + gemm, random rows)"}
    plain = floors["tokenizers"] + floors["read_adapted"] + floors["write_output"]
    sums = {"floor of a plain swap (first 3 rows)": plain, "floor of vocabshift's swap (first 4)":
            plain + floors["read_siblings"], "floor of vocabshift's conversion (all 5)":
            plain + floors["read_siblings"] + floors["products"]}
    rows = ["| part of the work | seconds (median) | vs plain copy |", "|---|---|---|"]
    rows += [f"| {text} | {floors[key]:.2f} | {floors[key] / copy:.2f}× |" for key, text in parts.items()]
    return rows + [f"| **{text}** | **{value:.2f}** | **{value / copy:.2f}×** |" for text, value in sums.items()]


def report(figures: dict, options, load_before: str) -> str:
    sizes, runs = figures["sizes"], figures["runs"]
    seconds = {what: statistics.median(r["seconds"] for r in results) for what, results in runs.items()}
    floors = {key: statistics.median(r[key] for r in runs["floors"]) for key in runs["floors"][0]
              if key not in ("seconds", "peak_rss")}
    out_embeddings = runs["conversion"][0]["embeddings"]
    bound = 3 * out_embeddings + 300 * 2**20
    mb = lambda value: f"{value / 2**20:,.0f} MB"  # noqa: E731
    rows = ["| propagate method | peak RSS | RSS bound: 3 × output embeddings + 300 MB | within | wall time (median) | "
            "vs plain copy | within 1.5× |", "|---|---|---|---|---|---|---|"]
    for method in METHODS:
        peak = max(r["peak_rss"] for r in runs[method])
        ratio = seconds[method] / seconds["copy"]
        rows.append(f"| `{method}` | {mb(peak)} | {mb(bound)} | {'yes' if peak <= bound else 'NO'} | "
                    f"{seconds[method]:.2f} s | {ratio:.1f}× | {'yes' if ratio <= 1.5 else 'NO'} |")
    return "\n".join([
        "# Streaming LEP on a synthetic multi-shard model",
        "",
        f"Instruct: untied Llama shape, hidden {HIDDEN}, {options.layers} layers, vocabulary 49,152, float32, "
        f"shards of at most about {SHARD_BYTES // 2**20} MB: {sizes['shards'] / 1e9:.2f} GB of shards "
        f"({mb(sizes['embeddings'])} of input + output embeddings). Adapted: the base embeddings extended with the "
        f"shared 16k Russian tokenizer (subword init); output input + output embeddings {mb(out_embeddings)}. "
        f"Baseline: `shutil.copyfile` of every instruct shard, {seconds['copy']:.2f} s (median; page cache warm). "
        "`+hardlink`: `propagate(..., hardlink=True)`, which hard-links the shards without embeddings.",
        "",
        *rows,
        "",
        "The floor: what any propagation must do, timed in the same run (benchmarks/floors.py).",
        "",
        *_floor_rows(floors, seconds["copy"]),
        "",
        "Runs (seconds / peak RSS): " + "; ".join(
            f"{what} " + ", ".join(f"{r['seconds']:.2f} s / {mb(r['peak_rss'])}" for r in results)
            for what, results in runs.items()),
        f"Building the models took {sizes['build_seconds']:.0f} s (not timed above).",
        f"Machine: before the run {load_before}; after it {machine_load()}.",
        "Command: `python benchmarks/bench_lep_stream.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(options).items()) + "`",
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=2)
    options = parser.parse_args()
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="bench_lep_stream_") as root:
        figures = measure(Path(root), options)
    text = report(figures, options, load_before)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lep_stream.md").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
