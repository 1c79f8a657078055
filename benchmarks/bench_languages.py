"""The adapted model against the original given the same training, on several languages.

SmolLM2-135M-Instruct, extend mode, `subword`, a tokenizer of the target language (16k, or what the corpus gives),
embedding-only training at 4 sequences of up to 128 tokens per step, AdamW at a constant learning rate of 1e-3,
no weight decay. Every arm reads the same training lines in the same seeded order (each packed to 128 tokens of its
own tokenizer, never shuffled again), so that only the model and its objective differ:

- `original`: the untrained original model with its own tokenizer;
- `control`: the fair control, the original model with its own tokenizer, every embedding row training with
  cross-entropy (`Trainer` + `EmbeddingOnlyCallback(rows="all")`);
- `cross-entropy`: the adapted model, its new rows training with cross-entropy (`Trainer` +
  `EmbeddingOnlyCallback(rows="new")`);
- `default`: the adapted model, its new rows training with `DistillationTrainer`'s default objective.

The adapted model is the README's recipe: `extend_vocabulary(new, method="subword", target_texts=<the language's
training lines>, source_texts=<the English corpus's training lines>)`, which leaves out the new tokens that change
how English is cut unless they are the language's (`keep_source_segmentation`, on with `target_texts`).

On request (`--arms`), earlier recipes on the full vocabulary (no `target_texts`): `cross-entropy, full
vocabulary`, `default, full vocabulary, no replay` (the default before: `source=0`), `teacher everywhere` (every
sequence, every chunk counted), `default without hidden`, `default + source`, `cross-entropy, all rows`,
`cross-entropy, 4k tokenizer`; `default + source, English kept` (a vocabulary where no new token changes how English
is cut) and `default, English kept for the target, no replay`; `cross-entropy + replay` (the recipe's vocabulary,
cross-entropy and the source replay, no teacher); `next-token only` (`DistillationTrainer` with
`DistillationWeights.next_token_only()`: its own path, no teacher, no replay).

Held-out bits per byte (200 lines of the language, never trained on, scored as passages of consecutive lines up to
800 bytes: every tokenizer sees the same bytes of context) at each checkpoint, seconds per training step (the batch's
collation included, scoring excluded), English held-out bits per byte after training (scored alike), and, from
`--seeds`, the same arms again with other seeds to `--seed-steps` steps (cross-entropy to `--baseline-steps` too,
so that each seed has an equal wall time comparison). Parity: the first checkpoint where an arm of the adapted model
passes the untrained original, and where it passes the control at the same step, with the bytes of text each had
read.

    python benchmarks/bench_languages.py [--languages ru de vi] [--steps 25 50 100 200 400] [--baseline-steps 600]
                                         [--arms control cross-entropy default] [--seeds 1] [--seed-steps 100]
                                         [--seed-arms cross-entropy default] [--lockstep] [--suffix _recipe] [--render]

Cross-entropy also trains to `--baseline-steps`, so that the other arms meet it at equal wall time: each checkpoint's
own elapsed training seconds against cross-entropy's, interpolated between its checkpoints (runs kept from before the
elapsed seconds were recorded use their mean seconds per step). With `--lockstep` each seed's arms train in turns,
one step each, in threads of one process (turns.py): runs of one arm minutes apart differ by several percent in
seconds per step on a shared machine, and runs in turns meet the same drift. Writes
benchmarks/results/languages_<language><suffix>.md / .json / .png and languages<suffix>.md (files without a suffix:
the runs of the recipe before, whose `default` and `cross-entropy` were on the full vocabulary); runs of an earlier
command for the language that this one does not repeat (arm and seed) are kept, so a long benchmark can run in parts.
`--render` rewrites the files of `--languages` (with `--suffix`) from their JSON, training nothing.
"""

from __future__ import annotations

import argparse
import copy
import functools
import itertools
import json
import random
import re
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from bench_distill import Checkpoints, at_seconds, bpb_at_seconds, timed_curve
from transformers import Trainer, TrainerCallback, TrainingArguments
from turns import TakingTurns, Turns, train_in_turns

