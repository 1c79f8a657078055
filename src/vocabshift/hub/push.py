"""`push_to_hub`: publish a model folder in one commit, safetensors only, stale shards deleted, card generated."""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, get_token

from ..arguments import check_flag, check_path, check_repo_id, check_token
from ..errors import InvalidArgumentError, ModelFolderError, OutputExistsError, UnsafeWeightsError
from ..headers import adapter_fix, check_links, read_config
from ..inspection import inspect_folder
from ..record import find_record
from ..serving import SENTENCEPIECE_PROBLEM
from ..shard_index import check_folder_files
from ..vocab.spm_file import FILE as SENTENCEPIECE_FILE
from ..vocab.spm_file import sentencepiece_mismatch
from .card import is_unedited_card, model_card, stale_card

__all__ = ["check_revision", "push_to_hub"]

logger = logging.getLogger(__name__)

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json")
# What git refuses in a branch name (git check-ref-format): "..", "@{", "//", control characters, space ~ ^ : ? * [ \,
# a leading "-" or "/", a trailing "/", "." or ".lock".
_BAD_BRANCH = re.compile(r"\.\.|@\{|//|[\x00-\x20\x7f~^:?*\[\\]|^[-/]|/$|\.$|\.lock(/|$)|(^|/)\.|^@$|^HEAD$")


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Upload a saved model folder to a Hub repo in one commit.

    The repo is created if needed. Safetensors shards and indexes in the repo that the folder no longer has (a
    re-save with another shard count) are deleted in the same commit, which is based on the revision's current head
    so that a concurrent push makes it fail rather than mix files. When the folder has no `README.md`, a card is
    generated from the ExtensionRecord (`vocabshift.model_card`) and committed, unless the repo has a README.md
    other than an unedited card vocabshift generated (the user's text: refused); the folder is not modified. Hidden
    files and folders are skipped, and so is a tokenizer.model that disagrees with tokenizer.json (with a warning;
    the repo's own tokenizer.model is deleted when none is uploaded beside a tokenizer.json). The token is sent to
    the Hub only, never logged.

    Args:
        folder (`str | os.PathLike`): a folder written by `save_pretrained` (config.json and `*.safetensors`).
        repo_id (`str`): `namespace/name` of the model repo.
        private (`bool`, defaults to `False`): visibility of a repo created by this call; an existing public repo
            is refused (nothing is uploaded to a repo the caller believes private).
        token (`str`, *optional*): a Hub token with write access; defaults to `HF_TOKEN` or the stored login.
        revision (`str`, *optional*): the branch to commit to, created from `main` if missing; defaults to `main`.
        commit_message (`str`, *optional*): defaults to `"Upload <folder name> with vocabshift"`.

    Returns:
        `str`: the URL of the commit.

    Raises (before any request unless said otherwise):
        `InvalidArgumentError`: `repo_id` is not a Hub repo id, `revision` not a branch name, no token is set, the
            token holds what an HTTP header cannot carry (a line break, a space, a non-ASCII letter), or an argument
            of the wrong type (`InvalidArgumentTypeError`); after the repo is looked up, `private=True`
            for an existing public repo.
        `ModelFolderError`: the folder has no `config.json` (or one that is not JSON) or no `*.safetensors` weights.
        `UnsafeWeightsError`: the folder holds pickle files (`.bin`, `.pt`, `.pth`, `.ckpt`, `.pkl`).
        `ShardError`: a safetensors file is truncated or corrupted, or an index names a missing shard.
        `ModelFolderError`: a problem `inspect_folder` reports (e.g. no embedding matrix, rows that do not match
            config.json or the tokenizer, special token ids beyond the rows), or a `README.md` that vocabshift
            generated from an earlier state of the record (a step added since would not be published).
        `RecordError`: no `README.md` and no vocabshift record to generate one from.
        `OutputExistsError` (after the repo is looked up): no `README.md`, and the repo has one that vocabshift did
            not generate or that was edited since (each generated card carries a digest of its text).
        `huggingface_hub.errors.HfHubHTTPError`: the Hub refused a request (e.g. no write access); its base class
            `huggingface_hub.errors.HTTPError` alone: the Hub could not be reached.

    Example:
        ```python
        >>> vocabshift.push_to_hub("out/smollm2-ru", "me/smollm2-ru", private=True)
        'https://huggingface.co/me/smollm2-ru/commit/...'
        ```
    """
    _check_arguments(folder, repo_id, private, token, revision, commit_message)
    folder = Path(folder)
    files = _without_stale_sentencepiece(folder, _files(folder))
    _check_folder(folder, files)
    check_folder_files(folder, files)
    _check_consistent(folder, files)
    _check_card_current(folder, files)
    card = None if "README.md" in files else str(model_card(folder, repo_id=repo_id)).encode("utf-8")
    if token is None:
        _check_stored_token()
    api = HfApi(token=token)
    created = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if card is not None and created != repo_id:  # the Hub added the namespace: name it in the usage code
        card = str(model_card(folder, repo_id=created)).encode("utf-8")
    repo_id = created
    if revision is not None:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    head = api.repo_info(repo_id, revision=revision, files_metadata=False)
    if private and head.private is False:  # create_repo keeps an existing repo's visibility
        raise InvalidArgumentError(f"private=True, but {repo_id} exists and is public: nothing was uploaded. Make it "
                                   "private first (on its settings page, or HfApi().update_repo_settings(repo_id, "
                                   "private=True)), or push to a new repo.")
    remote = [sibling.rfilename for sibling in getattr(head, "siblings", None) or []]
    if card is not None and "README.md" in remote:
        _check_card_replaceable(api, repo_id, head.sha, folder)
    info = api.create_commit(repo_id, operations=_operations(folder, files, card, remote), revision=revision,
                             parent_commit=head.sha,
                             commit_message=commit_message or f"Upload {folder.resolve().name} with vocabshift")
    return info.commit_url


def _check_card_replaceable(api: HfApi, repo_id: str, commit: str | None, folder: Path) -> None:
    """Refuse to replace the repo's README.md by a generated card unless it is one vocabshift generated, unedited:
    a card written or edited on the Hub is the user's work (nothing is uploaded)."""
    path = api.hf_hub_download(repo_id, "README.md", revision=commit)
    if not is_unedited_card(Path(path).read_text(encoding="utf-8", errors="replace")):
        raise OutputExistsError(
            f"{repo_id} has a README.md that vocabshift did not generate, or that was edited since, and "
            f"folder={str(folder)!r} has none: pushing would replace it by a generated card. Nothing was uploaded. "
            "Put the card you want into the folder as README.md (download the repo's and bring it up to date, or "
            f"write a new one with `vocabshift card {folder}` and add your edits), then push again."
        )


def _check_card_current(folder: Path, files: list[str]) -> None:
    """Refuse a README.md that vocabshift generated from an earlier state of the record (`vocabshift evaluate
    --add-to-record` rewrites config.json in place): published, it would leave out what was added since."""
    record = find_record(read_config(folder)) if "README.md" in files else None
    if record is not None and stale_card((folder / "README.md").read_text(encoding="utf-8", errors="replace"),
                                         record):
        raise ModelFolderError(f"{str(folder / 'README.md')!r} was generated from an earlier state of the record in "
                               "config.json (a step was added since, e.g. an evaluation) and would publish without "
                               f"it: generate it again (`vocabshift card {folder}` with the options you gave, or "
                               "vocabshift.model_card), or delete it to have push generate one, then push again.")


def _operations(folder: Path, files: list[str], card: bytes | None,
                remote: list[str]) -> list[CommitOperationAdd | CommitOperationDelete]:
    """Add every file (and the generated card); delete the repo's safetensors files the folder no longer has, and
    its tokenizer.model when the folder has a tokenizer.json but none (it would disagree with the new one)."""
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(folder / path)) for path in files]
    if card is not None:
        operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card))
    stale = [*_WEIGHT_PATTERNS, *([SENTENCEPIECE_FILE] if "tokenizer.json" in files else [])]
    return operations + [CommitOperationDelete(path_in_repo=path) for path in remote
                         if path not in files and any(fnmatch.fnmatch(path, p) for p in stale)]


