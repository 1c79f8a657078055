"""`LoopbackHub`: a Hub-compatible HTTP server on 127.0.0.1 for tests and offline demos.

The real `huggingface_hub` client and `transformers` work against it: `create_repo`, `create_commit` /
`upload_folder` (LFS batch + PUT, ndjson commits with deletions), `create_branch`, `repo_info`, `list_repo_tree`,
`list_repo_commits`, `hf_hub_download`, `snapshot_download(allow_patterns=...)`, `ModelCard.load`,
`from_pretrained`, `push_to_hub`. Repos live in memory; downloads go to a private cache folder.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import tempfile
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from ._handler import Handler
from ._store import Commit, Store

__all__ = ["LoopbackHub"]

_HOLD_TIMEOUT = 60.0


class LoopbackHub:
    """A Hub double on `http://127.0.0.1:<random port>`, in memory.

    Args:
        user (`str`, defaults to `"loopback-user"`): the account `whoami` reports; repo ids without a namespace
            are created under it.
        token (`str | None`, defaults to `"hf_loopback_token"`): the token writes (and reads of private repos)
            must send; `None` accepts any request.

    Example:
        ```python
        >>> from vocabshift_testing import LoopbackHub
        >>> with LoopbackHub() as hub:          # starts the server and points huggingface_hub at it
        ...     vocabshift.push_to_hub("out/model", "loopback-user/model")
        ...     model = AutoModelForCausalLM.from_pretrained("loopback-user/model")
        ```
    """

    def __init__(self, *, user: str = "loopback-user", token: str | None = "hf_loopback_token") -> None:
        self.user, self.token = user, token
        self.store = Store()
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._holds: dict[str, tuple[threading.Event, threading.Event]] = {}
        self._saved: dict[str, Any] | None = None
        self.cache_dir: str | None = None
        self._secret = secrets.token_bytes(16)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("LoopbackHub is not running: call start() or use it as a context manager.")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        """Start serving on a random free port of 127.0.0.1 in a daemon thread; returns the endpoint URL."""
        if self._server is None:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self._server.daemon_threads = True
            self._server.hub = self  # type: ignore[attr-defined]
            self._thread = threading.Thread(target=self._server.serve_forever, name="LoopbackHub", daemon=True)
            self._thread.start()
            self.cache_dir = tempfile.mkdtemp(prefix="loopback-hub-cache-")
        return self.url

    def stop(self) -> None:
        """Stop the server, release held requests and delete the download cache."""
        for _, release in self._holds.values():
            release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.cache_dir is not None:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            self.cache_dir = None

    def environ(self) -> dict[str, str]:
        """Environment variables that point a subprocess's huggingface_hub at this server."""
        env = {"HF_ENDPOINT": self.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
               "HF_HUB_CACHE": str(self.cache_dir), "HF_HUB_DISABLE_TELEMETRY": "1"}
        if self.token is not None:
            env["HF_TOKEN"] = self.token
        return env

    def activate(self) -> None:
        """Point this process's huggingface_hub and transformers at the server (undone by `deactivate`).

        Sets the endpoint, turns off Xet (the server speaks plain LFS) and offline mode, uses a private download
        cache and exports the token as `HF_TOKEN`.
        """
        from huggingface_hub import constants

        if self._saved is not None:
            return
        env = self.environ()
        values = {"ENDPOINT": self.url,
                  "HUGGINGFACE_CO_URL_TEMPLATE": self.url + "/{repo_id}/resolve/{revision}/{filename}",
                  "HF_HUB_DISABLE_XET": True, "HF_HUB_OFFLINE": False, "HF_HUB_CACHE": env["HF_HUB_CACHE"]}
        self._saved = {"constants": {name: getattr(constants, name) for name in values},
                       "environ": {name: os.environ.get(name) for name in env}}
        for name, value in values.items():
            setattr(constants, name, value)
        os.environ.update(env)
        _reset_transformers_api()

    def deactivate(self) -> None:
        """Undo `activate`."""
        from huggingface_hub import constants

        if self._saved is None:
            return
        for name, value in self._saved["constants"].items():
            setattr(constants, name, value)
        for name, value in self._saved["environ"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved = None
        _reset_transformers_api()

    def __enter__(self) -> LoopbackHub:
        self.start()
        self.activate()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.deactivate()
        self.stop()

    # -- inspection, for tests ----------------------------------------------------------------------------------------

    def repo_url(self, repo_type: str, repo_id: str) -> str:
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        return f"{self.url}/{prefix}{repo_id}"

    def files(self, repo_id: str, *, revision: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        """Path -> content of every file of `repo_id` at `revision`."""
        with self.store.lock:
            commit = self.store.repo(repo_type, repo_id).resolve(revision)
            return {path: self.store.blobs[entry.sha256] for path, entry in sorted(commit.files.items())}

    def commits(self, repo_id: str, *, revision: str = "main", repo_type: str = "model") -> list[Commit]:
        """Commits of `revision`, newest first (the first one is the repo's initial commit)."""
        with self.store.lock:
            return self.store.repo(repo_type, repo_id).history(revision)

    def hold(self, stage: str) -> threading.Event:
        """Make the next requests of `stage` (`"lfs-upload"` or `"commit"`) wait until `release(stage)`.

        Returns an event set when a request reaches the stage, so that a test can kill the client right there.
        """
        self._holds[stage] = (threading.Event(), threading.Event())
        return self._holds[stage][0]

    def release(self, stage: str) -> None:
        """Let requests held at `stage` go on."""
        hold = self._holds.pop(stage, None)
        if hold is not None:
            hold[1].set()

    def _checkpoint(self, stage: str) -> None:
        hold = self._holds.get(stage)
        if hold is not None:
            hold[0].set()
            hold[1].wait(_HOLD_TIMEOUT)

    def _sign(self, oid: str) -> str:
        return hmac.new(self._secret, oid.encode(), hashlib.sha256).hexdigest()

    def _log(self, method: str, path: str) -> None:
        self.requests.append((method, path))


def _reset_transformers_api() -> None:
    """transformers caches one HfApi (with its endpoint) per process; drop it so the next call sees the new one."""
    try:
        import transformers.utils.hub as transformers_hub
    except ImportError:  # transformers is optional for the server itself
        return
    transformers_hub._hf_api = None
