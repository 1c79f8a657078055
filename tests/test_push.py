"""push_to_hub against the loopback Hub with the real huggingface_hub client, and reloading with from_pretrained."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError
from transformers import AutoModelForCausalLM, AutoTokenizer

import vocabshift
from conftest import ROOT, make_model
from vocabshift.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    ModelFolderError,
    OutputExistsError,
    ShardError,
    UnsafeWeightsError,
)

REPO = "loopback-user/tiny-ru"


@pytest.fixture(scope="module")
def extended(tokenizers_en, tokenizers_ru):
    """A tiny untied Llama extended with a Russian tokenizer, and that tokenizer."""
    model = make_model("llama-untied", tokenizers_en["sentencepiece"])
    tokenizer = model.extend_vocabulary(tokenizers_ru["sentencepiece"], source_tokenizer=tokenizers_en["sentencepiece"])
    return model, tokenizer


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def shards(files):
    return sorted(path for path in files if path.endswith(".safetensors"))


def test_push_sharded_model_and_reload_it(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru", max_shard_size="60KB")
    assert len(shards(os.listdir(folder))) > 3
    url = vocabshift.push_to_hub(folder, REPO, private=True, commit_message="first")
    commits = loopback_hub.commits(REPO)
    assert url == f"{loopback_hub.url}/{REPO}/commit/{commits[0].oid}"
    assert [c.title for c in commits] == ["first", "initial commit"]  # one commit
    files = loopback_hub.files(REPO)
    assert shards(files) == shards(os.listdir(folder)) and "README.md" in files
    assert "README.md" not in os.listdir(folder)  # the card is generated for the commit, the folder is untouched

    reloaded = AutoModelForCausalLM.from_pretrained(REPO)
    reloaded_tokenizer = AutoTokenizer.from_pretrained(REPO)
    text = "Съешь же ещё этих мягких французских булок"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert reloaded_tokenizer(text, add_special_tokens=False)["input_ids"] == ids
    assert torch.equal(logits(model, ids), logits(reloaded, ids))
    assert vocabshift.get_record(reloaded) == vocabshift.get_record(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        card = ModelCard.load(REPO)
    assert card.data.tags[:2] == ["vocabshift", "subword"] and card.data.library_name == "transformers"
    assert HfApi().model_info(REPO).private is True


def test_repush_with_fewer_shards_deletes_the_stale_ones(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = tmp_path / "tiny-ru"
    vocabshift.save_pretrained_atomic(model, tokenizer, folder, max_shard_size="60KB")
    vocabshift.push_to_hub(folder, REPO)
    many = shards(loopback_hub.files(REPO))
    vocabshift.save_pretrained_atomic(model, tokenizer, folder, max_shard_size="200KB")
    vocabshift.push_to_hub(folder, REPO, commit_message="fewer shards")
    files = loopback_hub.files(REPO)
    assert shards(files) == shards(os.listdir(folder)) and len(shards(files)) < len(many)
    assert not set(many) & set(shards(files))  # every old shard name is gone (model-0000i-of-0000N)
    assert [c.title for c in loopback_hub.commits(REPO)][0] == "fewer shards"
    reloaded = AutoModelForCausalLM.from_pretrained(REPO)
    assert torch.equal(logits(model, [5, 6, 7]), logits(reloaded, [5, 6, 7]))


def test_a_card_edited_on_the_hub_is_not_replaced_by_a_generated_one(extended, tmp_path, loopback_hub):
    """The card asks to be proofread and completed; where that was done on the Hub, a re-push of a folder without a
    README.md would replace the user's text: refused before anything is uploaded (an unedited generated card, or a
    README.md in the folder, goes as before)."""
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    vocabshift.push_to_hub(folder, REPO)
    vocabshift.push_to_hub(folder, REPO, commit_message="again")  # the generated card, unedited: replaced
    generated = loopback_hub.files(REPO)["README.md"].decode()
    assert "vocabshift-sha256:" in generated
    edited = generated.replace("## What was done", "Trained on our own news corpus.\n\n## What was done")
    HfApi().upload_file(path_or_fileobj=edited.encode(), path_in_repo="README.md", repo_id=REPO,
                        commit_message="edit the card")
    with pytest.raises(OutputExistsError, match=rf"{REPO} has a README.md that vocabshift did not generate, or that "
                       r"was edited since.*Nothing was uploaded.*vocabshift card"):
        vocabshift.push_to_hub(folder, REPO, commit_message="would replace the card")
    assert [c.title for c in loopback_hub.commits(REPO)][0] == "edit the card"
    (folder / "README.md").write_text(edited, encoding="utf-8")  # the user's card, brought into the folder
    vocabshift.push_to_hub(folder, REPO, commit_message="with the card")
    assert loopback_hub.files(REPO)["README.md"].decode() == edited


def test_push_to_a_branch_leaves_main_alone(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    vocabshift.push_to_hub(folder, REPO, revision="dev")
    assert list(loopback_hub.files(REPO)) == [".gitattributes"]
    assert "model.safetensors" in loopback_hub.files(REPO, revision="dev")
    reloaded = AutoModelForCausalLM.from_pretrained(REPO, revision="dev")
    assert torch.equal(logits(model, [1, 2, 3]), logits(reloaded, [1, 2, 3]))


def test_a_repo_id_without_namespace_goes_to_the_users_and_the_card_names_it(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    url = vocabshift.push_to_hub(folder, "tiny-plain")
    assert "/loopback-user/tiny-plain/commit/" in url
    readme = loopback_hub.files("loopback-user/tiny-plain")["README.md"].decode()
    assert 'from_pretrained("loopback-user/tiny-plain")' in readme


def test_push_refuses_pickles_and_incomplete_folders_before_any_request(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    torch.save({"step": 1}, folder / "training_args.bin")
    with pytest.raises(UnsafeWeightsError, match=r"pickle files \['training_args.bin'\].*safetensors only"):
        vocabshift.push_to_hub(folder, REPO)
    (folder / "training_args.bin").unlink()
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelFolderError, match="lacks config.json or \\*.safetensors"):
        vocabshift.push_to_hub(folder, REPO)
    with pytest.raises(ModelFolderError, match="is not a folder"):
        vocabshift.push_to_hub(tmp_path / "missing", REPO)
    assert loopback_hub.requests == []


def test_push_refuses_a_card_generated_before_the_record_changed(extended, tmp_path, loopback_hub):
    """`vocabshift evaluate --add-to-record` rewrites config.json in place: the README.md `vocabshift card` wrote
    before was published as it was, without the evaluation (it still read as an unedited generated card)."""
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    vocabshift.model_card(folder, language="ru", license="mit").save(folder / "README.md")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["vocabshift"]["evaluations"] = [{"scores": [], "num_texts": 2, "num_bytes": 10, "cpt_runs": 0,
                                            "propagations": 0}]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ModelFolderError, match="generated from an earlier state of the record"):
        vocabshift.push_to_hub(folder, REPO)
    assert loopback_hub.requests == []
    vocabshift.model_card(folder, language="ru", license="mit").save(folder / "README.md")
    vocabshift.push_to_hub(folder, REPO)
    assert "## Evaluation" in loopback_hub.files(REPO)["README.md"].decode()


def test_push_validates_every_shard_and_the_index_before_any_request(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru", max_shard_size="60KB")
    shard = shards(os.listdir(folder))[-1]
    data = (folder / shard).read_bytes()
    (folder / shard).write_bytes(data[:-1])
    with pytest.raises(ShardError, match=f"'{folder / shard}' is not a valid safetensors file \\(the tensors end at "
                                         "byte \\d+ but the file has \\d+\\): it is truncated or corrupted"):
        vocabshift.push_to_hub(folder, REPO)
    (folder / shard).write_bytes(data[:8] + b"[" + data[9:])
    with pytest.raises(ShardError, match=f"{shard}' is not a valid safetensors file \\(unreadable header"):
        vocabshift.push_to_hub(folder, REPO)
    (folder / shard).unlink()
    with pytest.raises(ShardError, match=f"model.safetensors.index.json' puts .* in {shard}, which is missing"):
        vocabshift.push_to_hub(folder, REPO)
    (folder / "model.safetensors.index.json").write_text("{\"weight_map\": [1, 2]}")
    with pytest.raises(ShardError, match="model.safetensors.index.json' is not a shard index"):
        vocabshift.push_to_hub(folder, REPO)
    (folder / "config.json").write_text("{\"vocab_size\": ")
    with pytest.raises(ModelFolderError, match="config.json. cannot be read \\(JSONDecodeError: .*: it is corrupted"):
        vocabshift.push_to_hub(folder, REPO)
    assert loopback_hub.requests == []


def test_push_refuses_a_single_file_beside_a_shard_index_before_any_request(extended, tmp_path, loopback_hub):
    """From the Hub, transformers would load the single file, vLLM the index's shards: two models in one repo."""
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru", max_shard_size="60KB")
    vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "single")
    shutil.copy(tmp_path / "single" / "model.safetensors", folder)
    with pytest.raises(ModelFolderError, match="would publish a model that does not load or serve as it should: it "
                       "holds both model.safetensors and model.safetensors.index.json"):
        vocabshift.push_to_hub(folder, REPO)
    assert loopback_hub.requests == []


