"""The `vocabshift` subcommands after training: propagate, card, push, gguf and inspect (registered with `cli`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import transformers

from .atomic import atomic_write_text
from .cli_common import arg, card_output, subcommand
from .cli_types import branch, given_path, repo_id
from .export import OUTTYPES, export_gguf
from .hub import model_card, push_to_hub
from .inspection import inspect_folder, record_summary
from .propagation import METHODS, propagate
from .record import get_record

__all__: list[str] = []


@subcommand(
    "propagate",
    "Carry the adapted embeddings of a base model into its instruct sibling (LEP); write the instruct model with the "
    "adapted vocabulary. Inputs are folders or Hub ids (token from HF_TOKEN or `hf auth login`).",
    arg("adapted", help="the base model after extend and embedding-only CPT: folder or Hub id"),
    arg("base", help="the base model it was extended from: folder or Hub id"),
    arg("instruct", help="the instruct sibling fine-tuned from base: folder or Hub id"),
    arg("output_dir", help="output folder, new or empty (written atomically)"),
    arg("--method", default="conversion", choices=METHODS,
        help="swap: W = I; overlap: W fitted on shared tokens; conversion (default): shared tokens plus the new "
             "tokens' decompositions"),
    arg("--adapted-revision", help="branch, tag or commit of the adapted Hub repo"),
    arg("--base-revision", help="branch, tag or commit of the base Hub repo"),
    arg("--instruct-revision", help="branch, tag or commit of the instruct Hub repo"),
    arg("--hardlink", action="store_true",
        help="hard-link the instruct shards without embeddings instead of copying them (never write into them "
             "in place afterwards)"),
)
def cmd_propagate(args: argparse.Namespace) -> int:
    folder = propagate(args.adapted, args.base, args.instruct, output_dir=args.output_dir, method=args.method,
                       adapted_revision=args.adapted_revision, base_revision=args.base_revision,
                       instruct_revision=args.instruct_revision, hardlink=args.hardlink)
    entry = get_record(transformers.AutoConfig.from_pretrained(folder)).propagation[-1]
    fits = ", ".join(f"{side} residual {fit['residual']:.4f} (identity {fit['identity_residual']:.4f})"
                     for side, fit in entry["fit"].items())
    print(f"{folder}: {entry['method']}; rows {entry['rows']}; {fits}")
    return 0


@subcommand(
    "card",
    "Generate the model card (README.md) of a folder from its ExtensionRecord.",
    arg("folder", help="model folder saved after extend_vocabulary"),
    arg("--repo-id", type=repo_id, help="the Hub repo the card is for (used in the usage code)"),
    arg("--base-model", action="append", type=repo_id,
        help="Hub id of the base model (default: from the record); repeatable"),
    arg("--language", action="append", help="ISO code of the new language, repeatable (base languages are added)"),
    arg("--license", help="Hub license id (default: the base model's)"),
    arg("--datasets", action="append", type=repo_id, help="Hub id of a dataset used for training, repeatable"),
    arg("--output", type=given_path, help="where to write the card (default: FOLDER/README.md; '-' prints it)"),
    arg("--force", action="store_true", help="overwrite a README.md that vocabshift did not generate"),
)
def cmd_card(args: argparse.Namespace) -> int:
    base = args.base_model[0] if args.base_model and len(args.base_model) == 1 else args.base_model
    generated = str(model_card(args.folder, repo_id=args.repo_id, base_model=base, language=args.language,
                               license=args.license, datasets=args.datasets))
    if args.output == "-":
        sys.stdout.write(generated)
        return 0
    output = card_output(args.output or Path(args.folder) / "README.md", args.folder, force=args.force)
    atomic_write_text(output, generated)
    print(output)
    return 0


@subcommand(
    "push",
    "Upload a model folder to the Hub in one commit (safetensors only; stale shards deleted; card generated if "
    "missing). The token comes from HF_TOKEN or `hf auth login`, never from the command line.",
    arg("folder", help="model folder written by save_pretrained"),
    arg("repo_id", type=repo_id, help="namespace/name of the model repo (created if missing)"),
    arg("--private", action="store_true", help="create the repo as private"),
    arg("--revision", type=branch, help="branch to commit to (created from main if missing)"),
    arg("--commit-message", help="commit message"),
)
def cmd_push(args: argparse.Namespace) -> int:
    print(push_to_hub(args.folder, args.repo_id, private=args.private, revision=args.revision,
                      commit_message=args.commit_message))
    return 0


@subcommand(
    "gguf",
    "Convert a model folder to one GGUF file (llama.cpp, Ollama, LM Studio) with llama.cpp's own converter; an "
    "adapted tokenizer's pre-tokenizer is named from its original tokenizer.",
    arg("model_dir", help="model folder written by save_pretrained"),
    arg("output_path", help="the .gguf file to write (through a temporary file; replaced if it exists)"),
    arg("--outtype", default="f16", choices=OUTTYPES, help="tensor type (default: f16)"),
    arg("--vocab-only", action="store_true", help="write the vocabulary and metadata only, no tensors"),
    arg("--source-tokenizer", type=given_path,
        help="the tokenizer of the model MODEL_DIR was made from (needed in replace mode)"),
    arg("--llama-cpp", type=given_path,
        help="a llama.cpp checkout whose convert_hf_to_gguf.py to run (default: the converter of "
             "llama-cpp-python's source distribution on PyPI, downloaded once and cached)"),
)
def cmd_gguf(args: argparse.Namespace) -> int:
    path = export_gguf(args.model_dir, args.output_path, outtype=args.outtype, vocab_only=args.vocab_only,
                       source_tokenizer=args.source_tokenizer, llama_cpp=args.llama_cpp)
    print(f"{path}: {path.stat().st_size / 2**20:,.1f} MiB ({'vocabulary only' if args.vocab_only else args.outtype})")
    return 0


@subcommand(
    "inspect",
    "Print the ExtensionRecord of a folder and check it: rows vs vocabulary, output head, special token ids, "
    "tokenizer round trip, serving (every id a token, tensor-parallel splits, tokenizer.model in step). Exits with 1 "
    "when a problem is found.",
    arg("folder", help="model folder written by save_pretrained"),
    arg("--json", action="store_true", help="print the record as JSON only (null for a folder without one); notes "
        "and problems go to stderr"),
    arg("--gguf", action="store_true", help="also check that the folder converts to GGUF (llama.cpp's converter, "
        "vocabulary only; downloaded once, as for `vocabshift gguf`)"),
)
def cmd_inspect(args: argparse.Namespace) -> int:
    report = inspect_folder(args.folder, gguf=args.gguf)
    if report.record is not None or args.json:  # null: no record (or a damaged one, among the problems)
        print(json.dumps(report.record and record_summary(report.record), indent=2, ensure_ascii=False))
    if not args.json:
        print(report)
        return 0 if report.ok else 1
    for line in [f"note: {note}" for note in report.notes] + [f"PROBLEM: {p}" for p in report.problems]:
        print(line, file=sys.stderr)  # stdout stays one JSON value
    return 0 if report.ok else 1
