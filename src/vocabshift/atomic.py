"""Atomic outputs: write into a temporary sibling (folder or file), then swap it into place in one step.

A failure or a kill (even SIGKILL) at any moment leaves the previous output as it was: the swap is one
`renameat2(RENAME_EXCHANGE)` on Linux, or a plain rename when there was no previous output. Elsewhere (or on a
filesystem without exchange) the old folder is renamed aside first; a kill between the two renames leaves it
aside, and the next save to the same folder puts it back before anything else.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import glob
import logging
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from ._disk import raise_if_out_of_room
from .arguments import check_output_path
from .errors import ModelFolderError

__all__ = ["LEGACY_TOKENIZER_FILES", "LICENSE_PREFIXES", "PROCESSOR_FILES", "TOKENIZER_FILES", "atomic_file",
           "atomic_folder", "atomic_write_text", "check_replaceable"]

logger = logging.getLogger(__name__)

_NAME_BYTES = 180  # of the output's name in its siblings': with the rest, within the 255 bytes a name may have
# What the folder of a saved tokenizer, and of a saved model, holds: what save_pretrained writes for a causal LM and
# its tokenizer, and what vocabshift adds (the card, the loss curve, the license files propagate copies). An output
# folder is replaced only when it holds nothing else: never a project, a Trainer's output_dir with its checkpoints or
# a clone of a Hub repo, whose other files the swap would delete (a propagated multimodal model's processor configs
# too: a saved model does not hold them).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json")
LEGACY_TOKENIZER_FILES = ("tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model")
LICENSE_PREFIXES = ("LICENSE", "NOTICE", "USE_POLICY")
# a multimodal model's image and video preprocessing (AutoProcessor reads them), which propagate copies from instruct
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
_TOKENIZER_ENTRIES = (*TOKENIZER_FILES, *LEGACY_TOKENIZER_FILES, "additional_chat_templates/")
_MODEL_ENTRIES = ("config.json", "generation_config.json", "model.safetensors", "model-*-of-*.safetensors",
                  "model.safetensors.index.json", "README.md", "cpt_loss.png",
                  *(f"{prefix}*" for prefix in LICENSE_PREFIXES), *_TOKENIZER_ENTRIES)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@contextlib.contextmanager
def atomic_folder(folder: str | os.PathLike, *, holds: str = "model") -> Iterator[Path]:
    """Yield a temporary sibling of `folder` to write into; on success it replaces `folder` as a whole.

    On an exception the temporary folder is deleted and `folder` is untouched. Temporary folders left by killed
    processes are removed by the next call for the same `folder`.

    Raises:
        `ModelFolderError`: `folder` cannot be replaced (`check_replaceable`: `holds` is what it is written with).
        `InvalidArgumentError`: a file stands where one of its parent folders must be.
        `OutputWriteError` (while writing): the disk is full, a quota is exceeded or a file grew too large.
    """
    target = check_replaceable(folder, holds=holds)
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(target)
    temporary = _sibling_folder(target, "tmp")
    try:
        yield temporary
        _as_the_umask_gives(temporary)
        _swap_into_place(temporary, target)
    except BaseException as error:
        shutil.rmtree(temporary, ignore_errors=True)
        raise_if_out_of_room(error, target)
        raise


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of the file `path` to write, named for this process (two writers of one file never
    share it); on success it replaces `path` in one rename, on an exception it is deleted and `path` is untouched
    (`OutputWriteError` where it ran out of room). Siblings left by killed processes go with the next call."""
    target = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)  # write where a link points
    _remove_leftovers(target)
    partial = _sibling(target, "part")
    try:
        yield partial
        os.replace(partial, target)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        raise_if_out_of_room(error, target)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically (`atomic_file`)."""
    with atomic_file(path) as partial:
        partial.write_text(text, encoding="utf-8")
    return Path(path)


def check_replaceable(folder: str | os.PathLike, *, name: str = "folder", holds: str = "model") -> Path:
    """`folder` as an absolute Path, if `atomic_folder` may replace it: a new or empty folder, or one that holds a
    saved `holds` ("model" or "tokenizer") and nothing else (`name`: the argument's name in messages).

    Raises:
        `ModelFolderError`: a file; a mount point; a non-empty folder without `config.json` (for a model), with
            files a saved `holds` does not have, or write-protected. `InvalidArgumentError`: a file stands where one
            of its parent folders must be.
    """
    target = check_output_path(folder, name=name).absolute()  # "." has no name to build a sibling's from
    if Path.cwd().resolve().is_relative_to(target.resolve()):
        raise ModelFolderError(
            f"{name}={str(folder)!r} is the current folder or holds it, and vocabshift replaces output folders as a "
            "whole: the shell would be left in a deleted folder. Pass a new folder inside it, e.g. 'out'."
        )
    if target.exists() and not target.is_dir():
        raise ModelFolderError(f"{name}={str(folder)!r} is a file: pass a folder path for the output.")
    if os.path.ismount(target):  # renamed into place and aside: the kernel refuses both (EBUSY, EXDEV)
        raise ModelFolderError(
            f"{name}={str(folder)!r} is a mount point (a container volume, a mounted disk), and vocabshift writes the "
            "output beside it, then renames it into place, which cannot replace a mount point. Pass a folder inside "
            f"it, e.g. {str(Path(folder) / 'model')!r}."
        )
    if not target.is_dir() or not any(target.iterdir()):
        return target
    if holds == "model" and not (target / "config.json").is_file():
        raise ModelFolderError(
            f"{str(folder)!r} is a non-empty folder that holds no saved model (no config.json); vocabshift replaces "
            "output folders as a whole, so it refuses to overwrite it. Pass a new or empty folder."
        )
    others = _others(target, _MODEL_ENTRIES if holds == "model" else _TOKENIZER_ENTRIES)
    if others:
        more = f" ({len(others)} in all)" if len(others) > 3 else ""
        raise ModelFolderError(
            f"{str(folder)!r} holds {', '.join(map(repr, others[:3]))}{more}, which a saved {holds} does not have: "
            "vocabshift replaces output folders as a whole and would delete them. Pass a new or empty folder, or move "
            "them out of this one."
        )
    # walked last, over a saved model's few files only (not over a project refused above)
    locked = next((path for path in (target, *target.rglob("*")) if path.is_dir() and not os.access(path, os.W_OK)),
                  None)
    if locked is not None:  # the swap would succeed, and deleting the previous output fail
        raise ModelFolderError(
            f"{str(folder)!r} is write-protected (this user may not write in {str(locked)!r}), and vocabshift replaces "
            "output folders as a whole. Make it writable (chmod -R u+w) to replace it, or pass another folder."
        )
    return target


def _others(folder: Path, names: tuple[str, ...]) -> list[str]:
    """The entries of `folder` that match none of `names` (patterns; a folder's ends with "/"), sorted."""
    entries = [entry.name + "/" if entry.is_dir() else entry.name for entry in folder.iterdir()]
    return sorted(entry for entry in entries if not any(fnmatch.fnmatchcase(entry, name) for name in names))


def _remove_leftovers(target: Path) -> None:
    """Delete temporary siblings of `target` (folders, or a file's `part`) whose process is gone (killed
    mid-write)."""
    for kind in ("tmp", "old", "part"):
        prefix = _prefix(target, kind)
        for path in target.parent.glob(glob.escape(prefix) + "*"):
            pid = path.name[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                previous = path / target.name
                if kind == "old" and previous.is_dir() and not target.exists():  # killed between the two renames
                    os.rename(previous, target)
                logger.info("Removing %s, left by an interrupted save.", path)
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sibling_folder(target: Path, kind: str) -> Path:
    """A new folder beside `target`, named for this process, with the permissions the umask gives (as the folders
    save_pretrained makes; `tempfile.mkdtemp`'s are private to the user, and the output folder would stay so)."""
    folder = _sibling(target, kind)
    folder.mkdir()
    return folder


def _sibling(target: Path, kind: str) -> Path:
    """A path beside `target` for this process's temporary `kind` ("tmp", "old", "part"), unique among its writers
    and named so that `_remove_leftovers` finds it once the process is gone."""
    return target.with_name(f"{_prefix(target, kind)}{os.getpid()}-{secrets.token_hex(4)}")


def _prefix(target: Path, kind: str) -> str:
    """What the names of `target`'s temporary `kind` siblings start with (its name cut to `_NAME_BYTES`)."""
    name = target.name.encode()[:_NAME_BYTES].decode(errors="ignore")
    return f".{name}.vocabshift-{kind}-"


def _as_the_umask_gives(folder: Path) -> None:
    """Give the files written into `folder` the permissions a plain `open` gives under the umask (as config.json
    has): safetensors 0.8 writes its files private to their owner (0600), so a colleague, or a container or server
    running as another user, could not read the model. Files linked from elsewhere (`hardlink=True`) keep theirs:
    their mode belongs to the input they share it with."""
    mode = folder.stat().st_mode & 0o666  # the folder was made with mkdir: 0o777 minus the umask
    for path in folder.rglob("*"):
        status = path.lstat()
        if stat.S_ISREG(status.st_mode) and status.st_nlink == 1 and status.st_mode & 0o777 != mode:
            path.chmod(mode)


def _swap_into_place(temporary: Path, target: Path) -> None:
    if not target.exists():
        os.rename(temporary, target)
    elif _exchange(temporary, target):
        shutil.rmtree(temporary)  # now holds the previous output
    else:
        aside = _sibling_folder(target, "old")
        os.rename(target, aside / target.name)
        os.rename(temporary, target)
        shutil.rmtree(aside)


def _exchange(first: Path, second: Path) -> bool:
    """Atomically exchange two paths (Linux `renameat2`); False where the system or filesystem cannot."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None) if sys.platform == "linux" else None
    if function is None:
        return False
    result = function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))
