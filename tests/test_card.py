"""Model cards: rendered against golden files, metadata read back by `ModelCard.load` without warnings."""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from pathlib import Path

import pytest
from huggingface_hub import HfApi, ModelCard

import vocabshift
from vocabshift.errors import ModelFolderError, RecordError
from vocabshift.extension_record import extend_command
from vocabshift.hub.card import is_unedited_card
from vocabshift.packing import pack_ids
from vocabshift.record import ExtensionRecord, add_cpt_entry, find_record
from vocabshift.training.evaluation import Evaluation, ModelScores

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("VOCABSHIFT_UPDATE_GOLDEN") == "1"  # rewrite the golden files after a deliberate change
BASE_README = """---
license: apache-2.0
language:
- en
---

# A base model
"""


def make_record(**changes) -> ExtensionRecord:
    """A deterministic record: 40 old tokens, 24 new ones (ids 40-63) with short decompositions, made by a call
    from Python (its command as extend_vocabulary stores it) on a model read from a folder (`source_is_folder=False`
    for a Hub id)."""
    fields = dict(
        method="subword", mode="extend", seed=0, source_model="base-model", source_revision=None,
        source_is_folder=True,
        old_vocab_size=40, old_num_rows=40, new_vocab_size=64, new_num_rows=64, tied=True,
        new_token_ranges=[[40, 64]], special_tokens={"<|endoftext|>": 0},
        source_tokenizer_sha256="a" * 64, new_tokenizer_sha256="b" * 64, tokenizer_sha256="c" * 64,
        decompositions={"lengths": pack_ids([2] * 24), "ids": pack_ids([i % 40 for i in range(48)])},
        method_config={"input_weighting": "uniform", "output_weighting": "char_length"},
        diagnostics={"composed": 24, "mean_pieces": 2.0, "target_script": "CYRILLIC"},
        tokenizer_report={"tokens_added": 24, "tokens_dropped": 0, "target_tokens_per_word_before": 5.4821,
                          "target_tokens_per_word_after": 2.0312, "source_lines_changed": 0.015},
        vocabshift_version="0.1.0",
    )
    fields.update(changes)
    fields.setdefault("command", extend_command(
        source_model=fields["source_model"], new_tokenizer="path/to/new-tokenizer", method=fields["method"],
        mode=fields["mode"], seed=fields["seed"], pad_to_multiple_of=fields.get("pad_to_multiple_of"),
        method_options=fields.get("method_options", {}), keep_source_segmentation=False, source_texts=False))
    return ExtensionRecord(**fields)


