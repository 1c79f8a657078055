"""Bad input to the `vocabshift` command, run in-process through `main`: a usage error (exit code 2) for values that
cannot be right, `error: ...` (exit code 1) for inputs whose files are wrong; never a traceback."""

from __future__ import annotations

import inspect

import pytest
import torch

import vocabshift
from conftest import make_model
from vocabshift.cli import build_parser, main


def _run(argv, capsys):
    try:
        code = main([str(word) for word in argv])
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizers_en):
    """A model folder with its tokenizer, one without a tokenizer, one without config.json, and a text file."""
    root = tmp_path_factory.mktemp("cli-errors")
    tokenizer = tokenizers_en["sentencepiece"]
    vocabshift.save_pretrained_atomic(make_model("llama-untied", tokenizer), tokenizer, root / "model")
    make_model("llama-untied", tokenizer).save_pretrained(root / "no-tokenizer")
    (root / "empty").mkdir()
    (root / "texts.txt").write_text("one line\nanother line\n", encoding="utf-8")
    return root


USAGE = [
    (["train", "m", "t", "o", "--max-steps", "0"], "argument --max-steps: '0' is not an integer >= 1"),
    (["train", "m", "t", "o", "--max-steps", "-5"], "argument --max-steps: '-5' is not an integer >= 1"),
    (["train", "m", "t", "o", "--max-steps", "1.5"], "argument --max-steps: '1.5' is not an integer >= 1"),
    (["train", "m", "t", "o", "--batch-size", "0"], "argument --batch-size: '0' is not an integer >= 1"),
    (["train", "m", "t", "o", "--context-length", "1"], "argument --context-length: '1' is not an integer >= 2"),
    (["train", "m", "t", "o", "--learning-rate", "0"], "argument --learning-rate: '0' is not a finite number > 0"),
    (["train", "m", "t", "o", "--learning-rate=-1e-3"], "argument --learning-rate: '-1e-3' is not a finite"),
    (["train", "m", "t", "o", "--learning-rate", "nan"], "argument --learning-rate: 'nan' is not a finite number"),
    (["train", "m", "t", "o", "--learning-rate", "inf"], "argument --learning-rate: 'inf' is not a finite number"),
    (["train", "m", "t", "o", "--learning-rate", "fast"], "argument --learning-rate: 'fast' is not a finite number"),
    (["train", "m", "t", "o", "--weight-decay", "-0.1"], "argument --weight-decay: '-0.1' is not a finite number >= 0"),
    (["train", "m", "t", "o", "--teacher-share", "0"], "argument --teacher-share: '0' is not a share in (0, 1]"),
    (["train", "m", "t", "o", "--teacher-share", "1.5"], "argument --teacher-share: '1.5' is not a share in (0, 1]"),
    (["train", "m", "t", "o", "--teacher-dtype", "int8"], "argument --teacher-dtype: invalid choice: 'int8'"),
    (["train", "m", "t", "o", "--seed", "-1"], "argument --seed: '-1' is not an integer in [0, 2**32)"),
    (["probe", "m", "n", "t", "--methods", "mean", "--steps", "0"], "argument --steps: '0' is not an integer >= 1"),
    (["probe", "m", "n", "t", "--methods", "mean", "--eval-every", "0"], "argument --eval-every: '0' is not an"),
    (["probe", "m", "n", "t", "--methods", "mean", "--held-out", "0"], "argument --held-out: '0' is not an integer"),
    (["probe", "m", "n", "t", "--methods", "mean", "--batch-size", "-2"], "argument --batch-size: '-2' is not an"),
    (["probe", "m", "n", "t", "--methods", "mean", "--context-length", "0"], "argument --context-length: '0' is not"),
    (["probe", "m", "n", "t", "--methods", "mean", "--learning-rate", "0"], "argument --learning-rate: '0' is not"),
    (["probe", "m", "n", "t", "--methods", "mean", "--seed", "-3"], "argument --seed: '-3' is not an integer in [0, "),
    (["extend", "m", "n", "o", "--pad-to-multiple-of", "0"], "argument --pad-to-multiple-of: '0' is not an integer"),
    (["extend", "m", "n", "o", "--pad-to-multiple-of", "-64"], "argument --pad-to-multiple-of: '-64' is not an"),
    (["extend", "m", "n", "o", "--seed", "-1"], "argument --seed: '-1' is not an integer in [0, 2**32)"),
    (["extend", "m", "n", "o", "--max-shard-size", "lots"], "--max-shard-size: max_shard_size='lots' is not a shard"),
    (["extend", "m", "n", "o", "--max-shard-size", "0MB"], "--max-shard-size: max_shard_size='0MB' is not a shard"),
    (["evaluate", "m", "t", "--max-lines", "0"], "argument --max-lines: '0' is not an integer >= 1"),
    (["extend", "m", "n", "o", "--option", "helper_model="], "argument --option: 'helper_model=' has an empty value"),
    (["extend", "m", "n", "o", "--option", "word_vectors= "], "argument --option: 'word_vectors= ' has an empty"),
    (["push", "f", "a/b/c"], "argument repo_id: repo_id='a/b/c' is not a Hub repo id"),
    (["push", "f", "my model"], "argument repo_id: repo_id='my model' is not a Hub repo id"),
    (["push", "f", "me/x", "--revision", "a b"], "argument --revision: revision='a b' is not a branch name"),
    (["card", "f", "--repo-id", "me/x--y"], "argument --repo-id: repo_id='me/x--y' is not a Hub repo id"),
    (["card", "f", "--base-model", "a/b/c"], "argument --base-model: repo_id='a/b/c' is not a Hub repo id"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE, ids=[" ".join(argv[:1] + argv[4:]) for argv, _ in USAGE])
def test_values_that_cannot_be_right_are_usage_errors(argv, message, capsys):
    code, err = _run(argv, capsys)
    assert code == 2 and message in err, err


@pytest.mark.parametrize("command", [["train", "{model}", "{texts}", "{out}"], ["evaluate", "{model}", "{texts}"],
                                     ["probe", "{model}", "{model}", "{texts}", "--methods", "mean", "--held-out", "1"],
                                     ["extend", "{model}", "{model}", "{out}"]])
def test_a_folder_without_config_or_tokenizer(folders, tmp_path, capsys, command):
    def argv(model):
        return [word.format(model=model, texts=folders / "texts.txt", out=tmp_path / "out") for word in command]

    code, err = _run(argv(folders / "empty"), capsys)
    assert code == 1 and err.startswith(f"error: model='{folders / 'empty'}' has no config.json: pass a folder "
                                        "written by save_pretrained"), err
    code, err = _run(argv(tmp_path / "nowhere"), capsys)
    assert code == 1 and "is neither a folder nor a Hub repo id" in err, err
    if command[0] != "extend":  # extend loads the model, and its tokenizer as source_tokenizer
        code, err = _run(argv(folders / "no-tokenizer"), capsys)
        assert code == 1 and err.startswith(f"error: model='{folders / 'no-tokenizer'}' holds no tokenizer "
                                            "(tokenizer.json or tokenizer_config.json)"), err
    assert not (tmp_path / "out").exists()


def test_the_original_model_of_evaluate_is_checked_too(folders, capsys):
    code, err = _run(["evaluate", folders / "model", folders / "texts.txt", "--original-model",
                      folders / "no-tokenizer"], capsys)
    assert code == 1 and "error: --original-model='" in err and "holds no tokenizer" in err, err


def test_probe_with_more_held_out_lines_than_the_file_has(folders, capsys):
    code, err = _run(["probe", folders / "model", folders / "model", folders / "texts.txt", "--methods", "mean",
                      "--held-out", "2"], capsys)
    assert code == 1 and "error: --held-out 2 leaves no line to train on: texts='" in err, err
    assert "texts.txt' has 2 non-blank lines" in err and "pass --held-out 1, or more text." in err, err


def test_push_of_a_truncated_shard(folders, tmp_path, capsys, loopback_hub):
    import shutil

    folder = shutil.copytree(folders / "model", tmp_path / "model")
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:-3])
    code, err = _run(["push", folder, "loopback-user/x"], capsys)
    assert code == 1 and f"error: '{folder / 'model.safetensors'}' is not a valid safetensors file" in err, err
    assert loopback_hub.requests == []