def _without_stale_sentencepiece(folder: Path, files: list[str]) -> list[str]:
    """`files` without a tokenizer.model that disagrees with the tokenizer.json beside it (said with a warning)."""
    reason = sentencepiece_mismatch(folder) if SENTENCEPIECE_FILE in files else None
    if reason is None:
        return files
    logger.warning("%s is left out of the upload: it disagrees with tokenizer.json (%s), and sentencepiece, slow "
                   "tokenizers and llama.cpp's converter would read the wrong vocabulary from it. Save the folder "
                   "with vocabshift.save_pretrained_atomic to write one in step.", folder / SENTENCEPIECE_FILE, reason)
    return [path for path in files if path != SENTENCEPIECE_FILE]


def _files(folder: Path) -> list[str]:
    """Relative POSIX paths of the files to upload, hidden files and folders left out, sorted."""
    if not folder.is_dir():
        raise ModelFolderError(f"folder={str(folder)!r} is not a folder: pass the output folder of save_pretrained.")
    check_links(folder, f"folder={str(folder)!r}", deep=True)
    paths = (p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    return sorted(p.as_posix() for p in paths if not any(part.startswith(".") for part in p.parts))


def _check_folder(folder: Path, files: list[str]) -> None:
    pickles = [path for path in files if path.lower().endswith(_PICKLE_SUFFIXES)]
    if pickles:
        raise UnsafeWeightsError(
            f"{str(folder)!r} holds pickle files {pickles}: vocabshift publishes safetensors only, because loading "
            "pickles can run arbitrary code. Re-save the model with save_pretrained (transformers 5 writes "
            "safetensors) and move the pickle files out of the folder."
        )
    if "config.json" not in files or not any(fnmatch.fnmatch(path, "*.safetensors") for path in files):
        raise ModelFolderError(
            f"{str(folder)!r} lacks config.json or *.safetensors weights: "
            f"{adapter_fix(folder) or 'pass a folder written by save_pretrained.'}"
        )
    read_config(folder)


def _check_consistent(folder: Path, files: list[str]) -> None:
    """Refuse what `inspect_folder` finds wrong (rows against config and tokenizer, a missing head, special ids):
    published, it would fail to load, or serve other tokens than it was trained on. A stale tokenizer.model is not
    refused: it is left out of the upload (`_without_stale_sentencepiece`)."""
    problems = [problem for problem in inspect_folder(folder).problems
                if SENTENCEPIECE_FILE in files or not problem.startswith(SENTENCEPIECE_PROBLEM)]
    if problems:
        raise ModelFolderError(f"{str(folder)!r} would publish a model that does not load or serve as it should: "
                               f"{'; '.join(problems)}. Fix the folder (`vocabshift inspect {folder}` gives the "
                               "whole report), then push again.")


def _check_stored_token() -> None:
    """The token huggingface_hub will send: set, and one an HTTP header carries (named by where it comes from)."""
    stored = get_token()
    if stored is None:
        raise InvalidArgumentError("push_to_hub writes to the Hub and needs a token with write access, and none is "
                                   "set: set HF_TOKEN or run `hf auth login` (or pass token=... in Python).")
    source = next((name for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN") if os.environ.get(name)),
                  "the token of `hf auth login`")
    check_token(stored, name=source)


def _check_arguments(folder: Any, repo_id: Any, private: Any, token: Any, revision: Any, commit_message: Any) -> None:
    check_path(folder, name="folder")
    check_repo_id(repo_id)
    check_flag(private, name="private")
    check_token(token)
    if commit_message is not None and (not isinstance(commit_message, str) or not commit_message.strip()):
        raise InvalidArgumentError(f"commit_message={commit_message!r} is invalid: pass a non-empty string or None.")
    if revision is not None:
        check_revision(revision)


def check_revision(revision: Any, *, argument: str = "revision") -> str:
    """`revision` itself if git accepts it as a branch name (`git check-ref-format`), checked without a request.

    Raises:
        `InvalidArgumentError`
    """
    if not isinstance(revision, str) or not revision or _BAD_BRANCH.search(revision):
        raise InvalidArgumentError(f"{argument}={revision!r} is not a branch name (git refuses empty names, spaces, "
                                   "'..', '~^:?*[\\', a leading '-' or '/', a part that starts with '.' or ends "
                                   "with '.lock', and 'HEAD'): pass e.g. 'main' or 'dev'.")
    return revision
