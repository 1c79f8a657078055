"""The GPU check that scripts/check_gpu.sh runs: vocabshift where users train, in minutes and offline.

Models are built from config with random weights at real body shapes (Llama-3.2-1B's with an untied head, as the 8B
models have; Qwen3-0.6B's, tied) in bfloat16 on the GPU, and the tokenizers are trained on the repository's data/
sample, so it needs only torch, transformers, accelerate, peft and the checkout. The old vocabulary is the one
trained on that sample (about 21k tokens, padded to a multiple of 64), not the real models' 128k-152k: padding a
tokenizer to their size with reserved tokens gives the right matrix, but its 100k added tokens make extending take
minutes. For each model it extends the vocabulary on the GPU (tens of thousands of new rows, `subword`), then
through the Trainer:

- trains 20 steps with `EmbeddingOnlyCallback` (cross-entropy) and with `DistillationTrainer` (teacher in bfloat16);
  the old rows and the body must stay bit-identical;
- checks that the saved model is plain (it loads with transformers alone, in another process, with the same rows)
  and that a run resumed from the step-12 checkpoint ends where the uninterrupted one does;
- times steps: embedding-only against full fine-tuning, distillation against cross-entropy (tokens per second and
  peak memory).

`--fsdp` trains under accelerate's FSDP2 (`fsdp_version: 2`) in one process started by torchrun, with sharded
checkpoints. `--dry-run` runs the same on the CPU with tiny bodies (CI runs it); accelerate shards only on GPU
backends, so there `--fsdp` trains unsharded, and the report says which. The report is markdown on stdout; exit
status 1 on a failed check.

    python scripts/gpu_check.py [--dry-run]
    torchrun --standalone --nproc_per_node 1 scripts/gpu_check.py --fsdp [--dry-run]
"""

from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from torch.distributed.tensor import DTensor
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    PreTrainedTokenizerFast,
    PrinterCallback,
    Qwen3Config,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import vocabshift
from vocabshift.training import pack_texts
from vocabshift_testing.corpora import read_sample

STEPS, SAVE_AT, FULL_STEPS = 20, 12, 6  # SAVE_AT divides no later step: one checkpoint a run, not two
SHAPES = {
    "Llama-3.2-1B shape, untied": (LlamaConfig, dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, rope_theta=500000.0, tie_word_embeddings=False)),
    "Qwen3-0.6B shape, tied": (Qwen3Config, dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)),
}
TINY_BODY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, tiny bodies (real vocabulary sizes)")
    parser.add_argument("--fsdp", action="store_true", help="train under accelerate FSDP2 (start with torchrun)")
    options = parser.parse_args()
    setting = _setting(options)
    source, new = tokenizers()
    failures: list[str] = []
    print(f"## {'FSDP2 through the Trainer' if options.fsdp else 'One device'}: {setting['device']}"
          f"{' (dry run, tiny bodies)' if options.dry_run else ''}\n")
    saved: list[tuple[str, Path, torch.Tensor, float]] = []
    with tempfile.TemporaryDirectory() as work:
        for index, name in enumerate(SHAPES):
            failures += check_model(name, setting, source, new, Path(work, str(index)), saved)
        failures += plain_saves(saved)
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    return 1 if failures else 0


def _setting(options) -> dict:
    if not options.dry_run and not torch.cuda.is_available():
        raise SystemExit("gpu_check.py: no cuda device here; pass --dry-run to run on the CPU with tiny shapes.")
    device = torch.device("cpu" if options.dry_run else "cuda")
    return {"device": device, "dtype": torch.float32 if options.dry_run else torch.bfloat16, "fsdp": options.fsdp,
            "dry_run": options.dry_run, "batch": 2 if options.dry_run else 8, "length": 32 if options.dry_run else 512}