import vocabshift
from smollm2_ru import HELD_OUT, load_smollm2, machine_load
from vocabshift.corpus import shipped_english
from vocabshift.training import DistillationWeights, bits_per_byte, pack_texts
from vocabshift.training.evaluation import eval_mode
from vocabshift.training.plots import plot_curves
from vocabshift_testing.corpora import held_out_split, passages, read_corpus, target_tokenizer

RESULTS = Path(__file__).parent / "results"
LENGTH, BATCH, RATE = 128, 4, 1e-3


class CausalCollator:
    """The tokenizer's bos (else eos), then the text's tokens up to `LENGTH` in all; labels -100 at padding."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id

    def __call__(self, examples):
        encoded = self.tokenizer([e["text"] for e in examples], add_special_tokens=False)["input_ids"]
        rows = [[self.prefix, *ids][:LENGTH] for ids in encoded]
        width = max(map(len, rows))
        ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


class InOrderTrainer(Trainer):
    """Reads the training set in the given order (the lines are shuffled once, by seed, before packing)."""

    def _get_train_sampler(self, *args, **kwargs):
        return torch.utils.data.SequentialSampler(self.train_dataset)


class InOrderDistillationTrainer(vocabshift.DistillationTrainer):
    def _get_train_sampler(self, *args, **kwargs):
        return torch.utils.data.SequentialSampler(self.train_dataset)


def _arguments(work, steps, seed) -> TrainingArguments:
    return TrainingArguments(work, max_steps=steps, per_device_train_batch_size=BATCH, learning_rate=RATE,
                             lr_scheduler_type="constant", weight_decay=0.0, logging_steps=50, save_strategy="no",
                             report_to=[], seed=seed, disable_tqdm=True, dataloader_pin_memory=False,
                             remove_unused_columns=False)


ARMS = {  # name: (model, weights of DistillationTrainer or None for a plain Trainer with cross-entropy)
    "control": ("original", None),
    "cross-entropy": ("English kept for the target", None),
    "default": ("English kept for the target", DistillationWeights()),
    # earlier recipes, kept to rerun them: the full vocabulary, no source replay (the default before)
    "cross-entropy, full vocabulary": ("adapted", None),
    "default, full vocabulary, no replay": ("adapted", DistillationWeights(source=0.0)),
    "cross-entropy, all rows": ("adapted, all rows", None),
    "cross-entropy, 4k tokenizer": ("adapted, 4k", None),
    "teacher everywhere": ("adapted", DistillationWeights(teacher_share=1, gate=False, adaptive_share=False,
                                                          source=0.0)),
    "default without hidden": ("adapted", DistillationWeights(hidden=0, source=0.0)),
    "default + source": ("adapted", DistillationWeights(source=1.0)),
    "default + source, English kept": ("English kept", DistillationWeights(source=1.0)),
    "default, English kept for the target, no replay": ("English kept for the target", DistillationWeights(source=0.0)),
    "cross-entropy + replay": ("English kept for the target",
                               DistillationWeights(hidden=0, next_piece=0, piece_tree=0)),
    # DistillationTrainer's own path without teacher or replay: against cross-entropy, what the trainer adds alone
    "next-token only": ("English kept for the target", DistillationWeights.next_token_only()),
}
KEPT = {  # the extend_vocabulary options of each vocabulary that keeps English's cuts
    "English kept": lambda setting: {"keep_source_segmentation": True, "source_texts": setting["english_train"]},
    # the recipe: target_texts turns keep_source_segmentation on
    "English kept for the target": lambda setting: {"source_texts": setting["english_train"],
                                                    "target_texts": setting["train"]},
}


class Logged(TrainerCallback):
    """Keeps the trainer's logged teacher figures (share, lead, wins) by step."""

    def __init__(self):
        self.entries = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        figures = {k.removeprefix("distill/"): v for k, v in (logs or {}).items() if k.startswith("distill/teacher")}
        if figures:
            self.entries.append({"step": state.global_step, **figures})


