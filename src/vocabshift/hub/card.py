"""`model_card`: a Hub model card generated from the ExtensionRecord, with `ModelCardData` and a Jinja template."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import yaml
from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.utils import httpx

from .._typing import Model
from ..arguments import check_path, check_repo_id
from ..errors import InvalidArgumentTypeError, RecordError
from ..headers import read_config
from ..record import ExtensionRecord, require_record
from ._body import body, named_repo

__all__ = ["is_unedited_card", "model_card", "stale_card"]

logger = logging.getLogger(__name__)

TEMPLATE_PATH = Path(__file__).resolve().parent.parent / "model_cards" / "template.md"
_SIGNED = "add what only you know."  # the end of the template's first comment, where the digest goes
_DIGEST = re.compile(r" vocabshift-sha256:([0-9a-f]{64})")
_RECORD_DIGEST = re.compile(r" vocabshift-record-sha256:([0-9a-f]{64})")  # of the record the card was made from
_PIPELINES = (("ForCausalLM", "text-generation"), ("LMHeadModel", "text-generation"), ("ForMaskedLM", "fill-mask"))


def model_card(
    folder_or_model: str | os.PathLike[str] | Model,
    *,
    repo_id: str | None = None,
    base_model: str | list[str] | None = None,
    language: str | Sequence[str] | None = None,
    license: str | None = None,
    datasets: Sequence[str] | None = None,
) -> ModelCard:
    """A model card for a model changed by vocabshift, from its ExtensionRecord.

    Metadata: `base_model` (+ `base_model_relation`), `language`, `license`, `library_name`, `pipeline_tag`, `tags`
    and `datasets`. Body: what was done (method, paper, mode, tokens), evaluation, CPT history and the loss-curve
    PNGs of the folder, LEP lineage, usage code, the vocabshift commands that reproduce it, limits.

    Args:
        folder_or_model: a folder saved after `extend_vocabulary` (its `config.json` holds the record), or the model.
        repo_id (`str`, *optional*): the repo the card is for, used in the usage code; defaults to the folder name.
        base_model (`str | list[str]`, *optional*): the base model's Hub id; defaults to the record's source model when
            it is a Hub id (or a path in the Hub cache); for a model that received propagated rows, the instruct
            and adapted repos of the last propagation step.
        language (`str | Sequence[str]`, *optional*): ISO codes of the new language(s); the base card's languages
            are added after them.
        license (`str`, *optional*): a Hub license id; defaults to the base model's, read from the `README.md`
            of the source folder or, for a Hub id, of the base repo.
        datasets (`Sequence[str]`, *optional*): Hub ids of the datasets used for continued pretraining.

    Returns:
        `huggingface_hub.ModelCard`: save it with `card.save(folder / "README.md")`.

    Raises:
        `ModelFolderError`: the folder has no `config.json`, or a corrupted one.
        `RecordError`: the model carries no vocabshift record.
        `InvalidArgumentError`: `repo_id` is not a Hub repo id (`InvalidArgumentTypeError`: an option of the wrong
            type).

    Example:
        ```python
        >>> card = vocabshift.model_card("out/smollm2-ru", language="ru", repo_id="me/smollm2-ru")
        >>> card.save("out/smollm2-ru/README.md")
        ```
    """
    _check_options(repo_id=repo_id, base_model=base_model, language=language, license=license, datasets=datasets)
    config, folder, name = _source(folder_or_model)
    record = require_record(config, what=name,
                            fix="a card can only describe a model saved after extend_vocabulary.")
    base = base_model or _default_base(record)
    data = _metadata(record, config, base, language, license, datasets)
    plots = sorted(p.name for p in folder.glob("*.png")) if folder else []
    options = {"base_model": base_model, "language": language, "license": license, "datasets": datasets,
               "repo_id": repo_id}
    variables = body(record, title=(repo_id or name).split("/")[-1], repo_id=repo_id or f"your-name/{name}",
                     base_model=base, pipeline_tag=data.pipeline_tag, plots=plots,
                     transformers_version=config.get("transformers_version"), card_options=options)
    card = ModelCard(_render(data, variables))
    card.text = card.text.replace(_SIGNED, f"{_SIGNED} vocabshift-record-sha256:{_record_digest(record)}", 1)
    card.text = card.text.replace(_SIGNED, f"{_SIGNED} vocabshift-sha256:{_digest(card)}", 1)
    return card


def stale_card(text: str, record: ExtensionRecord) -> bool:
    """Whether `text` is a card `model_card` generated, unedited, from another state of `record` (a step added to
    the record since: an evaluation, a training run). Cards of versions that noted no record digest are not."""
    found = _RECORD_DIGEST.search(text)
    return found is not None and found.group(1) != _record_digest(record) and is_unedited_card(text)


def _record_digest(record: ExtensionRecord) -> str:
    return hashlib.sha256(json.dumps(record.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()


def is_unedited_card(text: str) -> bool:
    """Whether `text` is a card `model_card` generated, as it generated it: its metadata and body still have the
    digest it carries (a card edited since, or written by hand, is someone's work to keep)."""
    try:
        card = ModelCard(text)
    except (ValueError, yaml.YAMLError):  # metadata that is not a YAML mapping: not a card vocabshift wrote
        return False
    found = _DIGEST.search(card.text)
    return found is not None and found.group(1) == _digest(card)


def _digest(card: ModelCard) -> str:
    """The digest of a card's metadata and body, leaving out the digest it carries."""
    signed = json.dumps(card.data.to_dict(), sort_keys=True) + _DIGEST.sub("", card.text)
    return hashlib.sha256(signed.encode("utf-8")).hexdigest()


def _render(data: ModelCardData, variables: dict[str, Any]) -> str:
    """What `ModelCard.from_template` does, with block tags on lines of their own (trim_blocks) and strict names."""
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                     undefined=jinja2.StrictUndefined, autoescape=False)
    template = environment.from_string(TEMPLATE_PATH.read_text(encoding="utf-8"))
    return template.render(card_data=data.to_yaml(), **{**data.to_dict(), **variables})