@pytest.mark.parametrize(("repo_id", "error", "match"), [
    ("a/b/c", InvalidArgumentError, "repo_id='a/b/c' is not a Hub repo id \\(Repo id must be in the form"),
    ("my model", InvalidArgumentError, "repo_id='my model' is not a Hub repo id .* pass 'namespace/name' or 'name'"),
    ("me/x--y", InvalidArgumentError, "Cannot have -- or .."),
    ("me/x.git", InvalidArgumentError, "cannot end by '.git'"),
    ("", InvalidArgumentError, "repo_id='' is not a Hub repo id"),
    ("me/" + "x" * 97, InvalidArgumentError, "maximum length is 96"),
    (None, InvalidArgumentTypeError, "repo_id=None is a NoneType: pass the repo id as a string"),
    (Path("me/x"), InvalidArgumentTypeError, "repo_id=.* is a PosixPath"),
])
def test_bad_repo_ids_are_refused_before_any_request(extended, tmp_path, loopback_hub, repo_id, error, match):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    with pytest.raises(error, match=match):
        vocabshift.push_to_hub(folder, repo_id)
    assert loopback_hub.requests == []


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"private": "yes"}, InvalidArgumentTypeError, "private='yes' is invalid: pass True or False"),
    ({"revision": "my branch"}, InvalidArgumentError, "revision='my branch' is not a branch name"),
    ({"revision": "-x"}, InvalidArgumentError, "revision='-x' is not a branch name"),
    ({"revision": ""}, InvalidArgumentError, "revision='' is not a branch name"),
    ({"revision": 3}, InvalidArgumentError, "revision=3 is not a branch name"),
    ({"revision": "HEAD"}, InvalidArgumentError, "revision='HEAD' is not a branch name"),
    ({"revision": "dev/.hidden"}, InvalidArgumentError, "revision='dev/.hidden' is not a branch name"),
    ({"revision": "a.lock/b"}, InvalidArgumentError, "revision='a.lock/b' is not a branch name"),
    ({"commit_message": " "}, InvalidArgumentError, "commit_message=' ' is invalid: pass a non-empty string"),
    ({"token": ""}, InvalidArgumentError, "token must be a non-empty string .*; got an empty string"),
    ({"token": b"hf_secret"}, InvalidArgumentError, "token must be a non-empty string .*; got bytes"),
])
def test_bad_options_are_refused_before_any_request(extended, tmp_path, loopback_hub, options, error, match):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    with pytest.raises(error, match=match) as refused:
        vocabshift.push_to_hub(folder, REPO, **options)
    assert "hf_secret" not in str(refused.value) and loopback_hub.requests == []
    with pytest.raises(InvalidArgumentTypeError, match="folder=3 is a int: pass a path"):
        vocabshift.push_to_hub(3, REPO)