def train_arm(setting, arm, steps, seed, keep_model=False) -> dict:
    """One arm from its own copy of the original model: its curve, seconds per step, English, bytes read (and with
    `keep_model` the trained model and its tokenizer)."""
    run = prepare_arm(setting, arm, steps, seed)
    run["trainer"].train()
    return finish_arm(setting, run, keep_model)


def prepare_arm(setting, arm, steps, seed, turns=None) -> dict:
    """An arm's trainer on its own copy of the model, ready to train (with `turns`, one that takes turns with the
    other runs of that `Turns`), and what `finish_arm` needs."""
    kind, weights = ARMS[arm]
    extended, tokenizer = _extended(setting, kind)
    model = copy.deepcopy(extended)
    if kind not in setting["start"]:  # extending is deterministic: every arm of a kind starts from one score
        with eval_mode(model):
            setting["start"][kind] = bits_per_byte(model, tokenizer, setting["held_out"])
    texts = [{"text": text} for text in training_texts(setting["train"], tokenizer, BATCH * max(steps), seed)]
    scoring = (model, tokenizer, setting["held_out"], steps)
    checkpoints = Checkpoints(*scoring) if turns is None else TakingTurns(turns, arm, *scoring)
    logged, work = Logged(), tempfile.TemporaryDirectory()
    rows = "all" if kind in ("original", "adapted, all rows") else "new"
    trainer = make_trainer(setting, model, tokenizer, weights, _arguments(work.name, max(steps), seed), texts,
                           [vocabshift.EmbeddingOnlyCallback(rows=rows), checkpoints, logged])
    return {"kind": kind, "model": model, "tokenizer": tokenizer, "texts": texts, "steps": steps,
            "checkpoints": checkpoints, "logged": logged, "trainer": trainer, "work": work}


def finish_arm(setting, run, keep_model=False) -> dict:
    """A trained arm's figures (its English scored now: after every run that takes turns with it has finished)."""
    run["work"].cleanup()
    model, tokenizer, checkpoints, texts = run["model"], run["tokenizer"], run["checkpoints"], run["texts"]
    with eval_mode(model):
        english = bits_per_byte(model, tokenizer, setting["english"])
    teacher = getattr(run["trainer"], "teacher", None)  # None: cross-entropy, no teacher
    dtype = None if teacher is None else str(teacher.dtype or torch.float32).removeprefix("torch.")
    steps = max(run["steps"])
    return {"curve": [(0, setting["start"][run["kind"]]), *checkpoints.curve],
            "seconds_per_step": checkpoints.train_seconds / steps, "elapsed": [(0, 0.0), *checkpoints.elapsed],
            "english": english, "bytes_per_step": _bytes(texts, tokenizer) / len(texts) * BATCH,
            "teacher": run["logged"].entries, "teacher_dtype": dtype,
            "new_tokens": len(tokenizer) - len(setting["source"]),
            **({"model": model, "tokenizer": tokenizer} if keep_model else {})}


def make_trainer(setting, model, tokenizer, weights, args, texts, callbacks):
    """A plain Trainer with cross-entropy (`weights` None) or a DistillationTrainer with `weights`, reading `texts` in
    order."""
    if weights is None:
        return InOrderTrainer(model=model, args=args, train_dataset=texts, data_collator=CausalCollator(tokenizer),
                              callbacks=callbacks)
    return InOrderDistillationTrainer(model=model, args=args, train_dataset=texts, processing_class=tokenizer,
                                      teacher_tokenizer=setting["source"], weights=weights, callbacks=callbacks)


def _extended(setting, kind):
    """The model of `kind` before training and its tokenizer: extended on first use, then kept (extending is
    deterministic, so every arm of a kind starts from a copy of the same model)."""
    cache = setting.setdefault("extended", {"original": (setting["base"], setting["source"])})
    if kind not in cache:
        model = copy.deepcopy(setting["base"])
        kept = KEPT[kind](setting) if kind in KEPT else {}
        tokenizer = model.extend_vocabulary(_new_tokenizer(setting, kind), method="subword",
                                            source_tokenizer=setting["source"], **kept)
        cache[kind] = (model, tokenizer)
    return cache[kind]