def test_push_with_a_token_the_hub_refuses(folders, tmp_path, capsys, loopback_hub, monkeypatch):
    import shutil

    folder = shutil.copytree(folders / "model", tmp_path / "model")
    (folder / "README.md").write_text("# a card of its own\n")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_secret_token")
    code, err = _run(["push", folder, "loopback-user/x"], capsys)
    assert code == 1 and "refused the token (401 for " in err and "set HF_TOKEN or run `hf auth login`" in err, err
    assert "hf_wrong_secret_token" not in err


def _contents(folder):
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("command", [["extend", "{model}", "{tokenizer}", "{out}"], ["train", "{model}", "{texts}",
                                                                                      "{out}"]])
@pytest.mark.parametrize("output", ["model", "parent"])
def test_the_input_folder_as_output_is_refused(folders, tokenizers_ru, tmp_path, capsys, command, output):
    """`vocabshift extend MODEL NEW MODEL` replaced the original model folder and exited 0."""
    tokenizers_ru["sentencepiece"].save_pretrained(tmp_path / "ru")
    model = folders / "model"
    out = model if output == "model" else folders
    before = _contents(model)
    argv = [w.format(model=model, tokenizer=tmp_path / "ru", texts=folders / "texts.txt", out=out) for w in command]
    code, err = _run(argv, capsys)
    holds = "the folder of" if output == "model" else "a folder holding"
    assert code == 1 and f"error: output_dir='{out}' is {holds} the input model='{model}'" in err, err
    assert _contents(model) == before


