"""The `vocabshift` command, run as a subprocess on tiny inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM

import vocabshift
from conftest import ROOT, make_model
from vocabshift.cli import _key_value, build_parser


def run(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m vocabshift ARGS` (the console script runs the same `main`)."""
    result = subprocess.run([sys.executable, "-m", "vocabshift", *args], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory, tokenizers_en):
    """A tiny untied Llama and its (English) tokenizer, saved as a model folder."""
    folder = tmp_path_factory.mktemp("cli") / "base"
    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    vocabshift.save_pretrained_atomic(model, tokenizers_en["sentencepiece"], folder)
    return folder


@pytest.mark.slow
def test_extend_inspect_card_push(base_folder, tokenizers_ru, tmp_path, loopback_hub):
    tokenizers_ru["sentencepiece"].save_pretrained(tmp_path / "ru-tokenizer")
    out = tmp_path / "tiny-ru"
    result = run("extend", str(base_folder), str(tmp_path / "ru-tokenizer"), str(out), "--method", "subword",
                 "--pad-to-multiple-of", "64", "--seed", "3", "--option", "input_weighting=char_length",
                 "--option", "input_norm=false")
    record = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(out))
    assert f"{len(record.new_ids):,} new tokens initialized with subword" in result.stdout
    assert (record.seed, record.new_num_rows % 64, record.method_config["input_weighting"],
            record.method_config["input_norm"]) == (3, 0, "char_length", False)
    assert record.pad_to_multiple_of == 64  # the record keeps the options and the command as they were run
    assert record.command == ["vocabshift", "extend", str(base_folder), str(tmp_path / "ru-tokenizer"), str(out),
                              "--method", "subword", "--pad-to-multiple-of", "64", "--seed", "3", "--option",
                              "input_weighting=char_length", "--option", "input_norm=false"]

    result = run("inspect", str(out))
    assert json.loads(result.stdout[: result.stdout.rindex("}") + 1])["method"] == "subword"
    assert f"{out}: consistent" in result.stdout and "round trip: " in result.stdout

    result = run("card", str(out), "--language", "ru", "--license", "apache-2.0", "--repo-id", "loopback-user/tiny-ru")
    assert result.stdout.strip() == str(out / "README.md")
    card = ModelCard.load(out / "README.md")
    assert (card.data.language, card.data.license) == (["ru"], "apache-2.0")
    assert "--option input_norm=false" in card.text and "--option input_weighting=char_length" in card.text

    result = run("push", str(out), "loopback-user/tiny-ru", "--private", "--commit-message", "from the CLI",
                 env=loopback_hub.environ())
    commit = loopback_hub.commits("loopback-user/tiny-ru")[0]
    assert result.stdout.strip().endswith(f"/commit/{commit.oid}") and commit.title == "from the CLI"
    assert loopback_hub.files("loopback-user/tiny-ru")["README.md"] == (out / "README.md").read_bytes()
    assert loopback_hub.token not in result.stdout + result.stderr


def test_extend_with_target_texts(base_folder, tokenizers_ru, ru_lines, tmp_path):
    """--target-texts: the record's tokens-per-word figures, and the lines keep_source_segmentation (on with them)
    weighs with."""
    tokenizers_ru["sentencepiece"].save_pretrained(tmp_path / "ru-tokenizer")
    (tmp_path / "ru.txt").write_text("\n".join(ru_lines[:200]) + "\n", encoding="utf-8")
    out = tmp_path / "tiny-ru"
    run("extend", str(base_folder), str(tmp_path / "ru-tokenizer"), str(out), "--target-texts",
        str(tmp_path / "ru.txt"))
    record = vocabshift.get_record(AutoModelForCausalLM.from_pretrained(out))
    report = record.tokenizer_report
    assert record.keep_source_segmentation and report["target_tokens_per_word_after"] < report[
        "target_tokens_per_word_before"]
    assert record.command[-2:] == ["--target-texts", str(tmp_path / "ru.txt")]
    missing = run("extend", str(base_folder), str(tmp_path / "ru-tokenizer"), str(tmp_path / "x"), "--target-texts",
                  str(tmp_path / "none.txt"), check=False)
    assert missing.returncode == 1 and "--target-texts=" in missing.stderr and not (tmp_path / "x").exists()