def _source(folder_or_model: Any) -> tuple[dict[str, Any], Path | None, str]:
    """`(config dict, folder or None, name)` of a folder or an in-memory model."""
    if isinstance(folder_or_model, (str, os.PathLike)):
        folder = check_path(folder_or_model, name="folder_or_model")  # "" would be the current folder
        return read_config(folder), folder, folder.resolve().name
    config = getattr(folder_or_model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise RecordError(f"model_card got a {type(folder_or_model).__name__}: pass a model folder or a model.")
    name = str(getattr(folder_or_model, "name_or_path", "") or "model").rstrip("/").split("/")[-1]
    return config.to_dict(), None, name


_EXAMPLES = {"base_model": "'HuggingFaceTB/SmolLM2-135M'", "language": "'ru' or ['ru', 'en']",
             "datasets": "['HuggingFaceFW/fineweb-2']"}


def _check_options(*, repo_id: Any, license: Any, **names: Any) -> None:
    """`repo_id` a Hub repo id, `license` a string, the other options a string or a list of strings (or None)."""
    if repo_id is not None:
        check_repo_id(repo_id)
    if license is not None and not (isinstance(license, str) and license):
        raise InvalidArgumentTypeError(f"license={license!r} is invalid: pass a Hub license id, e.g. 'apache-2.0'.")
    for name, value in names.items():
        values = [value] if isinstance(value, str) else value
        if value is not None and not (isinstance(values, (list, tuple)) and values
                                      and all(isinstance(v, str) and v for v in values)):
            raise InvalidArgumentTypeError(f"{name}={value!r} is invalid: pass a string or a list of strings, e.g. "
                                           f"{_EXAMPLES[name]}.")
    base_model = names["base_model"]
    for repo in [base_model] if isinstance(base_model, str) else base_model or []:
        check_repo_id(repo, argument="base_model")  # the Hub refuses base_model metadata that is no repo id


def _first(record: ExtensionRecord) -> Any:
    """The record of the first extension: the first of `earlier`, or the record itself."""
    return record.earlier[0] if record.earlier else record


def _default_base(record: ExtensionRecord) -> str | list[str] | None:
    """After LEP the model is instruct's (merged with adapted's rows where that is a repo too), else the source."""
    last = record.propagation[-1] if record.propagation else {}
    instruct, adapted = (named_repo(last, key) for key in ("instruct", "adapted"))
    if instruct is not None:  # an adapted folder of one's own is the common case: the weights are still instruct's
        return [instruct, adapted] if adapted is not None else instruct
    first, name = _first(record), record.original_source_model
    repo = named_repo(first)
    unsaid = (first.get if isinstance(first, dict) else vars(first).get)("source_is_folder") is None
    if repo is None and unsaid and not Path(name).is_dir() and named_repo({"source_model": name,
                                                                         "source_is_folder": False}):
        logger.warning("The record's source_model %r may be a local folder (the record, written before vocabshift "
                       "noted source_is_folder, does not say), so it is not published as base_model: pass "
                       "base_model=... (or `vocabshift card --base-model`) if it is a Hub repo.", name)
    return repo


def _metadata(record: ExtensionRecord, config: dict[str, Any], base: str | list[str] | None,
              language: str | Sequence[str] | None, license: str | None,
              datasets: Sequence[str] | None) -> ModelCardData:
    inherited = _base_metadata(record, base)
    languages = list(dict.fromkeys(_strings(language) + _strings(inherited.get("language"))))
    license = license or inherited.get("license")
    extra = {k: inherited[k] for k in ("license_name", "license_link") if license == "other" and k in inherited}
    _warn_missing(base_model=base, language=languages, license=license)
    tags = ["vocabshift", record.method, f"vocabulary-{'extension' if record.mode == 'extend' else 'replacement'}"]
    tags += ["embedding-only-cpt"] * bool(record.cpt) + ["lep"] * bool(record.propagation)
    return ModelCardData(
        base_model=base,
        base_model_relation=None if base is None else ("merge" if isinstance(base, list) else "finetune"),
        language=languages or None, license=license, library_name="transformers",
        pipeline_tag=_pipeline_tag(config), tags=tags, datasets=list(datasets) if datasets else None, **extra)


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _pipeline_tag(config: dict[str, Any]) -> str | None:
    for architecture in config.get("architectures") or []:
        for suffix, tag in _PIPELINES:
            if architecture.endswith(suffix):
                return tag
    return None


def _warn_missing(**fields: Any) -> None:
    missing = [name for name, value in fields.items() if not value]
    if missing:
        options = ", ".join(f"{name}=..." for name in missing)
        logger.warning("The model card has no %s (not found in the record or the base model's card): pass %s to "
                       "model_card (or `vocabshift card --%s`).", ", ".join(missing), options,
                       " --".join(name.replace("_", "-") for name in missing))


def _base_metadata(record: ExtensionRecord, base: str | list[str] | None) -> dict[str, Any]:
    """The base model card's metadata: the source folder's README.md, else the card of the source (or base) repo.

    It only fills license and languages, so a card that cannot be read (offline, a missing repo, a README.md that is
    not UTF-8) is said in a warning, and the card is made without them (the warning of `_warn_missing` follows)."""
    source_model = record.original_source_model
    readme = Path(source_model) / "README.md" if source_model else None
    card = readme if readme is not None and readme.is_file() else (
        named_repo(_first(record)) or (base[0] if isinstance(base, list) else base))
    if card is None:
        return {}
    try:
        return ModelCard.load(card, ignore_metadata_errors=True).data.to_dict()
    except (OSError, httpx.HTTPError, UnicodeDecodeError) as error:  # offline, no repo or README, Hub errors, bytes
        logger.warning("Could not read the card of the base model %s (%s): its license and languages are not "
                       "inherited.", card, type(error).__name__)
        return {}