@pytest.mark.parametrize("command", [["extend", "{model}", "{model}", "{out}", "--source-texts", "-",
                                      "--target-texts", "-"],
                                     ["train", "{model}", "-", "{out}", "--source-texts", "-"]])
def test_standard_input_for_two_arguments(folders, tmp_path, capsys, command):
    """Standard input is read once: the second '-' read nothing, and its error said it "holds no text"."""
    argv = [word.format(model=folders / "model", out=tmp_path / "out") for word in command]
    code, err = _run(argv, capsys)
    both = "--source-texts and --target-texts" if command[0] == "extend" else "texts and --source-texts"
    assert code == 1 and err.startswith(f"error: {both} are both '-' (standard input), which can be read once: "), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "message"), [(["--method", "nope"], "error: Unknown method 'nope'"),
                                                  (["--option", "foo=1"], "error: Unknown option 'foo' for method"),
                                                  (["--option", "input_norm=no"], "error: Option input_norm='no'"),
                                                  (["--method", "focus"], "error: Method 'focus' needs exactly one"),
                                                  (["--mode", "replace", "--keep-source-segmentation"],
                                                   "error: --keep-source-segmentation works with --mode extend only")])
def test_extend_checks_the_method_and_its_options_before_loading_the_model(folders, tmp_path, capsys, monkeypatch,
                                                                           options, message):
    """A mistyped --method or --option was named only after the model was loaded (minutes for a large one)."""
    def load_model(path, **_):
        raise AssertionError(f"{path} was loaded")

    monkeypatch.setattr("vocabshift.cli.load_model", load_model)
    code, err = _run(["extend", folders / "model", folders / "model", tmp_path / "out", *options], capsys)
    assert code == 1 and err.startswith(message), err


@pytest.mark.parametrize(("method", "message"), [
    ("nope", "error: Unknown method 'nope'. Available: "),
    ("focus", "error: --methods focus cannot run in vocabshift probe, which passes no method options: Method "
              "'focus' needs exactly one of word_vectors=..."),
    ("salt", "error: --methods salt cannot run in vocabshift probe, which passes no method options: Method 'salt' "
             "needs helper_model=...")])
def test_probe_checks_its_methods_before_loading_the_model(folders, tmp_path, capsys, monkeypatch, method, message):
    """A method probe cannot run was named after the model was loaded, with a fix (pass word_vectors=...) that the
    command has no flag for."""
    def load_model(path, **_):
        raise AssertionError(f"{path} was loaded")

    monkeypatch.setattr("vocabshift.cli_evaluate.load_model", load_model)
    code, err = _run(["probe", folders / "model", folders / "model", folders / "texts.txt", "--methods", "mean",
                      method, "--held-out", "1", "--output-dir", tmp_path / "probe"], capsys)
    assert code == 1 and err.startswith(message), err