def test_extend_with_salt_and_a_helper_folder(base_folder, tokenizers_ru, tokenizers_en, token_vectors_ru, tmp_path):
    """SALT from the command line: --option helper_model=FOLDER gives the rows the loaded helper gives; a helper
    saved with another tokenizer is refused before anything is written."""
    new, vectors = tokenizers_ru["sentencepiece"], token_vectors_ru["sentencepiece"]
    new.save_pretrained(tmp_path / "ru-tokenizer")
    helper = make_model("qwen2-tied", new)
    vocabshift.save_pretrained_atomic(helper, new, tmp_path / "helper")
    salt = ["--method", "salt", "--option", f"word_vectors={vectors.source}"]
    run("extend", str(base_folder), str(tmp_path / "ru-tokenizer"), str(tmp_path / "out"), *salt, "--option",
        f"helper_model={tmp_path / 'helper'}")
    model = AutoModelForCausalLM.from_pretrained(base_folder)
    model.extend_vocabulary(new, method="salt", helper_model=helper, word_vectors=vectors)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    for name, weight in saved.state_dict().items():
        assert torch.equal(weight, model.state_dict()[name]), name
    other = tokenizers_en["sentencepiece"]
    vocabshift.save_pretrained_atomic(make_model("qwen2-tied", other), other, tmp_path / "english")
    refused = run("extend", str(base_folder), str(tmp_path / "ru-tokenizer"), str(tmp_path / "x"), *salt,
                  "--option", f"helper_model={tmp_path / 'english'}", check=False)
    assert refused.returncode == 1 and "helper_model's tokenizer" in refused.stderr, refused.stderr
    assert "Loading weights" not in refused.stderr and not (tmp_path / "x").exists()  # refused before the model loads


def test_inspect_finds_problems_and_exits_with_1(base_folder, tokenizers_ru, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(base_folder)
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=str(base_folder))
    model.config.tie_word_embeddings = False
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "broken")
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] += 1  # the config no longer matches the rows
    config["vocabshift"]["special_tokens"]["</s>"] = 7
    (folder / "config.json").write_text(json.dumps(config))
    result = run("inspect", str(folder), check=False)
    assert result.returncode == 1, result.stderr
    assert "3 problem(s)" in result.stdout
    assert f"ids below config vocab_size {config['vocab_size']:,} without a token: 1 (first " in result.stdout
    assert f"config vocab_size is {config['vocab_size']:,} but the embeddings have" in result.stdout
    assert "the record's special token ids" in result.stdout


def test_card_refuses_to_overwrite_a_hand_written_readme_and_errors_are_short(base_folder, tmp_path):
    (tmp_path / "README.md").write_text("# my notes\n")
    result = run("card", str(base_folder), "--output", str(tmp_path / "README.md"), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "carries no vocabshift record" in result.stderr  # the model folder was never extended
    assert (tmp_path / "README.md").read_text() == "# my notes\n"


def test_inspect_json_of_a_folder_without_a_record_prints_null_and_the_note(base_folder):
    """As the report does (a note, exit code 0), in JSON: the record is null, the notes go to stderr (it printed
    nothing at all)."""
    result = run("inspect", "--json", str(base_folder))
    assert json.loads(result.stdout) is None
    assert "note: no vocabshift record in config.json" in result.stderr


def test_help_of_every_subcommand_describes_every_argument():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert {"extend", "card", "push", "inspect", "methods"} <= set(subcommands)
    for name, sub in subcommands.items():
        help_text = sub.format_help()
        assert sub.description and all(action.help for action in sub._actions), name
        assert sub.prog == f"vocabshift {name}" and help_text.startswith(f"usage: vocabshift {name}")
    assert "--pad-to-multiple-of" in subcommands["extend"].format_help()
    assert "never from the command line" in subcommands["push"].format_help()


def test_ctrl_c_ends_the_command_without_a_traceback():
    """A real SIGINT, sent while the command works (here: while it lists the methods)."""
    script = ("import os, signal, sys\n"
              "import vocabshift.cli as cli\n"
              "cli.list_methods = lambda: os.kill(os.getpid(), signal.SIGINT) or []\n"
              "sys.exit(cli.main(['methods']))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("interrupted: nothing half-written is left")


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_closed_pipe_ends_the_command_quietly(unbuffered):
    """`vocabshift inspect out | head -1`: the reader is gone before the output is written (here: before the command
    starts); no `error: [Errno 32] Broken pipe` nor `Exception ignored ... BrokenPipeError`, and SIGPIPE's exit code."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "vocabshift", "methods"], stdout=write, stderr=subprocess.PIPE,
                                text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                                                             "PYTHONUNBUFFERED": unbuffered})
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (141, ""), result.stderr


def test_version():
    result = run("--version")
    assert result.stdout.strip() == f"vocabshift {vocabshift.__version__}"


def test_option_values_are_read_as_json_scalars_or_strings():
    assert _key_value("k=3") == ("k", 3) and _key_value("k=0.5") == ("k", 0.5) and _key_value("k=true") == ("k", True)
    assert _key_value("k=char_length") == ("k", "char_length") and _key_value("k=[1]") == ("k", "[1]")
    assert _key_value("path=a=b") == ("path", "a=b")
    with pytest.raises(Exception, match="is not key=value"):
        _key_value("oops")


def test_console_script_lists_the_methods():
    script = os.path.join(os.path.dirname(sys.executable), "vocabshift")
    assert os.path.exists(script), "run `make setup` (pip install -e .) to install the console script"
    result = subprocess.run([script, "methods"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == vocabshift.list_methods()
