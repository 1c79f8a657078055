"""LEP on SmolLM2-135M-Instruct + Russian: does the propagated sibling read Russian like the adapted base and keep
the sibling's behaviour?

Three models, built here from SmolLM2-135M-Instruct ("base"):
- sibling: base + a LoRA fine-tune (merged into the weights) on a behaviour the base does not have: reverse the
  order of three English words given in a chat turn;
- adapted: base extended with the shared 16k Russian tokenizer (subword init) + a short embedding-only CPT on the
  Russian training lines (new rows only);
- propagated: `vocabshift.propagate(adapted, base, sibling, method=...)` for swap, overlap and conversion.

Figures: Russian held-out bits per byte (the shared 200-line split) of each propagated model vs the adapted base;
task accuracy (answer tokens predicted right, teacher forcing, on held-out words) vs the sibling.

    nice -n 10 python benchmarks/bench_lep_smollm2.py [--lora-steps 30] [--cpt-steps 20] [--held-out 100]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from smollm2_ru import load_smollm2, machine_load, russian_lines, russian_tokenizer
from vocabshift.propagation import METHODS
from vocabshift.record import add_cpt_entry
from vocabshift.training import bits_per_byte, freeze_for_embedding_training, pack_texts
from vocabshift_testing.corpora import read_corpus, smollm2

RESULTS = Path(__file__).parent / "results"
PROMPT = "Reverse the order of these words: {}"


def task_words(count: int = 3000) -> tuple[list[str], list[str]]:
    """(train words, held-out words): frequent lowercase English words of the shared corpus, split 4:1 (seed 0)."""
    counts: dict[str, int] = {}
    for line in read_corpus("en")[:20000]:
        for word in line.split():
            if word.isalpha() and word.islower() and 3 <= len(word) <= 8:
                counts[word] = counts.get(word, 0) + 1
    words = sorted(sorted(counts, key=counts.get, reverse=True)[:count])
    random.Random(0).shuffle(words)
    return words[: count * 4 // 5], words[count * 4 // 5 :]


def task_example(tokenizer, words: list[str]) -> tuple[list[int], list[int]]:
    """(ids, labels): the chat prompt, then the reversed words and the end of turn; labels on the answer only."""
    messages = [{"role": "user", "content": PROMPT.format(" ".join(words))}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer = tokenizer(" ".join(reversed(words)) + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return prompt_ids + answer, [-100] * len(prompt_ids) + answer


def task_batch(tokenizer, words: list[str], size: int, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    examples = [task_example(tokenizer, rng.sample(words, 3)) for _ in range(size)]
    width = max(len(ids) for ids, _ in examples)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in examples])
    labels = torch.tensor([labels + [-100] * (width - len(labels)) for _, labels in examples])
    return ids, labels


@torch.no_grad()
def task_accuracy(model, tokenizer, words: list[str], count: int) -> float:
    """Answer tokens predicted right (teacher forcing), in percent, on `count` prompts of held-out words."""
    rng, right, total = random.Random(123), 0, 0
    for _ in range(0, count, 25):
        ids, labels = task_batch(tokenizer, words, 25, rng)
        predicted = model(input_ids=ids).logits[:, :-1].argmax(-1)
        mask = labels[:, 1:] != -100
        right += (predicted[mask] == labels[:, 1:][mask]).sum().item()
        total += mask.sum().item()
    return 100 * right / total


def train(model, parameters, batches, steps: int, lr: float) -> float:
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        ids, labels = next(batches)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return loss.item()


def make_sibling(folder: Path, words: list[str], options) -> tuple[float, float]:
    """LoRA fine-tune of the base on the task, merged and saved; returns (seconds, last loss)."""
    model, tokenizer = load_smollm2()
    start, rng = time.perf_counter(), random.Random(1)
    config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=[
        "embed_tokens", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    peft_model = get_peft_model(model, config)
    batches = iter(lambda: task_batch(tokenizer, words, options.batch_size, rng), None)
    loss = train(peft_model, [p for p in peft_model.parameters() if p.requires_grad], batches, options.lora_steps,
                 options.lora_lr)
    peft_model.merge_and_unload().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return time.perf_counter() - start, loss


def make_adapted(folder: Path, train_lines: list[str], held: list[str], options) -> dict[str, float]:
    """Extend the base with the 16k Russian tokenizer, embedding-only CPT on the new rows, save."""
    model, source = load_smollm2()
    tokenizer = model.extend_vocabulary(russian_tokenizer(source), method="subword", source_tokenizer=source)
    figures = {"before_cpt": bits_per_byte(model, tokenizer, held)}
    data = pack_texts(train_lines[:20000], tokenizer, max_length=options.context_length, blocks=True)
    generator = torch.Generator().manual_seed(0)
    batches = ((b, b) for b in (data[torch.randint(len(data), (options.batch_size,), generator=generator)]
                                for _ in range(options.cpt_steps)))
    trainable = freeze_for_embedding_training(model, rows="new")
    start = time.perf_counter()
    figures["cpt_loss"] = train(model, trainable.parameters, batches, options.cpt_steps, options.cpt_lr)
    figures["cpt_seconds"] = time.perf_counter() - start
    trainable.fold()
    add_cpt_entry(model, {"rows": "new", "steps": options.cpt_steps, "lr": options.cpt_lr,
                       "batch_size": options.batch_size, "context_length": options.context_length})
    vocabshift.save_pretrained_atomic(model, tokenizer, folder)
    figures["new_tokens"] = len(vocabshift.get_record(model).new_ids)
    return figures


def measure(root: Path, options) -> dict:
    train_lines, held = russian_lines()
    held = held[: options.held_out]
    train_words, test_words = task_words()
    base, base_tokenizer = load_smollm2()
    figures = {"base": {"bpb": bits_per_byte(base, base_tokenizer, held),
                        "accuracy": task_accuracy(base, base_tokenizer, test_words, options.task_prompts)}}
    del base
    seconds, loss = make_sibling(root / "sibling", train_words, options)
    figures["sibling"] = _scores(root / "sibling", held, test_words, options) | {"seconds": seconds, "loss": loss}
    figures["adapted"] = make_adapted(root / "adapted", train_lines, held, options)
    figures["adapted"] |= _scores(root / "adapted", held, test_words, options)
    for method in METHODS:
        start = time.perf_counter()
        out = vocabshift.propagate(root / "adapted", smollm2(), root / "sibling", output_dir=root / method,
                                   method=method)
        figures[method] = {"seconds": time.perf_counter() - start} | _scores(out, held, test_words, options)
        figures[method]["fit"] = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(out).config
                                                       ).propagation[-1]["fit"]
    return figures


def _scores(folder: Path, held: list[str] | None, words: list[str], options) -> dict[str, float | None]:
    """Russian bpb on `held` (None: not measured) and task accuracy."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return {"bpb": None if held is None else bits_per_byte(model, tokenizer, held),
            "accuracy": task_accuracy(model, tokenizer, words, options.task_prompts)}