def test_train_next_token_refuses_distillation_flags_before_loading_the_model(folders, tmp_path, capsys, monkeypatch):
    """--objective next_token with --teacher-share was refused only once the model was loaded."""
    def load_model(path, **_):
        raise AssertionError(f"{path} was loaded")

    monkeypatch.setattr("vocabshift.cli_train.load_model", load_model)
    code, err = _run(["train", folders / "model", folders / "texts.txt", tmp_path / "out", "--objective",
                      "next_token", "--teacher-share", "0.5"], capsys)
    assert code == 1 and err.startswith("error: --teacher-share applies to distillation only, and this run trains "
                                        "with cross-entropy (--objective next_token)"), err


@pytest.mark.parametrize("command", [["extend", "{model}", "{model}", "{out}"],
                                     ["train", "{model}", "{model}", "{out}"],
                                     ["tokenizer", "{model}", "{texts}", "{out}"]])
def test_an_output_folder_that_is_a_file_is_named(folders, tmp_path, capsys, command):
    """The message said "'.../notes.txt' is a file", without naming the argument."""
    out = tmp_path / "notes.txt"
    out.write_text("notes\n")
    argv = [word.format(model=folders / "model", texts=folders / "texts.txt", out=out) for word in command]
    code, err = _run(argv, capsys)
    assert code == 1 and err.startswith(f"error: output_dir='{out}' is a file: pass a folder path"), err
    assert out.read_text() == "notes\n"


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
                                                          "a total capacity of 79.19 GiB\nOf the allocated memory"),
                                   RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                                                "can't allocate memory: you tried to allocate 4503599627370496 bytes")])
def test_train_out_of_memory(folders, tmp_path, capsys, monkeypatch, error):
    """A batch too large for the device ended in torch's traceback (CUDA) or a raw RuntimeError's (CPU)."""
    def trainer_for(*_):
        raise error

    monkeypatch.setattr("vocabshift.cli_train.trainer_for", trainer_for)
    code, err = _run(["train", folders / "model", folders / "texts.txt", tmp_path / "out", "--rows", "all",
                      "--objective", "next_token", "--batch-size", "512"], capsys)
    first = str(error).splitlines()[0]
    assert code == 1 and err.endswith(f"\nerror: out of memory ({first}): lower --batch-size or --context-length.\n")
    assert not (tmp_path / "out").exists()


def test_an_output_path_that_is_not_utf8(folders, tmp_path, capsys):
    """A name of bytes that are not UTF-8 (Python's '\\udcff' for b'\\xff'): the Rust writers (safetensors,
    tokenizers) and the temporary sibling's name failed on it with a raw UnicodeEncodeError."""
    out = tmp_path / "out\udcff"
    code, err = _run(["extend", folders / "model", folders / "model", out], capsys)
    assert code == 1 and err.startswith(f"error: output_dir={str(out)!r} is not UTF-8 ('\\udcff' at character "), err
    assert not out.exists()


def test_an_empty_model_path(folders, tmp_path, capsys, monkeypatch):
    """`vocabshift extend "$MODEL" ...` with MODEL unset, run in a model folder: '' is the current folder to Path,
    and the message blamed a Hub repo id ("Repo id must use alphanumeric chars")."""
    monkeypatch.chdir(folders / "model")
    code, err = _run(["extend", "", folders / "model", tmp_path / "out"], capsys)
    assert code == 1 and err == "error: model is an empty path: pass a path.\n", err


def test_evaluate_a_model_of_fewer_positions_than_the_default_window(folders, tmp_path, capsys):
    """A model of 256 positions: evaluate refused the API's 512-token window with "pass at most 256", and the
    command had no flag to pass it with."""
    import json
    import shutil

    folder = shutil.copytree(folders / "model", tmp_path / "short")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 256}))
    code, err = _run(["evaluate", folder, folders / "texts.txt"], capsys)
    assert code == 1 and "context_length=512 is longer than the 256 positions" in err, err
    code, err = _run(["evaluate", folder, folders / "texts.txt", "--context-length", "256"], capsys)
    assert code == 0, err
    default = inspect.signature(vocabshift.evaluate).parameters["context_length"].default
    assert build_parser().parse_args(["evaluate", "m", "t"]).context_length == default
