"""Checks of plain arguments that several public functions take: counts, rates, lists of texts, Hub repo ids.

Each returns the value it checked and raises `InvalidArgumentTypeError` for a wrong type (a bool is not a count)
and `InvalidArgumentError` for a value out of range, naming the argument, the value and what is accepted.
"""

from __future__ import annotations

import errno
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from huggingface_hub import constants
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from .errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["check_apart", "check_choice", "check_count", "check_flag", "check_output_path", "check_path",
           "check_positions", "check_rate", "check_repo_id", "check_seed", "check_shard_size", "check_texts",
           "check_token", "is_collection", "is_int", "lone_surrogate", "model_positions", "offline_miss",
           "unexpanded_home"]

_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one: what errors="surrogateescape" leaves of undecodable bytes
_SIZE = re.compile(r"\s*(\d+(\.\d*)?)\s*(KB|MB|GB|TB)\s*", re.IGNORECASE)  # what huggingface_hub parses


def is_int(value: Any) -> TypeGuard[int]:
    """An int that is not a bool (`True` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(value: Any, *, name: str, minimum: int = 1, accepted: str | None = None) -> int:
    """An int of at least `minimum` (1: a positive count; 0: a non-negative one, e.g. a seed).

    With `accepted` (e.g. "a positive int (e.g. 64) or None"), every refusal reads "{name}=... is invalid: pass
    {accepted}."
    """
    if not is_int(value):
        why = "is invalid" if accepted else f"is a {type(value).__name__}"
        raise InvalidArgumentTypeError(f"{name}={value!r} {why}: pass {accepted or f'an int >= {minimum}'}.")
    if value < minimum:
        raise InvalidArgumentError(f"{name}={value!r} is invalid: pass {accepted or f'an int >= {minimum}'}.")
    return value


def check_seed(value: Any, *, name: str = "seed") -> int:
    """A seed: an int in [0, 2**32), numpy's range (the Trainer's `set_seed` seeds numpy too)."""
    accepted = "an int in [0, 2**32)"
    if check_count(value, name=name, minimum=0, accepted=accepted) >= 2**32:
        raise InvalidArgumentError(f"{name}={value!r} is invalid: pass {accepted}.")
    return value


def check_flag(value: Any, *, name: str) -> bool:
    """True or False (not a truthy value: "yes" and 1 are refused, as `InvalidArgumentTypeError`)."""
    if not isinstance(value, bool):
        raise InvalidArgumentTypeError(f"{name}={value!r} is invalid: pass True or False.")
    return value


def check_choice(value: Any, choices: Sequence[str], *, name: str) -> str:
    """One of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidArgumentError(f"{name}={value!r} is invalid: pass one of {', '.join(map(repr, choices))}.")
    return value


def is_collection(value: Any) -> bool:
    """An iterable of items: not a string, bytes or a mapping (a dataset's batch of columns), nor a 0-d tensor or
    array (iterable by type, a single value in fact)."""
    return (isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))
            and getattr(value, "ndim", 1) != 0)


def check_rate(value: Any, *, name: str, positive: bool = True) -> float:
    """A finite real number, > 0 (`positive`, e.g. a learning rate) or >= 0 (e.g. a weight decay)."""
    accepted = "a finite number " + ("> 0" if positive else ">= 0")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentTypeError(f"{name}={value!r} is a {type(value).__name__}: pass {accepted}.")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InvalidArgumentError(f"{name}={value!r} is invalid: pass {accepted}.")
    return float(value)


def check_texts(value: Any, *, name: str, blanks: bool = False) -> Sequence[str]:
    """A non-empty collection of strings, one document or line each; non-blank unless `blanks` (where a blank text is
    simply nothing to score). A list, a tuple or a dataset column is returned as it is; any other iterable (a
    generator, an array, a pandas Series) is read once, into a list: pass on the returned value."""
    if not is_collection(value):
        raise InvalidArgumentTypeError(f"{name} is a {type(value).__name__}: pass a non-empty list of strings, one "
                                       "line or document each" + (" (a dataset's batch: its column of text, e.g. "
                                       "batch['text'])." if isinstance(value, Mapping) else "."))
    if not isinstance(value, Sequence):
        value = list(value)
    if not value:
        raise InvalidArgumentError(f"{name} is empty: pass a non-empty list of strings, one line or document each.")
    for index, text in enumerate(value):
        if not isinstance(text, str):
            raise InvalidArgumentTypeError(f"{name}[{index}] is a {type(text).__name__}: pass a non-empty list of "
                                           "strings, one line or document each.")
        if odd := lone_surrogate(text):
            raise InvalidArgumentError(f"{name}[{index}] {odd}")
        if not blanks and not text.strip():
            raise InvalidArgumentError(f"{name}[{index}] is {'empty' if not text else 'blank'}: drop empty lines "
                                       f"from {name}.")
    return value