def report(figures: dict, options, load_before: str, seconds: float) -> str:
    adapted, sibling = figures["adapted"], figures["sibling"]
    rows = ["| model | Russian held-out bpb | vs adapted base | task accuracy (%) | vs sibling (points) | "
            "fit residual (W=I) | within 5% and 5 points |", "|---|---|---|---|---|---|---|"]
    for name in ("base", "sibling", "adapted", *METHODS):
        scores = figures[name]
        label = {"base": "base (SmolLM2-135M-Instruct)", "sibling": "sibling (base + merged LoRA)",
                 "adapted": "adapted base (extend + CPT)"}.get(name, f"propagated: `{name}`")
        fit = scores.get("fit", {}).get("input")
        residual = f"{fit['residual']:.3f} ({fit['identity_residual']:.3f})" if fit else ""
        within = "" if not fit else "yes" if (abs(scores["bpb"] / adapted["bpb"] - 1) <= 0.05 and abs(
            scores["accuracy"] - sibling["accuracy"]) <= 5) else "NO"
        bpb = "not measured | " if scores["bpb"] is None else (
            f"{scores['bpb']:.4f} | {scores['bpb'] / adapted['bpb'] - 1:+.1%}")
        rows.append(f"| {label} | {bpb} | "
                    f"{scores['accuracy']:.1f} | {scores['accuracy'] - sibling['accuracy']:+.1f} | {residual} | "
                    f"{within} |")
    return "\n".join([
        "# LEP on SmolLM2-135M-Instruct + Russian",
        "",
        f"Sibling: LoRA r=16 on the (tied) embeddings and all attention and MLP projections, "
        f"{options.lora_steps} steps × {options.batch_size} "
        f"prompts, lr {options.lora_lr}, merged (last loss {sibling['loss']:.3f}, {sibling['seconds']:.0f} s). "
        "Task: reverse the order of three English words (held-out words, "
        f"{options.task_prompts} prompts, answer tokens right under teacher forcing).",
        f"Adapted base: {adapted['new_tokens']:,} new Russian tokens (subword init), Russian bpb "
        f"{adapted['before_cpt']:.4f} before CPT; embedding-only CPT on the new rows, {options.cpt_steps} steps × "
        f"{options.batch_size}×{options.context_length} tokens, lr {options.cpt_lr} ({adapted['cpt_seconds']:.0f} s).",
        f"Russian bpb is on the first {options.held_out} of the shared 200 held-out lines (base and sibling read them "
        "with the original tokenizer; the others with the adapted vocabulary). The sibling's own bpb vs the base's "
        f"({sibling['bpb'] / figures['base']['bpb'] - 1:+.1%}) is what its fine-tune cost in Russian; propagation "
        "cannot undo it.",
        "",
        *rows,
        "",
        "Propagation seconds: " + ", ".join(f"{m} {figures[m]['seconds']:.1f}" for m in METHODS) + "; "
        f"whole run {seconds / 60:.1f} min.",
        f"Machine: before the run {load_before}; after it {machine_load()}.",
        "Command: `nice -n 10 python benchmarks/bench_lep_smollm2.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(options).items()) + "`",
    ])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lora-steps", type=int, default=30)
    parser.add_argument("--lora-lr", type=float, default=5e-4)
    parser.add_argument("--cpt-steps", type=int, default=20)
    parser.add_argument("--cpt-lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--context-length", type=int, default=64)
    parser.add_argument("--task-prompts", type=int, default=200)
    parser.add_argument("--held-out", type=int, default=100)
    options = parser.parse_args()
    load_before, start = machine_load(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_lep_") as root:
        figures = measure(Path(root), options)
    text = report(figures, options, load_before, time.perf_counter() - start)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lep_smollm2_ru.md").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
