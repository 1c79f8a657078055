"""HTTP request handler of `LoopbackHub`: the Hub routes that `huggingface_hub` and `transformers` call.

A protocol double, not a reimplementation: no pull requests, no pagination, no Xet, no gating. Routes:
`/api/whoami-v2`, `/api/repos/{create,delete}`, `/api/validate-yaml`, and under `/api/{type}s/{ns}/{name}`: repo
info (`[/revision/{rev}]`), `/tree/{rev}[/{path}]`, `/paths-info/{rev}`, `/preupload/{rev}`, `/commit/{rev}`,
`/branch/{name}`, `/refs`, `/commits/{rev}`; LFS `/{ns}/{name}.git/info/lfs/objects/batch` and `PUT /_lfs/{oid}`;
files `HEAD|GET /{ns}/{name}/resolve/{rev}/{path}` (with `Range`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ._store import Repo, StoreError
from ._views import commit_json, repo_info, tree
from ._yaml import validate_card

__all__ = ["Handler"]

_API_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_URL_PREFIXES = {"datasets": "dataset", "spaces": "space"}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub client expects

    def log_message(self, format: str, *args: Any) -> None:  # the library never prints
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing ---------------------------------------------------------------------------------------------------

    @property
    def hub(self) -> Any:
        return self.server.hub  # type: ignore[attr-defined]

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        self._body: bytes | None = None  # one handler serves every request of a keep-alive connection
        self.query = parse_qs(split.query)
        parts = [unquote(p) for p in split.path.split("/")[1:]]
        self.hub._log(method, split.path)
        try:
            try:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    self.close_connection = True  # the unread chunks would corrupt the next request
                    raise StoreError(411, None, "LoopbackHub needs a Content-Length (no chunked bodies)")
                self._route(method, parts)
            except StoreError as error:
                self._read_body()
                self._error(error.status, error.code, error.message)
            except (ValueError, KeyError, TypeError) as error:  # a malformed request
                self._read_body()
                self._error(400, None, f"Malformed request: {type(error).__name__}: {error}")
        except (ConnectionError, TimeoutError):  # the client went away (killed mid-request, in the tests)
            self.close_connection = True

    def _route(self, method: str, parts: list[str]) -> None:
        if parts[:1] == ["api"]:
            return self._api(method, parts[1:])
        if parts[:1] == ["_lfs"] and method == "PUT" and len(parts) == 2:
            return self._lfs_put(parts[1])
        repo_type = _URL_PREFIXES.get(parts[0], "model") if parts else "model"
        rest = parts[1:] if parts and parts[0] in _URL_PREFIXES else parts
        if len(rest) == 6 and rest[1].endswith(".git") and rest[2:] == ["info", "lfs", "objects", "batch"]:
            return self._lfs_batch(repo_type, f"{rest[0]}/{rest[1][:-4]}")
        if len(rest) >= 5 and rest[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve(method, self._repo(repo_type, f"{rest[0]}/{rest[1]}"), rest[3], "/".join(rest[4:]))
        raise StoreError(404, None, f"No route for {method} {self.path}")

    def _read_body(self) -> bytes:
        """The request body (read once); huggingface_hub always sends Content-Length."""
        if self._body is None:
            length = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(length) if length else b""
            if len(self._body) < length:
                raise ConnectionError("request body cut short")
        return self._body

    def _json_body(self) -> Any:
        body = self._read_body()
        return json.loads(body) if body else {}

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any, status: int = 200) -> None:
        self._send(status, json.dumps(data).encode())

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _token(self) -> str | None:
        value = self.headers.get("Authorization", "")
        return value[7:] if value.startswith("Bearer ") else None

    def _authorized(self) -> bool:
        return self.hub.token is None or self._token() == self.hub.token

    def _require_write(self) -> None:
        if not self._authorized():
            raise StoreError(401, None, "Invalid credentials in Authorization header")

    def _repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.hub.store.repo(repo_type, repo_id)
        if repo.private and not self._authorized():
            raise StoreError(404, "RepoNotFound", f"Repository not found: {repo_id}")
        return repo

    # -- /api -------------------------------------------------------------------------------------------------------

    def _api(self, method: str, parts: list[str]) -> None:
        if parts == ["whoami-v2"] and method == "GET":
            self._require_write()
            return self._json({"type": "user", "name": self.hub.user, "fullname": self.hub.user, "orgs": [],
                               "auth": {"type": "access_token", "accessToken": {"role": "write"}}})
        if parts == ["repos", "create"] and method == "POST":
            return self._create_repo(self._json_body())
        if parts == ["repos", "delete"] and method == "DELETE":
            body = self._json_body()
            self._require_write()
            self.hub.store.delete_repo(body.get("type") or "model", _repo_id(body, self.hub.user))
            return self._json({})
        if parts == ["validate-yaml"] and method == "POST":
            errors, warnings = validate_card(self._json_body().get("content", ""))
            return self._json({"errors": errors, "warnings": warnings}, 400 if errors else 200)
        if len(parts) >= 3 and parts[0] in _API_TYPES:
            repo = self._repo(_API_TYPES[parts[0]], f"{parts[1]}/{parts[2]}")
            return self._repo_api(method, repo, parts[3:])
        raise StoreError(404, None, f"No route for {method} {self.path}")

    def _create_repo(self, body: dict[str, Any]) -> None:
        self._require_write()
        repo_type = body.get("type") or "model"
        repo_id = _repo_id(body, self.hub.user)
        private = body.get("visibility", "private" if body.get("private") else "public") == "private"
        try:
            self.hub.store.create_repo(repo_type, repo_id, private=private)
        except StoreError as error:
            self._read_body()
            body = {"error": error.message, "url": self.hub.repo_url(repo_type, repo_id)}
            return self._send(409, json.dumps(body).encode())
        self._json({"url": self.hub.repo_url(repo_type, repo_id), "name": repo_id})

    def _repo_api(self, method: str, repo: Repo, rest: list[str]) -> None:
        head, args, blobs = (rest[0] if rest else ""), rest[1:], self.hub.store.blobs
        if method == "GET" and (not rest or head == "revision"):
            return self._json(repo_info(blobs, repo, repo.resolve(args[0] if args else "main")))
        if method == "GET" and head == "tree" and args:
            return self._json(tree(blobs, repo.resolve(args[0]), "/".join(args[1:]), self._flag("recursive")))
        if method == "POST" and head == "paths-info" and args:
            paths, commit = parse_qs(self._read_body().decode()).get("paths", []), repo.resolve(args[0])
            return self._json([entry for path in paths for entry in tree(blobs, commit, path, False, exact=True)])
        if method == "POST" and head == "preupload" and args:
            return self._preupload(repo, args[0], self._json_body())
        if method == "POST" and head == "commit" and args:
            return self._commit(repo, args[0])
        if head == "branch" and args and method in ("POST", "DELETE"):
            self._require_write()
            body = self._json_body()
            if method == "POST":
                self.hub.store.create_branch(repo, args[0], body.get("startingPoint"))
            else:
                self.hub.store.delete_branch(repo, args[0])
            return self._json({})
        if method == "GET" and head == "refs":
            branches = [{"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid}
                        for name, oid in sorted(repo.branches.items())]
            return self._json({"branches": branches, "converts": [], "tags": [], "pullRequests": []})
        if method == "GET" and head == "commits" and args:
            return self._json([commit_json(c, self.hub.user) for c in repo.history(args[0])])
        raise StoreError(404, None, f"No route for {method} {self.path}")

    def _flag(self, name: str) -> bool:
        return self.query.get(name, ["false"])[0].lower() in ("1", "true")

    def _preupload(self, repo: Repo, revision: str, body: dict[str, Any]) -> None:
        files = repo.resolve(revision).files if revision in repo.branches else {}
        out = []
        for item in body.get("files", []):
            mode = self.hub.store.upload_mode(item["path"], item["size"], base64.b64decode(item.get("sample", "")))
            remote = files.get(item["path"])
            oid = None if remote is None else (remote.sha256 if remote.lfs else remote.blob_id(self.hub.store.blobs))
            out.append({"path": item["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        self._json({"files": out})

    def _commit(self, repo: Repo, revision: str) -> None:
        self._require_write()
        self.hub._checkpoint("commit")
        lines = [json.loads(line) for line in self._read_body().splitlines() if line.strip()]
        if self._flag("create_pr"):
            raise StoreError(400, None, "LoopbackHub has no pull requests")
        if not lines or lines[0].get("key") != "header":
            raise StoreError(400, None, "The commit payload must start with a header line")
        commit = self.hub.store.commit(repo, revision, lines[0]["value"], lines[1:])
        self._json({"commitOid": commit.oid, "commitUrl": f"{self.hub.repo_url(repo.repo_type, repo.repo_id)}/commit/"
                    f"{commit.oid}", "success": True, "pullRequestUrl": None})

    # -- LFS and files ----------------------------------------------------------------------------------------------

    def _lfs_batch(self, repo_type: str, repo_id: str) -> None:
        self._require_write()
        self._repo(repo_type, repo_id)
        objects = []
        for item in self._json_body().get("objects", []):
            entry = {"oid": item["oid"], "size": item["size"]}
            if item["oid"] not in self.hub.store.blobs:
                href = f"{self.hub.url}/_lfs/{item['oid']}?signature={self.hub._sign(item['oid'])}"
                entry["actions"] = {"upload": {"href": href}}
            objects.append(entry)
        self._json({"transfer": "basic", "objects": objects})

    def _lfs_put(self, oid: str) -> None:
        """Like an S3 pre-signed URL: no Authorization header, a signature from the batch response instead."""
        if self.query.get("signature", [""])[0] != self.hub._sign(oid):
            raise StoreError(403, None, "Invalid or missing upload signature")
        self.hub._checkpoint("lfs-upload")
        data = self._read_body()
        if hashlib.sha256(data).hexdigest() != oid:
            raise StoreError(400, None, f"Uploaded content does not match its sha256 {oid}")
        self.hub.store.put_blob(data)
        self._send(200)

    def _resolve(self, method: str, repo: Repo, revision: str, path: str) -> None:
        commit = repo.resolve(revision)
        entry = commit.files.get(path)
        if entry is None:
            raise StoreError(404, "EntryNotFound", f"{path} does not exist on {revision}")
        blobs = self.hub.store.blobs
        data = blobs[entry.sha256]
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry.etag(blobs)}"', "Accept-Ranges": "bytes"}
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": str(entry.size)})
        match = _RANGE.match(self.headers.get("Range", ""))
        if match and data:
            start, stop = _byte_range(match, len(data))
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
            return self._send(206, data[start:stop], headers, "application/octet-stream")
        self._send(200, data, headers, "application/octet-stream")


def _byte_range(match: re.Match[str], size: int) -> tuple[int, int]:
    first, last = match.group(1), match.group(2)
    if not first:  # suffix range: the last N bytes
        return max(0, size - int(last or 0)), size
    start = int(first)
    if start >= size:
        raise StoreError(416, None, f"Range starts at {start} but the file has {size} bytes")
    return start, min(size, int(last) + 1) if last else size


def _repo_id(body: dict[str, Any], user: str) -> str:
    return f"{body.get('organization') or user}/{body['name']}"