def _new_tokenizer(setting, kind):
    """The language's 16k tokenizer, or its 4k one for the `adapted, 4k` arms (trained on first use, then cached)."""
    if kind != "adapted, 4k":
        return setting["new"]
    if "small" not in setting:
        setting["small"] = target_tokenizer(setting["source"], setting["language"], vocab_size=4000, held_out=HELD_OUT)
    return setting["small"]


def training_texts(lines, tokenizer, count, seed) -> list[str]:
    """`count` texts of up to LENGTH tokens: the lines shuffled by `seed`, then packed in that order."""
    texts = _packed(tuple(lines), tokenizer, seed)[:count]
    if len(texts) < count:
        raise SystemExit(f"The corpus packs into {len(texts)} texts, fewer than the {count} wanted: pass fewer steps.")
    return texts


@functools.cache
def _packed(lines: tuple[str, ...], tokenizer, seed) -> list[str]:
    """Every line, shuffled by `seed` and packed: once per lines, tokenizer and seed (arms of a kind share them)."""
    shuffled = list(lines)
    random.Random(seed).shuffle(shuffled)
    return pack_texts(shuffled, tokenizer, max_length=LENGTH)


def _bytes(texts, tokenizer) -> float:
    """Bytes of text the collators keep (the first LENGTH - 1 tokens of each packed text)."""
    encoded = tokenizer([t["text"] for t in texts], add_special_tokens=False, return_offsets_mapping=True)
    total = 0
    for text, offsets in zip(texts, encoded["offset_mapping"]):
        kept = offsets[: LENGTH - 1]
        total += len(text["text"][: kept[-1][1]].encode("utf-8")) if kept else 0
    return total