def lone_surrogate(text: str) -> str | None:
    """What to say of `text` when it holds a lone surrogate, which no encoder writes (the tokenizers and fastText fail
    on it), else None."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return (f"holds a lone surrogate ({found.group()!r} at character {found.start()}), which is no text: read files "
            "with encoding='utf-8' and errors='strict' or 'replace', not 'surrogateescape'.")


def check_path(value: Any, *, name: str) -> Path:
    """A non-empty `str` or `os.PathLike`, as a `Path`."""
    if hasattr(value, "save_pretrained"):  # its repr would be the whole module tree or vocabulary
        raise InvalidArgumentTypeError(f"{name} is a {type(value).__name__} object: this step reads saved folders, "
                                       "so save it first (its save_pretrained(folder), or "
                                       "vocabshift.save_pretrained_atomic for a model and its tokenizer) and pass "
                                       "that folder.")
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidArgumentTypeError(f"{name}={value!r:.80} is a {type(value).__name__}: pass a path (str or "
                                       "pathlib.Path).")
    if not str(value):
        raise InvalidArgumentError(f"{name} is an empty path: pass a path.")
    return Path(value)


def unexpanded_home(value: str | os.PathLike[str]) -> str:
    """For a path to read that starts with a `~` no shell expanded (quoted, or from a config file) and does not
    exist: a clause saying so, with the path it stands for (to end a "does not exist" message); else ''."""
    home = str(value).split(os.sep, 1)[0]
    if not home.startswith("~") or Path(value).exists() or os.path.expanduser(home) == home:
        return ""
    return (f" (it starts with {home!r}, which vocabshift does not expand: a shell does, unquoted at the start of a "
            f"word; pass {os.path.expanduser(value)!r})")


def check_output_path(value: Any, *, name: str) -> Path:
    """`check_path` for a path to write: no existing file stands where one of its parent folders must be, and the
    nearest existing one lets this user write (checked before any work, so that a long run does not end in a raw
    error when it writes), and it does not start with an unexpanded `~`. A symbolic link stands for where it
    points: the output is written there, and the link kept (as `save_pretrained` writes through it); one that leads
    back to itself is refused, and so is a path in a Hugging Face cache repo, as given or where its links lead."""
    path = check_path(value, name=name)
    if found := _SURROGATE.search(str(value)):  # bytes that are not UTF-8, as Python reads them from the OS
        raise InvalidArgumentError(f"{name}={str(value)!r} is not UTF-8 ({found.group()!r} at character "
                                   f"{found.start()}): safetensors, tokenizers and vocabshift write files with UTF-8 "
                                   "names only; pass a path in UTF-8.")
    home = str(value).split(os.sep, 1)[0]
    if home.startswith("~") and not Path(home).exists():
        raise InvalidArgumentError(f"{name}={str(value)!r} starts with {home!r}, which vocabshift does not expand (a "
                                   "shell does, unquoted at the start of a word): it would write into a new folder "
                                   f"named {home!r} here. Pass {os.path.expanduser(path)!r}, or './{value}' for a "
                                   "folder of that name.")
    try:
        os.path.realpath(path, strict=True)
    except OSError as error:  # a path that does not exist yet is fine; a loop can never be written
        if error.errno == errno.ELOOP:
            raise InvalidArgumentError(f"{name}={str(value)!r} cannot be written: it is, or lies under, a symbolic "
                                       "link that leads back to itself. Fix or remove the link (see ls -l), or "
                                       "pass another path.") from None
    _check_outside_hub_cache(path, value, name)
    path = Path(os.path.realpath(path)) if path.is_symlink() else path
    nearest = next((parent for parent in path.absolute().parents if parent.exists()), None)
    if nearest is not None and not nearest.is_dir():
        raise InvalidArgumentError(f"{name}={str(value)!r} cannot be written: {str(nearest)!r} is a file, not a "
                                   "folder. Pass a path whose parent folders are folders or do not exist yet.")
    if nearest is not None and not os.access(nearest, os.W_OK | os.X_OK):
        raise InvalidArgumentError(f"{name}={str(value)!r} cannot be written: this user may not write in "
                                   f"{str(nearest)!r}. Pass a path in a folder you can write to.")
    return path


def _check_outside_hub_cache(path: Path, value: Any, name: str) -> None:
    """Refuse a path in a Hugging Face cache repo (`models--org--name/snapshots/...` or `.../blobs/...`), as given
    or where its links lead: its snapshots' files are links to blobs that other snapshots share and the cache checks
    by hash, and from_pretrained would load what vocabshift wrote there as the downloaded repo."""
    for candidate in (path.absolute(), Path(os.path.realpath(path))):
        parts = candidate.parts
        found = [i for i in range(len(parts) - 1) if parts[i + 1] in ("snapshots", "blobs")
                 and parts[i].startswith(("models--", "datasets--", "spaces--"))]
        if found:
            repo = str(Path(*parts[:found[0] + 1]))
            raise InvalidArgumentError(f"{name}={str(value)!r} is in a Hugging Face cache snapshot ({repo!r}), whose "
                                       "files are links to blobs that other snapshots share and the cache checks by "
                                       "hash: writing there would change the downloaded repo. Pass a path outside "
                                       "the cache.")


def check_apart(output: str | os.PathLike[str], *, name: str, **inputs: Any) -> None:
    """An output folder that is not an input folder, nor holds one, nor lies inside one (inputs are never written;
    `inputs` that are not existing paths, such as Hub ids, are skipped).

    Raises:
        `InvalidArgumentError`: naming the output and the input (`check_output_path`'s errors for the output).
    """
    target = check_output_path(output, name=name).resolve()
    for role, value in inputs.items():
        given = isinstance(value, (str, os.PathLike)) and str(value) != ""  # "" (a model built in memory) is no path
        source = Path(value).resolve() if given and Path(value).exists() else None
        if source is None or not (source.is_relative_to(target) or source.is_dir() and target.is_relative_to(source)):
            continue
        where = ("the folder of " if source.is_dir() else "") if source == target else \
            "a folder holding " if source.is_relative_to(target) else "inside "
        raise InvalidArgumentError(f"{name}={str(output)!r} is {where}the input {role}={str(value)!r}; the output "
                                   "folder is replaced as a whole, and vocabshift never modifies its inputs. Pass "
                                   "another output folder.")


def check_shard_size(value: Any, *, name: str) -> int | str:
    """A shard size as `save_pretrained` takes it: a positive number of bytes, or a number with a unit (`"2GB"`)."""
    accepted = "a positive number of bytes or a size with a unit, e.g. '2GB' or '500MB' (KB, MB, GB, TB)"
    if is_int(value) and value > 0:
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) <= 0:
        error = InvalidArgumentError if isinstance(value, (str, int)) and not isinstance(value, bool) else \
            InvalidArgumentTypeError
        raise error(f"{name}={value!r} is not a shard size: pass {accepted}.")
    return value


def check_token(value: Any, *, booleans: bool = False, name: str = "token") -> None:
    """A Hub token: None (the stored login), a non-empty string of what an HTTP header carries (visible ASCII: no
    space, line break or other letter), or (`booleans`) True / False as huggingface_hub takes them. `name` says where
    it came from (`token`, `HF_TOKEN`, ...). The value is never echoed."""
    if value is None or (booleans and isinstance(value, bool)):
        return
    if isinstance(value, str) and value:
        bad = next((i for i, c in enumerate(value) if not "!" <= c <= "~"), None)
        if bad is None:
            return
        raise InvalidArgumentError(f"{name} holds a character an HTTP header cannot carry (a space, a line break or a "
                                   f"non-ASCII letter, at position {bad} of {len(value)}): pass the token as the Hub "
                                   "shows it (hf_ then letters and digits, https://huggingface.co/settings/tokens).")
    got = "an empty string" if value == "" else type(value).__name__
    raise InvalidArgumentError(f"{name} must be a non-empty string (a Hub token){', True, False' if booleans else ''} "
                               f"or None to use HF_TOKEN or the stored login; got {got}.")


def check_repo_id(repo_id: Any, *, argument: str = "repo_id") -> str:
    """`repo_id` itself if it is a Hub repo id (`name` or `namespace/name`), checked locally, without a request.

    Raises:
        `InvalidArgumentError`: not a repo id (`InvalidArgumentTypeError`: not a string).
    """
    if not isinstance(repo_id, str):
        raise InvalidArgumentTypeError(f"{argument}={repo_id!r} is a {type(repo_id).__name__}: pass the repo id as a "
                                       "string, 'namespace/name' or 'name'.")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise InvalidArgumentError(f"{argument}={repo_id!r} is not a Hub repo id ({error}): pass 'namespace/name' "
                                   "or 'name', e.g. 'me/smollm2-ru'.") from None
    return repo_id


def offline_miss(value: str | os.PathLike[str]) -> str | None:
    """Why `value`, no local path, could not be loaded from the Hub when offline mode is on (transformers then says
    it "couldn't connect to 'https://huggingface.co'" and to check the internet connection, which is not the
    cause); None when it is not on."""
    if not constants.is_offline_mode() or Path(value).exists():
        return None
    switch = "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"
    return (f"{switch} is set (offline mode), and {str(value)!r} is neither a local path nor wholly in the Hugging "
            f"Face cache ({constants.HF_HUB_CACHE}): download it while online (hf download {value}), point "
            "HF_HUB_CACHE or HF_HOME at the cache that holds it, or pass a local folder.")


def model_positions(model: Any) -> int | None:
    """The positions `model` was trained on (its config's `max_position_embeddings`), None where it names none."""
    positions = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return positions if is_int(positions) else None


def check_positions(model: Any, length: int, *, name: str, argument: str) -> None:
    """Refuse sequences of `length` tokens longer than the positions `model` was trained on (`model_positions`, where
    its config names them): a rotary model would run, on positions it never saw."""
    positions = model_positions(model)
    if positions is not None and length > positions:
        raise InvalidArgumentError(f"{name}={length} is longer than the {positions} positions of {argument} "
                                   f"({type(model).__name__}): pass at most {positions}.")
