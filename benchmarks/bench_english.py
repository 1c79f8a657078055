"""Where the adapted model's English goes, before and after training: segmentation against probability on new tokens.

SmolLM2-135M-Instruct, extend mode, `subword`, the 16k tokenizer of each language (bench_languages.py's setting),
English held-out lines (200, not the ones shipped with vocabshift, which extend_vocabulary checks). Per language,
the English bits per byte against the untrained original's, measured in the same run:

- `adapted`: the extended model with the extended tokenizer (what a user gets, and what bench_languages.py scores
  after training);
- `old cuts`: the extended model fed the original tokenizer's ids: English cut exactly as before, so what is lost is
  the probability the model gives new tokens where an old one comes next (every new row is in the softmax);
- `keep_source_segmentation`: extended with `keep_source_segmentation=True` (new tokens that change one of the
  shipped English lines left out), with its own tokenizer.

The difference between `adapted` and `old cuts` is what the new cuts of English words cost. Also: how many of the
held-out English lines the extended tokenizer cuts differently, and how many tokens `keep_source_segmentation`
leaves out. With `--steps N`, `adapted` and `old cuts` again after N steps of `DistillationTrainer`'s default
objective before the recipe on the language (bench_languages.py's `default, full vocabulary, no replay` arm, seed 0):
what training leaves of each part.

    python benchmarks/bench_english.py [--languages ru de vi] [--steps 100]

Writes benchmarks/results/english.md / .json.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's vocabshift_testing (not installed)

import torch
from bench_languages import setting_for, train_arm

from vocabshift.training import bits_per_byte
from vocabshift.training.evaluation import eval_mode

RESULTS = Path(__file__).parent / "results"


def measure(setting, steps: int) -> dict:
    """The English figures of one language (see the module docstring)."""
    source, english, base = setting["source"], setting["english"], setting["base"]
    row = {"original": setting["original"]["english"]}
    for keep in (False, True):
        model = copy.deepcopy(base)
        tokenizer = model.extend_vocabulary(setting["new"], method="subword", source_tokenizer=source,
                                            keep_source_segmentation=keep)
        with eval_mode(model):
            if keep:
                row["keep_source_segmentation"] = bits_per_byte(model, tokenizer, english)
                row["tokens_kept"] = len(tokenizer) - len(source)
                continue
            row["adapted"] = bits_per_byte(model, tokenizer, english)
            row["old cuts"] = bits_per_byte(model, source, english)
        row["tokens"] = len(tokenizer) - len(source)
        row["lines_cut_differently"] = sum(source(line)["input_ids"] != tokenizer(line)["input_ids"]
                                           for line in english)
    if steps:
        trained = train_arm(setting, "default, full vocabulary, no replay", [steps], seed=0, keep_model=True)
        model, tokenizer = trained["model"], trained["tokenizer"]
        with eval_mode(model):
            row["trained"] = {"steps": steps, "adapted": bits_per_byte(model, tokenizer, english),
                              "old cuts": bits_per_byte(model, source, english)}
    return row


def write(rows: dict[str, dict]) -> None:
    lines = ["# English of the extended model before training", "",
             "English held-out bits per byte (200 lines), as a ratio to the untrained original's "
             "(benchmarks/bench_english.py; SmolLM2-135M-Instruct, extend, `subword`, 16k tokenizers).", "",
             "| language | new tokens | English lines cut differently | adapted | old cuts (probability on new "
             "tokens only) | new cuts of English words | keep_source_segmentation (tokens kept) |",
             "|---|---|---|---|---|---|---|"]
    for language, row in rows.items():
        ratio = {name: row[name] / row["original"] for name in ("adapted", "old cuts", "keep_source_segmentation")}
        lines.append(f"| {language} | {row['tokens']:,} | {row['lines_cut_differently']} of 200 | "
                     f"{ratio['adapted']:.4f} | {ratio['old cuts']:.4f} | {ratio['adapted'] / ratio['old cuts']:.4f}"
                     f" | {ratio['keep_source_segmentation']:.4f} ({row['tokens_kept']:,}) |")
    lines += ["", f"The original model's English: {next(iter(rows.values()))['original']:.4f} bits per byte."]
    lines += _trained_table(rows)
    (RESULTS / "english.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (RESULTS / "english.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines), flush=True)


def _trained_table(rows: dict[str, dict]) -> list[str]:
    """The same split after training, for the languages measured with `--steps`."""
    trained = {language: row for language, row in rows.items() if "trained" in row}
    if not trained:
        return []
    lines = ["", "After training (`--steps`: the `default, full vocabulary, no replay` arm of bench_languages.py, the "
             "default before the recipe, seed 0):", "",
             "| language | steps | adapted | old cuts (probability on new tokens only) | new cuts of English words |",
             "|---|---|---|---|---|"]
    for language, row in trained.items():
        adapted, old = (row["trained"][name] / row["original"] for name in ("adapted", "old cuts"))
        lines.append(f"| {language} | {row['trained']['steps']} | {adapted:.4f} | {old:.4f} | {adapted / old:.4f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--languages", nargs="+", default=["ru", "de", "vi"])
    parser.add_argument("--steps", type=int, default=0, help="also measure after this many default steps (0: not)")
    options = parser.parse_args()
    torch.set_num_threads(2)
    path = RESULTS / "english.json"
    rows = json.loads(path.read_text()) if path.exists() else {}  # languages not run again are kept
    rows.update({language: measure(setting_for(language), options.steps) for language in options.languages})
    write(rows)


if __name__ == "__main__":
    main()