def setting_for(language) -> dict:
    """The language's training and held-out lines, English held-out lines, SmolLM2 and the new tokenizer."""
    train, held_out_lines = held_out_split(read_corpus(language), HELD_OUT)
    shipped = set(shipped_english())  # extend_vocabulary checks English segmentation on these: not scored here
    english_train, english_lines = held_out_split([line for line in read_corpus("en") if line not in shipped],
                                                  HELD_OUT)
    held_out, english = passages(held_out_lines), passages(english_lines)  # the same bytes of context either way
    base, source = load_smollm2()
    new = target_tokenizer(source, language, vocab_size=16000, held_out=HELD_OUT)
    with eval_mode(base):
        original = {"held_out": bits_per_byte(base, source, held_out), "english": bits_per_byte(base, source, english)}
    return {"language": language, "train": train, "held_out": held_out, "english": english,
            "english_train": [*shipped_english(), *english_train], "base": base,
            "source": source, "new": new, "original": original, "start": {"original": original["held_out"]}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["ru", "de", "vi"])
    parser.add_argument("--steps", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    parser.add_argument("--baseline-steps", type=int, nargs="*", default=None,
                        help="cross-entropy's further checkpoints, for equal wall time (default: 1.5x the last step)")
    parser.add_argument("--arms", nargs="*", default=["cross-entropy", "default", "control"], choices=list(ARMS),
                        help="arms of seed 0, to --steps (none: only the further --seeds)")
    parser.add_argument("--seeds", type=int, nargs="*", default=[1], help="further seeds, run to --seed-steps")
    parser.add_argument("--seed-arms", nargs="*", default=["cross-entropy", "default"], choices=list(ARMS))
    parser.add_argument("--seed-steps", type=int, default=100)
    parser.add_argument("--lockstep", action="store_true",
                        help="train each seed's arms in turns, one step each (turns.py), so that their clocks compare")
    parser.add_argument("--suffix", default="_recipe",
                        help="appended to the results' file names, to keep another run's")
    parser.add_argument("--render", action="store_true",
                        help="rewrite each language's files from its JSON (after a change to the tables), training "
                             "nothing; the machine's load stays the one the training run recorded")
    options = parser.parse_args()
    if options.baseline_steps is None:
        options.baseline_steps = [max(options.steps) * 3 // 2]
    torch.set_num_threads(2)
    if options.render:
        for language in options.languages:
            render(options, language)
        write_summary(options)
        return
    for language in options.languages:
        setting, load = setting_for(language), machine_load()
        print(f"{language}: {len(setting['new']):,} tokens in the new tokenizer; original {setting['original']}")
        results, commands = _earlier(options, language)
        commands.append(_command(options, language))
        runs = [(arm, 0, sorted({*options.steps, *(options.baseline_steps if arm == "cross-entropy" else [])}))
                for arm in options.arms]
        runs += [(arm, seed, sorted({options.seed_steps, *(options.baseline_steps if arm == "cross-entropy" else [])}))
                 for seed in options.seeds for arm in options.seed_arms]
        for seed, group in itertools.groupby(runs, key=lambda run: run[1]):
            for arm, figures in _train_runs(setting, seed, list(group), options.lockstep):
                results.setdefault(arm, {})[str(seed)] = figures
                write_language(options, language, setting, results, load, commands)
    write_summary(options)


def render(options, language) -> None:
    """Rewrite the language's files from its JSON, with its training run's machine load and the sizes its text
    names (the tokenizer's, the English lines'): no model or tokenizer is loaded."""
    text = (RESULTS / f"languages_{language}{options.suffix}.md").read_text(encoding="utf-8")
    before, after = re.search(r"^Machine: before (.*); after (.*)\.$", text, re.MULTILINE).groups()
    tokens, lines = (int(re.search(pattern, text)[1].replace(",", "")) for pattern in
                     (r"\(([\d,]+) tokens in the new tokenizer\)", r"`source_texts=` ([\d,]+) English lines"))
    data = json.loads((RESULTS / f"languages_{language}{options.suffix}.json").read_text())
    setting = {"new": range(tokens), "english_train": range(lines), "original": data["original"]}  # what the text needs
    write_language(options, language, setting, data["results"], before, data["commands"], after=after)


def _train_runs(setting, seed, runs, lockstep):
    """Each `(arm, seed, steps)` run of one seed, one after the other, or with `lockstep` all in turns (`Turns`):
    yields each arm and its figures."""
    if not lockstep:
        for arm, _, steps in runs:
            print(f"  {arm}, seed {seed}", flush=True)
            yield arm, train_arm(setting, arm, steps, seed)
        return
    print(f"  {', '.join(arm for arm, _, _ in runs)} in turns, seed {seed}", flush=True)
    turns = Turns([arm for arm, _, _ in runs])
    prepared = {arm: prepare_arm(setting, arm, steps, seed, turns) for arm, _, steps in runs}
    train_in_turns(turns, {arm: run["trainer"] for arm, run in prepared.items()})
    for arm, run in prepared.items():
        yield arm, finish_arm(setting, run)


def _earlier(options, language) -> tuple[dict[str, dict[str, dict]], list[str]]:
    """The runs an earlier command left for this language (kept unless run again), and its commands."""
    path = (RESULTS / f"languages_{language}{options.suffix}").with_suffix(".json")
    data = json.loads(path.read_text()) if path.exists() else {}
    return data.get("results", {}), data.get("commands", [])


def _command(options, language) -> str:
    def names(values):
        return " ".join(shlex.quote(str(value)) for value in values)

    return (f"python benchmarks/bench_languages.py --languages {language} --steps {names(options.steps)}"
            f" --baseline-steps {names(options.baseline_steps)} --arms {names(options.arms)} --seeds"
            f" {names(options.seeds)} --seed-steps {options.seed_steps} --seed-arms {names(options.seed_arms)}"
            + (" --lockstep" if options.lockstep else "") + (f" --suffix {options.suffix}" if options.suffix else ""))


def parity(result, reference) -> str:
    """The first checkpoint where `result` is below `reference` (a number, or a run compared at the same step)."""
    curve = dict(reference["curve"]) if isinstance(reference, dict) else None
    for step, bpb in result["curve"][1:]:
        bar = reference if curve is None else curve.get(step)
        if bar is not None and bpb < bar:
            return (f"step {step} ({step * BATCH * LENGTH:,} tokens, {step * result['bytes_per_step'] / 1e6:.2f} MB of "
                    "text)")
    step, bpb = result["curve"][-1]
    bar = reference if curve is None else curve.get(step)
    return f"not within {step} steps ({bpb:.4f} against {bar:.4f})" if bar is not None else "-"


def _f(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _curve_table(results, original) -> list[str]:
    arms = list(results)
    first = {arm: dict(results[arm]["0"]["curve"]) for arm in arms}
    ce = results.get("cross-entropy", {}).get("0")
    timed = [arm for arm in arms if arm not in ("cross-entropy", "control") and ce is not None]
    lines = ["| step | " + " | ".join(arms) + "".join(f" | cross-entropy at {arm}'s seconds" for arm in timed) + " |",
             "|---|" + "---|" * (len(arms) + len(timed))]
    clock = {arm: _clock(results[arm]["0"]) for arm in timed}
    for step in sorted(set().union(*first.values())):
        cells = [_f(first[arm].get(step)) for arm in arms]
        for arm in timed:
            cells.append(at_seconds(ce, clock[arm][step]) if step in clock[arm] else "-")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines + ["", f"The untrained original model with its own tokenizer: {original['held_out']:.4f}."]


def _clock(run) -> dict[int, float]:
    """The run's elapsed training seconds at each of its checkpoint steps."""
    return {step: seconds for (step, _), (seconds, _) in zip(run["curve"], timed_curve(run), strict=True)}


def _cost_table(results, original) -> list[str]:
    ce = results.get("cross-entropy", {}).get("0")
    lines = ["| arm | new tokens | seconds per step | x cross-entropy | MB of text per 1,000 steps | "
             "English after training | x the original's |", "|---|---|---|---|---|---|---|"]
    for arm, runs in results.items():
        run = runs["0"]
        ratio = f"{_slower(run, ce):.2f}x" if ce else "-"
        added = f"{run['new_tokens']:,}" if "new_tokens" in run else "-"  # runs kept from before: not recorded
        lines.append(f"| {arm} | {added} | {run['seconds_per_step']:.2f} | {ratio} | {run['bytes_per_step'] / 1e3:.2f} "
                     f"| {run['english']:.4f} | {run['english'] / original['english']:.4f} |")
    return lines + ["", f"The original model's English: {original['english']:.4f} bits per byte (200 held-out lines, "
                        "in passages of up to 800 bytes)."]


def _seed_table(results, seed_steps) -> list[str]:
    seeds = sorted({seed for runs in results.values() for seed in runs}, key=int)
    lines = ["| arm | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |", "|---|" + "---|" * (len(seeds) + 1)]
    for arm, runs in results.items():
        values = [dict(runs[s]["curve"]).get(seed_steps) if s in runs else None for s in seeds]
        known = [v for v in values if v is not None]
        mean = sum(known) / len(known) if known else None
        lines.append(f"| {arm} | " + " | ".join(map(_f, values)) + f" | {_f(mean)} |")
    return lines


def _wall_time_table(results, seed_steps) -> list[str]:
    """Each arm that is not cross-entropy at `seed_steps`, per seed, against cross-entropy of the same seed after as
    many training seconds, and the mean of the seeds' leads."""
    ce = results.get("cross-entropy", {})
    lines = [f"| arm | seed | at {seed_steps} steps | seconds | cross-entropy at those seconds | x cross-entropy's "
             "seconds to that step |", "|---|---|---|---|---|---|"]
    for arm, runs in results.items():
        if arm in ("cross-entropy", "control"):
            continue
        for seed, run in sorted(runs.items(), key=lambda item: int(item[0])):
            clock = _clock(run)
            if seed not in ce or seed_steps not in clock:
                continue
            lines.append(f"| {arm} | {seed} | {_f(dict(run['curve'])[seed_steps])} | {clock[seed_steps]:.0f} | "
                         f"{at_seconds(ce[seed], clock[seed_steps])} | {_slower(run, ce[seed], seed_steps):.2f}x |")
    leads = [f"`{arm}`: {_lead_summary(runs, ce, seed_steps)}" for arm, runs in results.items()
             if arm not in ("cross-entropy", "control") and ce]
    return lines + (["", "Lead over cross-entropy (its bits per byte minus the arm's: positive where the arm is "
                         f"better) at {seed_steps} steps, mean ± standard error over the seeds: " + "; ".join(leads)
                     + "."] if leads else [])


def _leads(runs, ce, step) -> list[tuple[float, float]]:
    """Per seed run to `step` that cross-entropy has too: the arm's lead over cross-entropy at that step, and after
    as many training seconds (bits per byte, positive where the arm is better)."""
    pairs = []
    for seed, run in runs.items():
        here, clock = dict(run["curve"]).get(step), _clock(run)
        there = dict(ce[seed]["curve"]).get(step) if seed in ce else None
        timed = bpb_at_seconds(ce[seed], clock[step]) if there is not None and step in clock else None
        if here is not None and timed is not None:
            pairs.append((there - here, timed - here))
    return pairs


def _lead_summary(runs, ce, step) -> str:
    pairs = _leads(runs, ce, step)
    if not pairs:
        return "-"
    return (f"per step {_mean_error([p for p, _ in pairs])}, at equal wall time {_mean_error([w for _, w in pairs])} "
            f"({len(pairs)} seeds)")


def _mean_error(values) -> str:
    mean = statistics.mean(values)
    if len(values) < 2:
        return f"{mean:+.4f}"
    return f"{mean:+.4f} ± {statistics.stdev(values) / len(values) ** 0.5:.4f}"


def _slower(run, ce, step=None) -> float:
    """`run`'s training seconds to `step` (default: its last checkpoint) over cross-entropy's to the same step. Not
    the ratio of their mean seconds per step: cross-entropy's further steps (for equal wall time) run alone once the
    other arms of a `--lockstep` run are done, which can be faster than in turns (two models' working sets
    alternating)."""
    step = run["curve"][-1][0] if step is None else step
    clock, ce_clock = _clock(run), _clock(ce)
    if step not in ce_clock:
        return run["seconds_per_step"] / ce["seconds_per_step"]
    return clock[step] / ce_clock[step]


def _parity_table(results, original) -> list[str]:
    lines = ["| arm | passes the untrained original | passes the control at the same step |", "|---|---|---|"]
    control = results.get("control", {}).get("0")
    for arm, runs in results.items():
        if arm != "control":
            lines.append(f"| {arm} | {parity(runs['0'], original['held_out'])} | "
                         f"{parity(runs['0'], control) if control else '-'} |")
    return lines


def _teacher_table(results) -> list[str]:
    lines = []
    for arm, runs in results.items():
        entries = runs["0"].get("teacher") or []
        if entries:
            lines += [f"`{arm}`: the teacher's share of the sequences, its lead on the next piece (nats), the share "
                      "of chunks it won, and its lead on the whole text (share of the student's loss; runs from "
                      "before it was measured: -), means over the logged steps:", "",
                      "| step | share | lead | wins | text lead |", "|---|---|---|---|---|"]
            lines += [f"| {e['step']} | {e.get('teacher_share', 0):.3f} | {_f(e.get('teacher_lead'))} | "
                      f"{_f(e.get('teacher_wins'))} | {_f(e.get('teacher_text_lead'))} |" for e in entries]
            lines.append("")
    return lines


def _precision(results) -> list[str]:
    """The precision each distillation run's teacher ran in (`teacher_dtype="auto"` chooses per machine)."""
    runs = [f"{arm} seed {seed}: {run['teacher_dtype']}" for arm, seeds in results.items() if ARMS[arm][1]
            for seed, run in seeds.items() if run.get("teacher_dtype")]
    return [f"The teacher's precision (the student trains in float32): {'; '.join(runs)}.", ""] if runs else []


def write_language(options, language, setting, results, load, commands, *, after=None) -> None:
    stem = RESULTS / f"languages_{language}{options.suffix}"
    original = setting["original"]
    lines = [f"# Embedding-only training on {language}: the adapted model against the fair control",
             "", f"SmolLM2-135M-Instruct, extend mode with `subword` ({len(setting['new']):,} tokens in the new "
             f"tokenizer), 4 x 128 tokens per step, AdamW lr {RATE:g}, no weight decay; `default` is "
             f"`DistillationTrainer`'s default objective {DistillationWeights().to_dict()}; `default` and "
             "`cross-entropy` train the recipe's vocabulary (`target_texts=` the training lines, `source_texts=` "
             f"{len(setting['english_train']):,} English lines: new tokens that change how English is cut only where "
             "they are the language's).", "",
             "## Held-out bits per byte by step (seed 0)", "", *_curve_table(results, original), "",
             "## Cost and English", "", *_cost_table(results, original), "",
             f"## Seeds at {options.seed_steps} steps", "", *_seed_table(results, options.seed_steps), "",
             "## Equal wall time, each seed", "", *_wall_time_table(results, options.seed_steps), "",
             "## Parity", "", *_parity_table(results, original), "", *_teacher_table(results), *_precision(results),
             f"Machine: before {load}; after {after or machine_load()}.",
             "Commands (in order; a later one's runs replace an earlier one's of the same arm and seed):", "",
             *[f"    {command}" for command in commands]]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stem.with_suffix(".json").write_text(json.dumps({"original": original, "results": results, "commands": commands},
                                                    indent=1) + "\n")
    curves = {arm: runs["0"]["curve"] for arm, runs in results.items()}
    plot_curves(curves, stem.with_suffix(".png"), reference=("untrained original", original["held_out"]),
                title=f"Embedding-only training, {language}: held-out bits/byte by step")
    timed = {f"{arm} (x: seconds)": timed_curve(runs["0"]) for arm, runs in results.items()}
    plot_curves(timed, stem.parent / (stem.name + "_time.png"), reference=("untrained original", original["held_out"]),
                xlabel="training seconds", title=f"{language}: held-out bits/byte by wall time")
    print("\n".join(lines), flush=True)


def write_summary(options) -> None:
    """One row per language and arm from every languages_<language><suffix>.json there is."""
    lines = ["# Embedding-only training across languages", "",
             f"Held-out bits per byte after {options.seed_steps} steps (mean of the seeds), the fair control's, and "
             "where the adapted model passes the untrained original and the control (benchmarks/bench_languages.py; "
             "one file per language beside this one).", "",
             f"| language | objective | at {options.seed_steps} steps | control | untrained original | passes the "
             "original | passes the control | English x original | lead over cross-entropy per step, at equal wall "
             "time (mean ± standard error over the seeds) |", "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted(RESULTS.glob(f"languages_*{options.suffix}.json")):
        data = json.loads(path.read_text())
        language, results, original = path.stem.split("_")[1], data["results"], data["original"]
        control, ce = results.get("control"), results.get("cross-entropy", {})
        for arm, runs in results.items():
            if arm == "control":
                continue
            mean, bar = _mean_at(runs, options.seed_steps), _mean_at(control, options.seed_steps) if control else None
            lead = _lead_summary(runs, ce, options.seed_steps) if arm != "cross-entropy" else "-"
            lines.append(f"| {language} | {arm} | {_f(mean)} | {_f(bar)} | {original['held_out']:.4f} | "
                         f"{parity(runs['0'], original['held_out'])} | "
                         f"{parity(runs['0'], control['0']) if control else '-'} | "
                         f"{runs['0']['english'] / original['english']:.4f} | {lead} |")
    (RESULTS / f"languages{options.suffix}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _mean_at(runs, step) -> float | None:
    values = [dict(run["curve"]).get(step) for run in runs.values()]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


if __name__ == "__main__":
    main()
