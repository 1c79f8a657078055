"""JSON views of `LoopbackHub` storage, as the Hub API returns them: repo info, tree entries, commits."""

from __future__ import annotations

import hashlib
from typing import Any

from ._store import Commit, Repo, StoreError
from ._yaml import card_metadata

__all__ = ["commit_json", "repo_info", "tree"]


def repo_info(blobs: dict[str, bytes], repo: Repo, commit: Commit) -> dict[str, Any]:
    readme = commit.files.get("README.md")
    card = card_metadata(blobs[readme.sha256].decode("utf-8", "replace")) if readme else {}
    siblings = [{"rfilename": p, "size": e.size, "blobId": e.blob_id(blobs),
                 **({"lfs": {"sha256": e.sha256, "size": e.size, "pointerSize": len(e.pointer)}} if e.lfs else {})}
                for p, e in sorted(commit.files.items())]
    return {"id": repo.repo_id, "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0], "sha": commit.oid,
            "private": repo.private, "disabled": False, "gated": False, "lastModified": commit.date,
            "createdAt": repo.created, "siblings": siblings, "cardData": card or None,
            "tags": card.get("tags") or [], "library_name": card.get("library_name"),
            "pipeline_tag": card.get("pipeline_tag")}


def tree(blobs: dict[str, bytes], commit: Commit, path: str, recursive: bool, *,
         exact: bool = False) -> list[dict[str, Any]]:
    """Entries under folder `path` (one level or all), or, with `exact`, the entry at `path` itself."""
    path = path.strip("/")
    if exact or (path and path in commit.files):
        entry = commit.files.get(path)
        folder = any(p.startswith(path + "/") for p in commit.files)
        return [file_json(path, entry, blobs)] if entry else ([folder_json(path)] if folder else [])
    prefix = path + "/" if path else ""
    below = sorted(p[len(prefix):] for p in commit.files if p.startswith(prefix))
    if path and not below:
        raise StoreError(404, "EntryNotFound", f"{path} does not exist on this revision")
    folders = sorted({"/".join(r.split("/")[:i]) for r in below for i in range(1, r.count("/") + 1)})
    if not recursive:
        folders = [f for f in folders if "/" not in f]
        below = [r for r in below if "/" not in r]
    return ([folder_json(prefix + f) for f in folders]
            + [file_json(prefix + r, commit.files[prefix + r], blobs) for r in below])


def file_json(path: str, entry: Any, blobs: dict[str, bytes]) -> dict[str, Any]:
    out = {"type": "file", "path": path, "size": entry.size, "oid": entry.blob_id(blobs)}
    if entry.lfs:
        out["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": len(entry.pointer)}
    return out


def folder_json(path: str) -> dict[str, Any]:
    return {"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()}


def commit_json(commit: Commit, user: str) -> dict[str, Any]:
    return {"id": commit.oid, "title": commit.title, "message": commit.message, "date": commit.date,
            "authors": [{"user": user}]}
