"""The `vocabshift` command: one subcommand per step, argument parsing only (the work is in the Python API).

Add a subcommand with one decorated function; its arguments are declared in the decorator and named like the
Python API's parameters (`--pad-to-multiple-of` for `pad_to_multiple_of`):

    @subcommand("evaluate", "Measure ...", arg("folder", help="..."), arg("--texts", help="..."))
    def cmd_evaluate(args: argparse.Namespace) -> int:
        print(vocabshift.evaluate(args.folder, texts=args.texts))
        return 0
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import torch
from huggingface_hub import constants
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HTTPError, RepositoryNotFoundError

from . import cli_evaluate, cli_publish, cli_train  # noqa: F401  (register their subcommands)
from ._version import __version__
from .assemble import ROW_MULTIPLE
from .atomic import atomic_folder
from .cli_common import SUBCOMMANDS, arg, check_output, check_stdin_once, load_model, subcommand
from .cli_types import POSITIVE_INT, SEED, given_path, shard_size
from .corpus import read_texts
from .errors import InvalidArgumentError, VocabShiftError
from .extend import extend_vocabulary
from .inputs import check_helper_vocabulary
from .propagation import read_input_embeddings
from .record import get_record, note_command
from .registry import build_config, get_method, list_methods
from .save import save_pretrained_atomic
from .vocab import train_tokenizer
from .vocab.load import load_tokenizer

__all__ = ["build_parser", "main"]

_MEMORY_FIXES = {"train": "lower --batch-size or --context-length", "probe": "lower --batch-size or --context-length",
                 "evaluate": "lower --batch-size or --context-length"}
_CLOSED_PIPE = 141  # 128 + SIGPIPE, the shell's code for a writer whose reader went away
_ORDER = ("tokenizer", "extend", "train", "probe", "evaluate", "propagate", "card", "push", "gguf", "inspect",
          "methods")


def _key_value(text: str) -> tuple[str, Any]:
    """`key=value`; the value is read as JSON when it is a JSON number, boolean or null, else kept as a string (a
    non-blank one: no option takes an empty string)."""
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value (e.g. --option input_weighting=char_length)")
    if not value.strip():  # an unset shell variable: a path option would read "" as the current folder
        raise argparse.ArgumentTypeError(f"{text!r} has an empty value: pass key=value (e.g. --option "
                                         "word_vectors=ru.bin), or leave the option out for its default")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return key, value
    return key, parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value


@subcommand(
    "tokenizer",
    "Train a target-language tokenizer in the family of a model's tokenizer (its pipeline, word boundaries, byte "
    "fallback), ready for `vocabshift extend`; save it to a folder.",
    arg("model", help="the model (or tokenizer) folder or Hub id whose tokenizer the new one is like"),
    arg("texts", help="target-language training text: UTF-8 .txt (or .xz, .gz, .bz2; '-' reads standard input), "
                      "one document per line"),
    arg("output_dir", help="output folder for the tokenizer (written atomically)"),
    arg("--vocab-size", type=POSITIVE_INT, default=16000, help="size of the new vocabulary (default: 16000)"),
    arg("--min-frequency", type=POSITIVE_INT, default=2, help="minimum count of a merge or piece (default: 2)"),
)
def cmd_tokenizer(args: argparse.Namespace) -> int:
    check_output(args.output_dir, holds="tokenizer", model=args.model, texts=args.texts)
    texts = read_texts(args.texts)
    tokenizer = train_tokenizer(texts, like=load_tokenizer(args.model, argument="model"), vocab_size=args.vocab_size,
                                min_frequency=args.min_frequency)
    with atomic_folder(args.output_dir, holds="tokenizer") as folder:
        tokenizer.save_pretrained(folder)
    print(f"{args.output_dir}: {len(tokenizer):,} tokens trained on {len(texts):,} lines")
    return 0


@subcommand(
    "extend",
    "Give a model a target-language vocabulary and initialize the new rows; save model and tokenizer to a folder.",
    arg("model", help="model folder or Hub id (loaded with its saved architecture)"),
    arg("new_tokenizer", help="target-language tokenizer: folder, tokenizer.json or Hub id"),
    arg("output_dir", help="output folder (written atomically; an existing model folder there is replaced)"),
    arg("--method", default="subword", help="initialization method (default: subword); see `vocabshift methods`"),
    arg("--mode", default="extend", choices=("extend", "replace"),
        help="extend: keep every old id and append new tokens; replace: the new tokenizer becomes the vocabulary"),
    arg("--source-tokenizer", type=given_path,
        help="the model's current tokenizer (default: the one in the model folder)"),
    arg("--pad-to-multiple-of", type=POSITIVE_INT, default=ROW_MULTIPLE,
        help=f"round the number of embedding rows up to a multiple of this (default: {ROW_MULTIPLE}, even "
             "tensor-parallel splits; 1: no rounding); rows without a token get placeholder tokens"),
    arg("--seed", type=SEED, default=0, help="seed of every random draw (default: 0)"),
    arg("--option", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
        help="a method option, repeatable (e.g. --option input_weighting=char_length)"),
    arg("--max-shard-size", type=shard_size, help="largest safetensors shard to write (e.g. 2GB)"),
    arg("--source-texts", type=given_path,
        help="source-language lines (.txt, .xz, .gz, .bz2) whose segmentation is checked (default: "
             "1,500 English lines shipped with vocabshift)"),
    arg("--keep-source-segmentation", action=argparse.BooleanOptionalAction, default=None,
        help="leave out new tokens that change how the source-language lines are cut (same-script targets); with "
             "--target-texts only those not clearly the target language's (default: on with --target-texts)"),
    arg("--target-texts", type=given_path,
        help="target-language lines (.txt, .xz, .gz, .bz2) for --keep-source-segmentation and the "
             "tokens-per-word figures of the record"),
)
def cmd_extend(args: argparse.Namespace) -> int:
    files = {f"--option {key}": value for key, value in args.option if isinstance(value, str)}  # e.g. word_vectors
    _check_flags(args)
    check_output(args.output_dir, model=args.model, new_tokenizer=args.new_tokenizer,
                 source_tokenizer=args.source_tokenizer, source_texts=args.source_texts, target_texts=args.target_texts,
                 **files)
    source_texts = read_texts(args.source_texts, name="--source-texts") if args.source_texts else None
    target_texts = read_texts(args.target_texts, name="--target-texts") if args.target_texts else None
    options = _method_options(args)
    model = load_model(args.model)
    tokenizer = model.extend_vocabulary(args.new_tokenizer, method=args.method, mode=args.mode,
                                        source_tokenizer=args.source_tokenizer,
                                        pad_to_multiple_of=args.pad_to_multiple_of, seed=args.seed,
                                        source_texts=source_texts, target_texts=target_texts,
                                        keep_source_segmentation=args.keep_source_segmentation, **options)
    note_command(model, ["vocabshift", *args.argv])  # the record keeps the command as it was run
    save_pretrained_atomic(model, tokenizer, args.output_dir, max_shard_size=args.max_shard_size)
    record = get_record(model)
    print(f"{args.output_dir}: {len(record.new_ids):,} new tokens initialized with {record.method} ({record.mode}); "
          f"vocabulary {record.old_vocab_size:,} -> {record.new_vocab_size:,}, rows {record.old_num_rows:,} -> "
          f"{record.new_num_rows:,}")
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    """The flags of extend that contradict each other, refused before anything is read."""
    check_stdin_once(**{"--source-texts": args.source_texts, "--target-texts": args.target_texts})
    if args.keep_source_segmentation and args.mode != "extend":
        raise InvalidArgumentError("--keep-source-segmentation works with --mode extend only: replace mode gives the "
                                   "model a new vocabulary, which cuts every text anew. Leave the flag out.")


def _method_options(args: argparse.Namespace) -> dict[str, Any]:
    """The --option values; `helper_model=PATH` (SALT's helper, which the API takes as a model or its matrix) becomes
    the input embedding matrix read from the helper's shards, checked against the tokenizer saved beside it. They
    are checked against `--method` before the model is loaded (a mistyped one would cost the load)."""
    spec = get_method(args.method)
    options = dict(args.option)
    own = [name for name in inspect.signature(extend_vocabulary).parameters if name != "method_options"]
    for key in options:
        if key in own:
            flag = key.upper() if key in ("model", "new_tokenizer") else f"--{key.replace('_', '-')}"
            raise InvalidArgumentError(f"--option {key} is no method option but an argument of extend: pass {flag} "
                                       "instead.")
        values = [value for name, value in args.option if name == key]
        if len(values) > 1:
            raise InvalidArgumentError(f"--option {key} is given {len(values)} times ({', '.join(map(repr, values))}):"
                                       " pass each option once.")
    if isinstance(options.get("helper_model"), str):
        matrix, folder = read_input_embeddings(options["helper_model"], role="--option helper_model")
        check_helper_vocabulary(folder, load_tokenizer(args.new_tokenizer, argument="new_tokenizer"))
        options["helper_model"] = matrix
    build_config(spec, options)
    return options


@subcommand("methods", "List the registered initialization methods.")
def cmd_methods(args: argparse.Namespace) -> int:
    for name in list_methods():
        spec = get_method(name)
        print(f"{name:14} {spec.pretty_name}" + (f" — {spec.paper_url}" if spec.paper_url else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vocabshift", description="Move a Hugging Face LLM to a new language "
                                     "through its vocabulary: extend, initialize, train, propagate, publish.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the library does (INFO level)")
    parser.add_argument("--version", action="version", version=f"vocabshift {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    steps = sorted(SUBCOMMANDS, key=lambda entry: _ORDER.index(entry[0]) if entry[0] in _ORDER else len(_ORDER))
    for name, help_text, arguments, function in steps:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        for names, options in arguments:
            sub.add_argument(*names, **options)
        sub.set_defaults(run=function)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vocabshift` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None  # a scheduler's stop: as Ctrl-C
    try:
        return _run(args)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    """Run the command; expected errors, an unreachable Hub and interruptions become a message and an exit code."""
    try:
        _check_one_process(args.command)
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit ("Exception ignored ...")
        return code
    except BrokenPipeError:  # stdout's reader is gone (`| head`): end quietly, as a process that SIGPIPE ends
        with contextlib.suppress(OSError, ValueError):  # the exit's flush goes nowhere rather than fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _CLOSED_PIPE
    except (VocabShiftError, HfHubHTTPError, OSError, ImportError) as error:  # expected: the message says what to do
        print(f"error: {_refused_token(error) or error}", file=sys.stderr)
        return 1
    except HTTPError as error:  # no answer from the Hub (HfHubHTTPError above is an answer: a refusal)
        print(f"error: the Hub at {constants.ENDPOINT} could not be reached ({type(error).__name__}: {error}): check "
              "the network, HF_ENDPOINT and the proxy settings.", file=sys.stderr)
        return 1
    except (RuntimeError, MemoryError) as error:  # a batch or a model larger than the memory left
        if (message := _out_of_memory(args.command, error)) is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: outputs are written to temporary siblings, removed here
        print("interrupted: nothing half-written is left (outputs are written to temporary siblings and renamed into "
              "place when complete)", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(stop, _Terminated) else 130


def _check_one_process(command: str) -> None:
    """Only `train` runs across the processes of a launcher (torchrun, accelerate launch): every other command would
    run once per process, each writing the same output (or pushing the same commit)."""
    world = os.environ.get("WORLD_SIZE", "1")
    if command != "train" and world.isdigit() and int(world) > 1:
        raise InvalidArgumentError(f"vocabshift {command} runs in one process, and this one was started by a launcher "
                                   f"with WORLD_SIZE={world}: run it without torchrun or accelerate launch (only "
                                   "vocabshift train trains across processes).")


def _out_of_memory(command: str, error: BaseException) -> str | None:
    """What to say of an allocation that failed (torch's OutOfMemoryError on an accelerator, a RuntimeError of its
    CPU allocator, Python's MemoryError), None for any other error."""
    if not isinstance(error, (torch.OutOfMemoryError, MemoryError)) and "can't allocate memory" not in str(error):
        return None
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    fix = _MEMORY_FIXES.get(command, "free memory (close other processes), or run on a machine with more")
    return f"out of memory ({first}): {fix}."


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's time limit, `docker stop`, `kill`), raised as Ctrl-C is: the same cleanup runs."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def _refused_token(error: Exception) -> str | None:
    """The Hub's 401 / 403 told as what it means: the token is missing, invalid or without access (an unknown or
    gated repo, which the Hub also answers with 401 / 403, has its own message)."""
    if not isinstance(error, HfHubHTTPError) or isinstance(error, (RepositoryNotFoundError, GatedRepoError)):
        return None
    if error.response is None or error.response.status_code not in (401, 403):
        return None
    response = error.response
    return (f"the Hub at {constants.ENDPOINT} refused the token ({response.status_code} for {response.url}: "
            f"{error.server_message or 'no reason given'}): set HF_TOKEN or run `hf auth login` with a token that "
            "has access to the repo (write access to push).")


if __name__ == "__main__":
    sys.exit(main())