def write_folder(path: Path, record: ExtensionRecord, *, extra: dict | None = None) -> Path:
    """A model folder as save_pretrained writes it, reduced to what a card reads (config.json)."""
    path.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "transformers_version": "5.24.0",
              "vocabshift": {**record.to_dict(), **(extra or {})}}
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def check_golden(card: ModelCard, name: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(str(card), encoding="utf-8")
    assert str(card) == path.read_text(encoding="utf-8"), f"card differs from {path}; see the diff above"


def load_strictly(path: Path) -> ModelCard:
    """ModelCard.load with every warning turned into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ModelCard.load(path)


def test_a_generated_card_knows_itself_unedited(tmp_path):
    """Its digest covers metadata and body (what push checks before replacing a card on the Hub)."""
    card = str(vocabshift.model_card(write_folder(tmp_path / "tiny-ru", make_record()), language="ru"))
    assert is_unedited_card(card)
    assert not is_unedited_card(card.replace("# tiny-ru", "# tiny-ru, our release"))  # the body edited
    assert not is_unedited_card(card.replace("- ru", "- uk", 1))  # the metadata edited
    assert not is_unedited_card("# My model\n\nWritten by hand.\n")
    assert not is_unedited_card("---\n: [\n---\n" + card)  # metadata that is no YAML mapping


def test_card_of_an_extension_inherits_the_local_base_license(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base-model").mkdir()
    (tmp_path / "base-model" / "README.md").write_text(BASE_README, encoding="utf-8")
    folder = write_folder(tmp_path / "tiny-ru", make_record())
    with caplog.at_level(logging.WARNING):
        card = vocabshift.model_card(folder, language="ru", repo_id="me/tiny-ru")
    check_golden(card, "card_extend.md")
    # base_model is unknown (a local folder), the rest is complete: one warning, naming the fix
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "The model card has no base_model (not found in the record or the base model's card): pass "
        "base_model=... to model_card (or `vocabshift card --base-model`)."]
    card.save(folder / "README.md")
    data = load_strictly(folder / "README.md").data
    assert (data.license, data.language, data.library_name) == ("apache-2.0", ["ru", "en"], "transformers")
    assert data.tags == ["vocabshift", "subword", "vocabulary-extension"]
    assert data.pipeline_tag == "text-generation" and data.base_model is None


def test_card_of_a_model_extended_twice_names_the_first_base(tmp_path, loopback_hub):
    """The record of a second extension names the first extension's output as its source; the card's base model
    (and the license and languages read from its card) is the model the first extension started from."""
    api = HfApi()
    api.create_repo("org/base-7b")
    api.upload_file(path_or_fileobj=BASE_README.encode(), path_in_repo="README.md", repo_id="org/base-7b")
    first = make_record(source_model="org/base-7b", source_is_folder=False, cpt=[{"rows": "new", "steps": 200}])
    first_data = {key: value for key, value in first.to_dict().items() if key != "earlier"}
    record = make_record(source_model=str(tmp_path / "base-7b-ru"), method="mean", earlier=[first_data])
    card = vocabshift.model_card(write_folder(tmp_path / "base-7b-ru-uk", record))
    assert (card.data.base_model, card.data.license, card.data.language) == ("org/base-7b", "apache-2.0", ["en"])
    assert f"base-7b-ru-uk is `{tmp_path / 'base-7b-ru'}` with a new vocabulary" in card.text
    assert ("Its vocabulary was extended 2 times, each extension (method in parentheses) starting\nfrom the model "
            f"before it: [org/base-7b](https://huggingface.co/org/base-7b) (`subword`) → `{tmp_path / 'base-7b-ru'}` "
            "(`mean`) → **this model**.") in card.text


def test_the_reproduce_commands_of_a_model_extended_twice_start_from_the_first_base(tmp_path):
    """The commands began with the last extension, from the first one's output folder, which a reader does not have:
    the earlier extensions' commands (with their training) come first, each writing the folder the next one reads."""
    first = make_record(source_model="org/base-7b", source_is_folder=False,
                        cpt=[{"steps": 200, "command": ["vocabshift", "train", "out/base-7b-ru", "ru.txt", "out/t"]}])
    first_data = {key: value for key, value in first.to_dict().items() if key != "earlier"}
    record = make_record(source_model="out/t", method="mean", earlier=[first_data])
    text = vocabshift.model_card(write_folder(tmp_path / "base-7b-ru-uk", record), language="uk", license="mit").text
    commands = [line for line in text.splitlines() if line.startswith("vocabshift ")]
    assert commands[:3] == ["vocabshift extend org/base-7b path/to/new-tokenizer out/t \\",
                            "vocabshift train out/base-7b-ru ru.txt out/t",
                            "vocabshift extend out/t path/to/new-tokenizer base-7b-ru-uk \\"]


def test_card_with_history_reads_the_base_card_from_the_hub(tmp_path, loopback_hub):
    api = HfApi()
    api.create_repo("org/base-7b")
    api.upload_file(path_or_fileobj=BASE_README.encode(), path_in_repo="README.md", repo_id="org/base-7b")
    record = make_record(
        method="random", mode="replace", source_model="org/base-7b", source_is_folder=False, new_vocab_size=60,
        new_num_rows=64,
        pad_to_multiple_of=64,
        new_token_ranges=[[4, 40], [44, 60]], shared=pack_ids([0, 0, 1, 1, 2, 2, 3, 3, 40, 10, 41, 11, 42, 12, 43, 13]),
        method_config={}, diagnostics={}, tokenizer_report={},
        cpt=[{"step": 0, "loss": 4.21, "tokens_seen": 0},
             {"step": 50, "loss": 2.875, "tokens_seen": 51200,
              "command": ["vocabshift", "train", "out/base-7b-ru", "ru.txt"]}],
        propagation=[{"base": "org/base-7b", "adapted": "me/base-7b-ru", "instruct": "org/base-7b-instruct",
                      **{f"{role}_revision": f"{i}" * 40 for i, role in enumerate(("base", "adapted", "instruct"))},
                      "method": "conversion", "residual": {"input": 0.0312}}],
    )
    scores = (ModelScores("adapted", 2.1, 1.29, 2.31, 2.52, 1.87, 0.71, 51_200),
              ModelScores("original", 5.29, 1.562, 1.14, None, None, None, 129_400))
    record.evaluations.append(Evaluation(scores, 200, 171_333).to_dict())
    folder = write_folder(tmp_path / "base-7b-instruct-ru", record)
    (folder / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    card = vocabshift.model_card(folder, language=["ru"], datasets=["me/ru-corpus"])
    check_golden(card, "card_history.md")
    card.save(folder / "README.md")
    data = load_strictly(folder / "README.md").data
    assert data.base_model == ["org/base-7b-instruct", "me/base-7b-ru"] and data.base_model_relation == "merge"
    assert (data.license, data.language, data.datasets) == ("apache-2.0", ["ru", "en"], ["me/ru-corpus"])
    assert data.tags == ["vocabshift", "random", "vocabulary-replacement", "embedding-only-cpt", "lep"]
    card.validate()  # the Hub's metadata rules, through the loopback /api/validate-yaml


def test_card_after_lep_from_an_adapted_folder_names_the_instruct_model(tmp_path):
    """The documented path propagates a local adapted folder into a Hub instruct model: the output holds instruct's
    weights, so instruct is its base model (the card named the pre-instruct source, and said the model was it)."""
    lineage = {"base": "org/base-7b", "adapted": "out/base-7b-ru", "instruct": "org/base-7b-instruct",
               "base_revision": "1" * 40, "adapted_revision": None, "instruct_revision": "2" * 40,
               "method": "conversion"}
    record = make_record(source_model="org/base-7b", source_is_folder=False, propagation=[lineage])
    card = vocabshift.model_card(write_folder(tmp_path / "base-7b-instruct-ru", record), language="ru",
                                 license="mit")
    assert (card.data.base_model, card.data.base_model_relation) == ("org/base-7b-instruct", "finetune")
    assert "base-7b-instruct-ru is [org/base-7b-instruct](https://huggingface.co/org/base-7b-instruct) with a new " \
        "vocabulary" in card.text


def test_card_after_lep_between_local_folders_says_the_model_is_instruct(tmp_path):
    """With base, adapted and instruct all folders, the card said the output was the base folder with a new
    vocabulary, that its layers were the base model's, and reproduced the extension into the output folder (which
    the propagate command after it then writes again) instead of into the adapted folder propagate read."""
    lineage = {"base": "models/base", "adapted": "out/base-ru", "instruct": "models/instruct", "base_revision": None,
               "adapted_revision": None, "instruct_revision": None, "method": "overlap",
               "command": ["vocabshift", "propagate", "out/base-ru", "models/base", "models/instruct", "out/lep",
                           "--method", "overlap"]}
    record = make_record(source_model="models/base", propagation=[lineage])
    card = vocabshift.model_card(write_folder(tmp_path / "lep", record), language="ru", license="mit")
    assert card.data.base_model is None and "lep is `models/instruct` with a new vocabulary" in card.text
    assert "the transformer layers are those of `models/instruct`, with its knowledge" in card.text
    assert "base model's, with its knowledge" not in card.text
    assert "vocabshift extend models/base path/to/new-tokenizer out/base-ru \\\n" in card.text


def test_card_tells_what_each_evaluation_measured(tmp_path):
    """An evaluation stored before training, or on the adapted model before LEP carried its rows into this one, is
    captioned as such: under the card's Evaluation heading it read as this model's figures."""
    scores = (ModelScores("adapted", 2.1, 1.29, 2.31, 2.52, 1.87, 0.71, 51_200),)
    table = Evaluation(scores, 200, 171_333).to_dict()
    lineage = {"base": "org/base-7b", "adapted": "me/base-7b-ru", "instruct": "org/base-7b-instruct",
               "adapted_revision": "1" * 40, "method": "conversion"}
    record = make_record(cpt=[{"steps": 50}, {"steps": 30}], propagation=[lineage], evaluations=[
        {**table, "cpt_runs": 0, "propagations": 0}, {**table, "cpt_runs": 1, "propagations": 0},
        {**table, "cpt_runs": 2, "propagations": 1}, table])
    text = vocabshift.model_card(write_folder(tmp_path / "m", record), language="ru", license="mit").text
    adapted = "[me/base-7b-ru](https://huggingface.co/me/base-7b-ru), whose rows LEP carried into this model (not on " \
        "this model itself)"
    captions = [line for line in text.splitlines() if line.startswith("Measured on")]
    assert captions == [f"Measured on {adapted}, right after the extension, before any training:",
                        f"Measured on {adapted}, after the first 1 of the 2 continued-pretraining runs below (50 "
                        "steps):",
                        "Measured on this model, after the embedding-only continued pretraining below (80 steps):"]
    assert text.count("| adapted | 2.10 | 1.290 |") == 4  # a record before 0.2: the table without a caption


def test_the_reproduce_commands_train_after_the_propagation_they_follow(tmp_path):
    """A CPT run on the model LEP made was listed before the propagate command that writes that model; each run now
    notes the propagations before it (`add_cpt_entry`), and a run of a record before 0.2 still comes first."""
    propagate = ["vocabshift", "propagate", "out/ru", "org/base", "org/instruct", "out/lep"]
    lineage = {"base": "org/base", "adapted": "out/ru", "instruct": "org/instruct", "method": "conversion",
               "command": propagate}
    config = {"vocabshift": make_record(propagation=[lineage]).to_dict()}
    config["vocabshift"]["cpt"] = [{"steps": 50, "command": ["vocabshift", "train", "out/ru", "ru.txt", "out/ru2"]}]
    add_cpt_entry(config, {"steps": 20, "command": ["vocabshift", "train", "out/lep", "ru.txt", "out/lep2"]})
    assert config["vocabshift"]["cpt"][1]["propagations"] == 1
    folder = write_folder(tmp_path / "lep2", find_record(config))
    text = vocabshift.model_card(folder, language="ru", license="mit").text
    commands = [line for line in text.splitlines() if line.startswith(("vocabshift train", "vocabshift propagate"))]
    assert commands == ["vocabshift train out/ru ru.txt out/ru2", " ".join(propagate),
                        "vocabshift train out/lep ru.txt out/lep2"]


def test_commands_of_earlier_records_read_as_words(tmp_path):
    """Earlier versions kept propagation's command as one shell string: it reads as its words, as every command is
    kept now, and the card shows the same line."""
    line = "vocabshift propagate org/base-ru org/base 'models/base instruct' out --method conversion"
    lineage = {"base": "org/base", "adapted": "org/base-ru", "instruct": "org/base-instruct", "method": "conversion"}
    folder = write_folder(tmp_path / "m", make_record(), extra={"cpt": [{"steps": 50, "objective": {"name": "x"}}],
                                                                "propagation": [{**lineage, "command": line}]})
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    record = find_record(config)
    assert record.propagation[0]["command"] == ["vocabshift", "propagate", "org/base-ru", "org/base",
                                                "models/base instruct", "out", "--method", "conversion"]
    assert record.to_dict()["propagation"][0]["command"] == record.propagation[0]["command"]
    assert record.cpt == [{"steps": 50, "objective": {"name": "x"}}] and config["vocabshift"]["propagation"][0][
        "command"] == line  # reading changes nothing stored
    assert line in vocabshift.model_card(folder, language="ru", license="mit").text


def test_card_of_an_in_memory_model(tokenizers_en, tokenizers_ru):
    from conftest import make_model

    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=tokenizers_en["sentencepiece"],
                            input_weighting="char_length")
    card = vocabshift.model_card(model, language="ru", license="mit", base_model="org/tiny")
    assert card.data.base_model == "org/tiny" and card.data.base_model_relation == "finetune"
    assert "- `input_weighting`: char_length" in card.text  # only the option that differs from the default
    assert "untied (initialized separately)" in card.text
    record = vocabshift.get_record(model)
    assert f"**{len(record.new_ids):,}** new tokens" in card.text


def test_card_says_which_new_tokens_are_placeholders(tmp_path):
    """Rows padded to a multiple get placeholder tokens: the vocabulary grew by 88 while 24 tokens were initialized,
    and the card said so without saying why."""
    record = make_record(new_vocab_size=128, new_num_rows=128)
    text = vocabshift.model_card(write_folder(tmp_path / "m", record), language="ru", license="mit").text
    assert "| Vocabulary | 40 → 128 tokens (64 of them unused placeholders for padding rows) |" in text
    assert "| New tokens initialized | 24 (ids 40–63) |" in text


def test_card_of_an_unregistered_method_keeps_its_name_and_options(tmp_path):
    record = make_record(method="plugin_method", method_config={"alpha": 0.5}, method_options={"alpha": 0.5})
    card = vocabshift.model_card(write_folder(tmp_path / "m", record), language="ru", license="mit")
    assert "| Method | plugin_method (`plugin_method`) |" in card.text
    assert "--option alpha=0.5" in card.text


def test_card_of_empty_history_entries(tmp_path):
    """A hand-emptied CPT or propagation entry leaves its section without a table (it was an IndexError)."""
    folder = write_folder(tmp_path / "m", make_record(), extra={"cpt": [{}], "propagation": [{}]})
    text = vocabshift.model_card(folder, language="ru", license="mit").text
    assert "(`subword`) |" in text and "Learned Embedding Propagation" in text and "| steps |" not in text


def test_card_refuses_folders_without_config_or_record(tmp_path):
    with pytest.raises(ModelFolderError, match="has no config.json"):
        vocabshift.model_card(tmp_path)
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(RecordError, match="carries no vocabshift record"):
        vocabshift.model_card(tmp_path)


def test_the_template_ships_in_the_wheel(wheel, tmp_path):
    """Install the wheel alone, and render a card from the installed copy."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "pip", "-q", "install", "--no-deps", "--no-index", "--target",
                    str(tmp_path / "site"), str(wheel)], check=True, capture_output=True)
    folder = write_folder(tmp_path / "m", make_record())
    script = ("import sys, vocabshift; assert vocabshift.__file__.startswith(sys.argv[1]), vocabshift.__file__; "
              "print(vocabshift.model_card(sys.argv[2], language='ru', license='mit').data.tags)")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "site"), str(folder)], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, check=True,
                            cwd=tmp_path)
    assert "'vocabshift', 'subword'" in result.stdout


def test_a_relative_source_folder_is_no_base_model(tmp_path, monkeypatch, loopback_hub, tokenizers_en, tokenizers_ru,
                                                   caplog):
    """`vocabshift extend models/base ...` records `models/base`, which looks like a repo id: extend notes that it was
    a folder, and the card neither publishes it as base_model nor asks the Hub for it, even once the folder is gone.
    A record that does not say (written before source_is_folder) is taken as a possible folder, with a warning."""
    from transformers import AutoModelForCausalLM

    from conftest import make_model

    monkeypatch.chdir(tmp_path)
    make_model("qwen2-tied", tokenizers_en["bytelevel"]).save_pretrained("models/base--v2")
    model = AutoModelForCausalLM.from_pretrained("models/base--v2")
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=tokenizers_en["bytelevel"])
    vocabshift.save_pretrained_atomic(model, tokenizer, "out")
    assert vocabshift.get_record(model).source_is_folder is True
    shutil.rmtree("models")
    card = vocabshift.model_card("out", language="ru", license="mit")
    assert card.data.base_model is None and "out is `models/base--v2` with a new vocabulary" in card.text
    config = json.loads(Path("out/config.json").read_text(encoding="utf-8"))
    del config["vocabshift"]["source_is_folder"]
    config["vocabshift"]["source_model"] = "models/base"
    Path("out/config.json").write_text(json.dumps(config), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert vocabshift.model_card("out", language="ru", license="mit").data.base_model is None
    assert "source_model 'models/base' may be a local folder" in caplog.text
    assert loopback_hub.requests == []


def test_a_base_readme_that_is_not_utf8_is_read_on_without_its_metadata(tmp_path, monkeypatch, caplog):
    """The base model's README.md only lends license and languages: one that is not UTF-8 is said in a warning
    naming it (it was a raw UnicodeDecodeError), and the card is made without them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base-model").mkdir()
    (tmp_path / "base-model" / "README.md").write_bytes(BASE_README.encode("utf-16"))
    with caplog.at_level(logging.WARNING):
        card = vocabshift.model_card(write_folder(tmp_path / "tiny-ru", make_record()), language="ru")
    assert card.data.license is None and card.data.language == ["ru"]
    assert "Could not read the card of the base model base-model/README.md (UnicodeDecodeError)" in caplog.text


@pytest.mark.parametrize(("name", "card", "push"), [
    ("tiny ru", "vocabshift card 'tiny ru' --license 'other license'", "vocabshift push 'tiny ru' 'your-name/tiny ru'"),
    ("-ru", "vocabshift card ./-ru --license 'other license'", "vocabshift push ./-ru your-name/-ru")])
def test_the_reproduce_commands_are_shell_words(tmp_path, name, card, push):
    """A folder name with a space, or one argparse would read as a flag, is a word the shell and vocabshift read
    back (the lines read `vocabshift card tiny ru`, `vocabshift card -ru`)."""
    text = str(vocabshift.model_card(write_folder(tmp_path / name, make_record()), license="other license"))
    assert f"\n{card}\n{push}\n" in text, text
