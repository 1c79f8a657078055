"""In-memory git-like storage behind `LoopbackHub`: repos, branches, commits, files, content-addressed blobs.

Errors are `StoreError(status, code, message)`; the HTTP layer turns them into responses with the Hub's
`X-Error-Code` header, which `huggingface_hub` maps to its typed errors (`RepositoryNotFoundError`, ...).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Commit", "FileEntry", "Repo", "Store", "StoreError"]

_GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
# What the Hub stores through LFS: known binary extensions, binary samples and files of 10 MB or more.
_LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".npy", ".npz", ".gguf", ".onnx",
                 ".msgpack", ".h5", ".model", ".png", ".jpg", ".zip", ".gz", ".xz", ".tar")
_LFS_MIN_SIZE = 10 * 1024 * 1024


class StoreError(Exception):
    """A refused request: HTTP status, Hub error code (or None) and message."""

    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class FileEntry:
    """A file in a commit: content key (sha256 of the content), size, git blob id, LFS or not."""

    sha256: str
    size: int
    lfs: bool

    @property
    def pointer(self) -> bytes:
        return f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n".encode()

    def blob_id(self, blobs: dict[str, bytes]) -> str:
        return git_blob_id(self.pointer if self.lfs else blobs[self.sha256])

    def etag(self, blobs: dict[str, bytes]) -> str:
        return self.sha256 if self.lfs else self.blob_id(blobs)


@dataclass(frozen=True)
class Commit:
    oid: str
    parent: str | None
    title: str
    message: str
    date: str
    files: dict[str, FileEntry]


@dataclass
class Repo:
    repo_id: str
    repo_type: str
    private: bool
    created: str
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit:
        oid = self.branches.get(revision) or (revision if revision in self.commits else None)
        if oid is None:
            raise StoreError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return self.commits[oid]

    def history(self, revision: str) -> list[Commit]:
        commit: Commit | None = self.resolve(revision)
        out = []
        while commit is not None:
            out.append(commit)
            commit = self.commits.get(commit.parent) if commit.parent else None
        return out


class Store:
    """Repos keyed by `(repo_type, repo_id)` and blobs keyed by sha256, guarded by one lock."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.lock = threading.RLock()
        self._counter = 0

    def repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            raise StoreError(404, "RepoNotFound", f"Repository not found: {repo_type}s/{repo_id}")
        return repo

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool) -> Repo:
        with self.lock:
            if (repo_type, repo_id) in self.repos:
                raise StoreError(409, None, f"You already created this {repo_type} repo")
            repo = Repo(repo_id, repo_type, private, _now())
            self.repos[(repo_type, repo_id)] = repo
            key = self.put_blob(_GITATTRIBUTES)
            files = {".gitattributes": FileEntry(key, len(_GITATTRIBUTES), False)}
            self._commit(repo, "main", None, "initial commit", "", files)
            return repo

    def delete_repo(self, repo_type: str, repo_id: str) -> None:
        with self.lock:
            self.repo(repo_type, repo_id)
            del self.repos[(repo_type, repo_id)]

    def put_blob(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        with self.lock:
            self.blobs[key] = data
        return key

    def create_branch(self, repo: Repo, branch: str, starting_point: str | None) -> None:
        with self.lock:
            if branch in repo.branches:
                raise StoreError(409, None, f"Branch {branch} already exists")
            repo.branches[branch] = repo.resolve(starting_point or "main").oid

    def delete_branch(self, repo: Repo, branch: str) -> None:
        with self.lock:
            if branch not in repo.branches or branch == "main":
                raise StoreError(404 if branch not in repo.branches else 403, None, f"Cannot delete branch {branch}")
            del repo.branches[branch]

    def commit(self, repo: Repo, branch: str, header: dict[str, Any], operations: list[dict[str, Any]]) -> Commit:
        """Apply `operations` (ndjson items after the header) as one commit, all or nothing."""
        with self.lock:
            head = repo.resolve(branch)
            if branch not in repo.branches:
                raise StoreError(400, None, f"Commits go to a branch; {branch!r} is not one of {sorted(repo.branches)}")
            parent = header.get("parentCommit")
            if parent is not None and parent != head.oid:
                raise StoreError(412, None, "A commit has happened since. Please refresh and try again.")
            files = dict(head.files)
            for operation in operations:
                self._apply(files, operation)
            return self._commit(repo, branch, head.oid, header.get("summary", ""), header.get("description", ""), files)

    def _apply(self, files: dict[str, FileEntry], operation: dict[str, Any]) -> None:
        key, value = operation.get("key"), operation.get("value") or {}
        path = value.get("path", "")
        if key == "file":
            data = base64.b64decode(value["content"])
            files[path] = FileEntry(self.put_blob(data), len(data), False)
        elif key == "lfsFile":
            if value.get("oid") not in self.blobs:
                raise StoreError(422, None, f"LFS object {value.get('oid')} of {path} was never uploaded")
            files[path] = FileEntry(value["oid"], len(self.blobs[value["oid"]]), True)
        elif key == "deletedFile":
            if files.pop(path, None) is None:
                raise StoreError(404, "EntryNotFound", f"A file with this name doesn't exist: {path}")
        elif key == "deletedFolder":
            prefix = path.rstrip("/") + "/"
            for name in [name for name in files if name.startswith(prefix)]:
                del files[name]
        else:
            raise StoreError(400, None, f"Unknown commit operation {key!r}")

    def _commit(self, repo: Repo, branch: str, parent: str | None, title: str, message: str,
                files: dict[str, FileEntry]) -> Commit:
        self._counter += 1
        seed = f"{repo.repo_id}\0{parent}\0{title}\0{self._counter}\0" + "\0".join(
            f"{p}:{e.sha256}" for p, e in sorted(files.items()))
        commit = Commit(hashlib.sha1(seed.encode()).hexdigest(), parent, title, message, _now(), files)
        repo.commits[commit.oid] = commit
        repo.branches[branch] = commit.oid
        return commit

    def upload_mode(self, path: str, size: int, sample: bytes) -> str:
        binary = b"\0" in sample
        return "lfs" if path.lower().endswith(_LFS_SUFFIXES) or size >= _LFS_MIN_SIZE or binary else "regular"