def tokenizers() -> tuple[PreTrainedTokenizerFast, PreTrainedTokenizerFast]:
    """A byte-level BPE trained on the English sample (the model's), and a Russian one `like` it (the new one)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(read_sample("en"), trainers.BpeTrainer(
        vocab_size=32000, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    source = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                     pad_token="<|endoftext|>")
    return source, vocabshift.train_tokenizer(read_sample("ru"), like=source, vocab_size=48000)


def build(name: str, setting: dict, source) -> torch.nn.Module:
    """A model of `name`'s shape (a tiny body in a dry run) with random weights, made on the device."""
    config_class, shape = SHAPES[name]
    rows = -(-len(source) // 64) * 64
    config = config_class(**{**shape, **(TINY_BODY if setting["dry_run"] else {}), "vocab_size": rows},
                          bos_token_id=source.bos_token_id, eos_token_id=source.eos_token_id,
                          pad_token_id=source.pad_token_id)
    torch.manual_seed(0)
    with torch.device(setting["device"]):
        return AutoModelForCausalLM.from_config(config, dtype=setting["dtype"]).train()


def check_model(name: str, setting: dict, source, new, work: Path, saved: list) -> list[str]:
    """The checks of one model shape; each saved final model goes into `saved` (`plain_saves` loads them all in
    one process at the end)."""
    model = build(name, setting, source)
    start = time.perf_counter()
    tokenizer = model.extend_vocabulary(new, method="subword", source_tokenizer=source)
    extend_seconds = time.perf_counter() - start
    new_ids = torch.tensor(vocabshift.get_record(model).new_ids)
    print(f"### {name}\n\n{_millions(model)}M parameters, {len(new_ids):,} new rows, extended in {extend_seconds:.1f} s"
          f" on {setting['device'].type}\n")
    data = {"blocks": [{"input_ids": b, "labels": b} for b in
                       pack_texts(read_sample("ru"), tokenizer, max_length=setting["length"], blocks=True)],
            "texts": [{"text": t} for t in pack_texts(read_sample("ru"), tokenizer, max_length=setting["length"])]}
    runs, failures = {}, []
    for kind in ("cross-entropy", "distillation"):
        trained = copy.deepcopy(model)
        runs[kind] = train(kind, trained, tokenizer, source, data, setting, work / kind)
        failures += [f"{name}, {kind}: {f}" for f in unchanged(trained, model, new_ids)]
        expected = float(_full(trained.get_input_embeddings().weight)[new_ids[:256]].double().sum())
        saved.append((f"{name}, {kind}", work / kind / "final", new_ids[:256], expected))
        resumed = copy.deepcopy(model)
        train(kind, resumed, tokenizer, source, data, setting, work / kind, resume=SAVE_AT)
        failures += [f"{name}, {kind}: {f}" for f in same_rows(resumed, trained, new_ids, setting)]
        shutil.rmtree(work / kind / f"checkpoint-{SAVE_AT}")  # only the final model is read again
    runs["full fine-tuning"] = train("full fine-tuning", copy.deepcopy(model), tokenizer, source, data, setting,
                                     work / "full")
    print(_table(runs, setting))
    if setting["fsdp"] and not setting["dry_run"]:
        failures += [f"{name}, {kind}: accelerate did not shard the model" for kind, run in runs.items()
                     if not run["sharded"]]
    return failures


def train(kind: str, model, tokenizer, source, data: dict, setting: dict, folder: Path, *,
          resume: int | None = None) -> dict:
    """Train `model` as `kind` says through the Trainer (saving at SAVE_AT; with `resume`, from that checkpoint)."""
    clock = Clock(setting["device"])
    steps = FULL_STEPS if kind == "full fine-tuning" else STEPS
    args = _arguments(folder, setting, steps)
    callbacks = [clock] if kind == "full fine-tuning" else [vocabshift.EmbeddingOnlyCallback(rows="new"), clock]
    if kind == "distillation":
        trainer = vocabshift.DistillationTrainer(
            model=model, args=args, train_dataset=data["texts"], processing_class=tokenizer, teacher_tokenizer=source,
            teacher_dtype=torch.bfloat16, max_length=setting["length"], callbacks=callbacks)
    else:
        trainer = Trainer(model=model, args=args, train_dataset=data["blocks"], callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # the report is the tables
    trainer.train(resume_from_checkpoint=None if resume is None else str(folder / f"checkpoint-{resume}"))
    if resume is None and kind != "full fine-tuning":
        save_whole(trainer, folder / "final")
    return {"tokens_per_second": clock.tokens_per_second(setting), "peak_gib": clock.peak_gib,
            "sharded": _sharded(trainer), "as": type(trainer.model_wrapped).__name__}


def save_whole(trainer, folder: Path) -> None:
    """The trained model saved whole, as users save the final one (under FSDP2 the checkpoints stay sharded)."""
    plugin = trainer.accelerator.state.fsdp_plugin if trainer.is_fsdp_enabled else None
    if plugin is not None:
        plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(str(folder))
    if plugin is not None:
        plugin.set_state_dict_type("SHARDED_STATE_DICT")


def _arguments(folder: Path, setting: dict, steps: int) -> TrainingArguments:
    fsdp = {"fsdp": True, "fsdp_config": {
        "fsdp_version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "state_dict_type": "SHARDED_STATE_DICT",
        "reshard_after_forward": True, "cpu_ram_efficient_loading": False}} if setting["fsdp"] else {}
    return TrainingArguments(str(folder), max_steps=steps, per_device_train_batch_size=setting["batch"],
                             learning_rate=1e-3, lr_scheduler_type="constant", weight_decay=0.0, save_strategy="steps",
                             save_steps=SAVE_AT, report_to=[], disable_tqdm=True, logging_strategy="no", seed=0,
                             use_cpu=setting["device"].type == "cpu", bf16=setting["dtype"] == torch.bfloat16,
                             dataloader_pin_memory=False, **fsdp)


class Clock(TrainerCallback):
    """Seconds of the steps after the first two (warm-up), and the device's peak memory over the run."""

    def __init__(self, device: torch.device):
        self.device, self.seconds, self.timed, self.peak_gib = device, 0.0, 0, None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def on_step_begin(self, args, state, control, **kwargs):
        self._sync()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        if state.global_step > 2:
            self.seconds, self.timed = self.seconds + time.perf_counter() - self._start, self.timed + 1
        if self.device.type == "cuda":
            self.peak_gib = torch.cuda.max_memory_allocated(self.device) / 2**30

    def tokens_per_second(self, setting: dict) -> float:
        return self.timed * setting["batch"] * setting["length"] / max(self.seconds, 1e-9)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def unchanged(trained, original, new_ids: torch.Tensor) -> list[str]:
    """The parameters that moved where they must not: the body anywhere, the embeddings outside the new rows."""
    old = torch.ones(original.config.vocab_size, dtype=torch.bool)
    old[new_ids] = False
    before = {name: _full(p) for name, p in original.named_parameters()}
    failures = []
    for name, parameter in trained.named_parameters():
        now, then, matrix = _full(parameter), before[name], name.endswith(("embed_tokens.weight", "lm_head.weight"))
        if matrix:
            now, then = now[old.to(now.device)], then[old.to(then.device)]
        if not torch.equal(now, then):
            failures.append(f"{name}: {'old rows' if matrix else 'the body'} moved")
    return failures


def plain_saves(saved: list[tuple[str, Path, torch.Tensor, float]]) -> list[str]:
    """Each saved model loads with transformers alone (one other process for all, vocabshift never imported) and has
    the trained model's new rows: `saved` holds (label, folder, new ids, the sum of those input rows)."""
    code = ("import sys, torch, transformers\n"
            "for folder, ids in zip(sys.argv[1::2], sys.argv[2::2]):\n"
            "    m = transformers.AutoModelForCausalLM.from_pretrained(folder)\n"
            "    ids = torch.tensor([int(i) for i in ids.split(',')])\n"
            "    print(float(m.get_input_embeddings().weight[ids].double().sum()), flush=True)\n"
            "assert 'vocabshift' not in sys.modules\n")
    arguments = [word for _, folder, ids, _ in saved for word in (str(folder), ",".join(map(str, ids.tolist())))]
    done = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True)
    if done.returncode != 0:
        return [f"the saved models do not load without vocabshift: {done.stderr.strip()[-300:]}"]
    return [f"{label}: the saved model's new rows differ from the trained model's ({found} vs {expected})"
            for (label, _, _, expected), found in zip(saved, map(float, done.stdout.split()), strict=True)
            if abs(found - expected) > 1e-6 * max(1.0, abs(expected))]


def same_rows(resumed, uninterrupted, new_ids: torch.Tensor, setting: dict) -> list[str]:
    """A run resumed from the checkpoint ends where the uninterrupted one does: exactly in float32; in bfloat16 within
    the rounding of the float32 rows into the checkpoint's bfloat16 weights."""
    tolerance = {"rtol": 0.0, "atol": 0.0} if setting["dtype"] == torch.float32 else {"rtol": 2e-2, "atol": 1e-3}
    for a, b in ((resumed.get_input_embeddings(), uninterrupted.get_input_embeddings()),
                 (resumed.get_output_embeddings(), uninterrupted.get_output_embeddings())):
        a, b = _full(a.weight)[new_ids], _full(b.weight)[new_ids]
        if not torch.allclose(a, b, **tolerance):
            gap = (a.float() - b.float()).abs().max().item()
            return [f"the resumed run ends elsewhere than the uninterrupted one (largest difference {gap:.3g})"]
    return []


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A parameter's whole value (gathered when FSDP2 shards it)."""
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach()


def _sharded(trainer) -> bool:
    from torch.distributed.fsdp import FSDPModule
    return any(isinstance(m, FSDPModule) for m in trainer.model_wrapped.modules())


def _millions(model) -> str:
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:,.0f}"


def _table(runs: dict, setting: dict) -> str:
    lines = ["| run | tokens per second | x cross-entropy | peak memory (GiB) | trained as | sharded by FSDP2 |",
             "|---|---|---|---|---|---|"]
    base = runs["cross-entropy"]["tokens_per_second"]
    for kind, run in runs.items():
        memory = "-" if run["peak_gib"] is None else f"{run['peak_gib']:.2f}"
        lines.append(f"| {kind} | {run['tokens_per_second']:,.0f} | {run['tokens_per_second'] / base:.2f}x | "
                     f"{memory} | {run['as']} | {'yes' if run['sharded'] else 'no'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
