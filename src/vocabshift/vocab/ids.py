"""Special-token ids in configs (`bos_token_id`, `eos_token_id`, ..., and the `image_token_index` of vision-language
models: Llava, PaliGemma, Gemma-3) moved to a new vocabulary."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ID_SUFFIXES", "remap_token_ids"]

logger = logging.getLogger(__name__)
# The config entries that hold token ids (`eos_token_id`, Llava's `image_token_index`).
ID_SUFFIXES = ("_token_id", "_token_index")


def remap_token_ids(values: Mapping[str, Any], map_id: Callable[[int], int | None]) -> dict[str, Any]:
    """The new values of the `*_token_id` and `*_token_index` entries of `values` (a config's attributes or a
    config.json dict).

    Each id (or list of ids) is mapped by `map_id`; an id without a counterpart becomes None (and leaves a list),
    with a warning naming it. Entries that are None stay as they are (and are not returned).
    """
    def mapped(name: str, value: Any) -> Any:
        if isinstance(value, list):
            return [i for i in (mapped(name, v) for v in value) if i is not None]
        new = map_id(value) if isinstance(value, int) else None
        if new is None:
            logger.warning("%s=%s has no counterpart in the new vocabulary; it is set to None.", name, value)
        return new

    return {name: mapped(name, value) for name, value in values.items()
            if name.endswith(ID_SUFFIXES) and value is not None}