def test_the_token_is_sent_but_never_logged(extended, tmp_path, loopback_hub, caplog, capfd):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    with caplog.at_level(logging.DEBUG):
        vocabshift.push_to_hub(folder, REPO, token=loopback_hub.token)
        with pytest.raises(HfHubHTTPError, match="401") as refused:
            vocabshift.push_to_hub(folder, "loopback-user/other", token="hf_wrong_secret_token")
    output = caplog.text + "".join(capfd.readouterr()) + str(refused.value)
    assert "Request" in caplog.text  # huggingface_hub's debug log of each request was captured
    assert loopback_hub.token not in output and "hf_wrong_secret_token" not in output


def test_private_is_refused_for_an_existing_public_repo(extended, tmp_path, loopback_hub):
    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    vocabshift.push_to_hub(folder, REPO)
    commits = len(HfApi().list_repo_commits(REPO))
    (folder / "notes.md").write_text("private notes\n")
    with pytest.raises(InvalidArgumentError, match=f"private=True, but {REPO} exists and is public: nothing was "):
        vocabshift.push_to_hub(folder, REPO, private=True)
    assert len(HfApi().list_repo_commits(REPO)) == commits and "notes.md" not in loopback_hub.files(REPO)
    vocabshift.push_to_hub(folder, "loopback-user/tiny-private", private=True)
    vocabshift.push_to_hub(folder, "loopback-user/tiny-private", private=True)  # already private: fine
    assert HfApi().model_info("loopback-user/tiny-private").private is True


def test_no_token_is_refused_before_any_request(extended, tmp_path, loopback_hub, monkeypatch):
    from huggingface_hub import constants

    model, tokenizer = extended
    folder = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "tiny-ru")
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-stored-token"))
    with pytest.raises(InvalidArgumentError, match="needs a token with write access, and none is set: set HF_TOKEN"):
        vocabshift.push_to_hub(folder, REPO)
    assert loopback_hub.requests == []


CHILD_PUSH = """
import sys, vocabshift
vocabshift.push_to_hub(sys.argv[1], sys.argv[2], commit_message="second")
"""


@pytest.mark.parametrize("stage", ["lfs-upload", "commit"])
def test_a_push_killed_midway_leaves_the_repo_as_it_was(extended, tmp_path, loopback_hub, stage):
    model, tokenizer = extended
    first = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "first")
    vocabshift.push_to_hub(first, REPO)
    before = loopback_hub.files(REPO)
    with torch.no_grad():
        model.get_input_embeddings().weight[-1] += 1.0  # a different model for the second push
    second = vocabshift.save_pretrained_atomic(model, tokenizer, tmp_path / "second", max_shard_size="60KB")
    reached = loopback_hub.hold(stage)
    env = {**os.environ, **loopback_hub.environ(), "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen([sys.executable, "-c", CHILD_PUSH, str(second), REPO], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert reached.wait(120), f"the push never reached {stage}"
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        loopback_hub.release(stage)
        child.kill()
    assert child.returncode == -signal.SIGKILL
    assert loopback_hub.files(REPO) == before and len(loopback_hub.commits(REPO)) == 2
    vocabshift.push_to_hub(second, REPO)  # a later push goes through
    assert shards(loopback_hub.files(REPO)) == shards(os.listdir(second))
