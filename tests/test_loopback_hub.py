"""LoopbackHub: the real huggingface_hub client against it, route by route."""

from __future__ import annotations

import os

import pytest
import torch
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    ModelCard,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors.torch import save

from vocabshift_testing import LoopbackHub

REPO = "loopback-user/files"


@pytest.fixture
def api(loopback_hub):
    api = HfApi()
    api.create_repo(REPO)
    api.create_commit(REPO, commit_message="files", operations=[
        CommitOperationAdd("config.json", b'{"a": 1}'),
        CommitOperationAdd("sub/dir/notes.txt", b"hello"),
        CommitOperationAdd("model.safetensors", _safetensors()),
    ])
    return api


def _safetensors() -> bytes:
    return save({"embed": torch.arange(12, dtype=torch.float32).reshape(3, 4)}, metadata={"format": "pt"})


def test_downloads_listing_and_patterns(api, tmp_path):
    assert api.whoami()["name"] == "loopback-user"
    assert sorted(api.list_repo_files(REPO)) == [".gitattributes", "config.json", "model.safetensors",
                                                 "sub/dir/notes.txt"]
    assert open(hf_hub_download(REPO, "sub/dir/notes.txt"), "rb").read() == b"hello"
    folder = snapshot_download(REPO, allow_patterns=["*.json", "sub/*"], local_dir=tmp_path / "snap")
    found = sorted(str(p.relative_to(folder)) for p in tmp_path.joinpath("snap").rglob("*") if p.is_file()
                   and ".cache" not in p.parts)
    assert found == ["config.json", "sub/dir/notes.txt"]
    tree = {entry.path: entry for entry in api.list_repo_tree(REPO, path_in_repo="sub")}
    assert list(tree) == ["sub/dir"]
    lfs = api.get_paths_info(REPO, ["model.safetensors"])[0].lfs
    assert lfs is not None and lfs.size == len(_safetensors())
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == api.list_repo_commits(REPO)[0].commit_id


def test_range_requests_serve_safetensors_headers(api):
    metadata = api.get_safetensors_metadata(REPO)  # reads only the header, with HTTP Range requests
    tensors = metadata.files_metadata["model.safetensors"].tensors
    assert tensors["embed"].shape == [3, 4] and tensors["embed"].dtype == "F32"


def test_hub_errors_map_to_the_clients_typed_errors(api):
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("loopback-user/missing", "config.json")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="no-such-branch")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "missing.json")
    with pytest.raises(EntryNotFoundError):
        api.create_commit(REPO, commit_message="x", operations=[CommitOperationDelete("missing.json")])
    assert api.create_repo(REPO, exist_ok=True).repo_id == REPO
    with pytest.raises(HfHubHTTPError, match="409"):
        api.create_repo(REPO)


def test_commits_are_all_or_nothing_and_based_on_their_parent(api, loopback_hub):
    head = api.model_info(REPO).sha
    api.create_commit(REPO, commit_message="move", parent_commit=head, operations=[
        CommitOperationDelete("sub/"), CommitOperationAdd("notes.txt", b"moved")])
    assert "sub/dir/notes.txt" not in api.list_repo_files(REPO) and "notes.txt" in api.list_repo_files(REPO)
    before = loopback_hub.files(REPO)
    with pytest.raises(HfHubHTTPError, match="412"):  # the branch moved since `head`
        api.create_commit(REPO, commit_message="stale", parent_commit=head,
                          operations=[CommitOperationAdd("late.txt", b"late")])
    with pytest.raises(EntryNotFoundError):  # the addition before the failing deletion is not applied either
        api.create_commit(REPO, commit_message="half", operations=[
            CommitOperationAdd("new.txt", b"new"), CommitOperationDelete("missing.txt")])
    assert loopback_hub.files(REPO) == before


def test_branches_and_revisions(api):
    main = api.model_info(REPO).sha
    api.create_branch(REPO, branch="dev")
    api.upload_file(path_or_fileobj=b"dev only", path_in_repo="dev.txt", repo_id=REPO, revision="dev")
    assert "dev.txt" not in api.list_repo_files(REPO) and "dev.txt" in api.list_repo_files(REPO, revision="dev")
    assert open(hf_hub_download(REPO, "config.json", revision=main), "rb").read() == b'{"a": 1}'
    assert sorted(b.name for b in api.list_repo_refs(REPO).branches) == ["dev", "main"]
    api.delete_branch(REPO, branch="dev")
    assert [b.name for b in api.list_repo_refs(REPO).branches] == ["main"]


def test_private_repos_and_tokens(loopback_hub, monkeypatch):
    api = HfApi()
    api.create_repo("loopback-user/secret", private=True)
    api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="loopback-user/secret")
    assert api.model_info("loopback-user/secret").private
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("loopback-user/secret", "x.txt", token=False)
    with pytest.raises(HfHubHTTPError, match="401"):
        HfApi(token="hf_wrong").create_repo("loopback-user/other")


def test_card_validation_follows_the_hubs_metadata_rules(loopback_hub):
    valid = "---\nlicense: mit\nlanguage: [ru, en]\nbase_model: org/m\nbase_model_relation: finetune\n---\nbody"
    ModelCard(valid).validate()
    with pytest.raises(ValueError, match="base_model_relation"):
        ModelCard("---\nbase_model: org/m\nbase_model_relation: retrained\n---\nbody").validate()
    with pytest.raises(ValueError, match="license_name"):
        ModelCard("---\nlicense: other\n---\nbody").validate()


def test_malformed_and_chunked_requests_get_clear_errors(loopback_hub):
    from huggingface_hub.utils import httpx

    headers = {"Authorization": f"Bearer {loopback_hub.token}"}
    response = httpx.post(f"{loopback_hub.url}/api/repos/create", json={"type": "model"}, headers=headers)
    assert response.status_code == 400 and "KeyError" in response.headers["X-Error-Message"]
    chunks = iter([b'{"name": ', b'"x"}'])
    response = httpx.post(f"{loopback_hub.url}/api/repos/create", content=chunks, headers=headers)
    assert response.status_code == 411


def test_the_client_configuration_is_restored():
    from huggingface_hub import constants

    endpoint, token = constants.ENDPOINT, os.environ.get("HF_TOKEN")
    with LoopbackHub(user="someone", token=None) as hub:
        assert constants.ENDPOINT == hub.url and constants.HF_HUB_DISABLE_XET
        assert HfApi().whoami(token="anything")["name"] == "someone"
    assert constants.ENDPOINT == endpoint and os.environ.get("HF_TOKEN") == token
