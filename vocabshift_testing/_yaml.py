"""README metadata checks of `LoopbackHub`'s `/api/validate-yaml`: the Hub's type rules for model-card fields."""

from __future__ import annotations

from typing import Any

import yaml
from huggingface_hub.repocard import REGEX_YAML_BLOCK

__all__ = ["card_metadata", "validate_card"]

_RELATIONS = ("adapter", "merge", "quantized", "finetune")
_STRING_FIELDS = ("license", "license_name", "license_link", "library_name", "pipeline_tag", "base_model_relation",
                  "new_version", "thumbnail")
_LIST_FIELDS = ("language", "tags", "datasets", "metrics", "base_model")  # a string or a list of strings


def card_metadata(text: str) -> dict[str, Any]:
    """The YAML metadata of a README, `{}` when it has none or it is not a mapping."""
    try:
        data, _ = _parse(text)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _parse(text: str) -> tuple[Any, bool]:
    match = REGEX_YAML_BLOCK.search(text)
    if match is None:
        return None, False
    return yaml.safe_load(match.group(2)), True


def validate_card(text: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """`(errors, warnings)` as the Hub returns them for a model card's metadata."""
    try:
        data, found = _parse(text)
    except yaml.YAMLError as error:
        return [{"message": f"Invalid YAML in README.md metadata: {error}"}], []
    if not found or not data:
        return [], [{"message": "Empty or missing yaml metadata in repo card"}]
    if not isinstance(data, dict):
        return [{"message": "README.md metadata must be a YAML mapping"}], []
    errors = [f'"{key}" must be a string' for key in _STRING_FIELDS if key in data and not isinstance(data[key], str)]
    errors += [f'"{key}" must be a string or a list of strings' for key in _LIST_FIELDS
               if key in data and not _strings(data[key])]
    if "base_model_relation" in data:
        if data["base_model_relation"] not in _RELATIONS:
            errors.append(f'"base_model_relation" must be one of {", ".join(_RELATIONS)}')
        if "base_model" not in data:
            errors.append('"base_model_relation" needs "base_model"')
    if data.get("license") == "other" and "license_name" not in data:
        errors.append('"license: other" needs "license_name"')
    return [{"message": message} for message in errors], []


def _strings(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
