"""Type aliases for what vocabshift takes and returns (annotations only; nothing is checked at run time).

transformers' classes are read as `Any` by the type checker (its annotations are partial), so these aliases say to
a reader what is expected without promising more than is checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from tokenizers import Tokenizer as BackendTokenizer
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["Corpus", "Model", "ModelConfig", "Tokenizer", "TokenizerLike", "TrainingArguments", "is_peft"]

# Text to train on: a UTF-8 file (one document per line, .xz or not) or the documents themselves.
Corpus: TypeAlias = "str | os.PathLike[str] | Sequence[str]"
Model: TypeAlias = "PreTrainedModel"  # a transformers model: `config`, `get_input_embeddings()`, ...
ModelConfig: TypeAlias = "PreTrainedConfig"  # a model's config (`model.config`, `AutoConfig.from_pretrained(...)`)
Tokenizer: TypeAlias = "PreTrainedTokenizerFast"  # a fast tokenizer (with `backend_tokenizer`)
# What a tokenizer argument accepts: a fast tokenizer, a `tokenizers.Tokenizer`, a tokenizer.json, a folder, a repo id.
TokenizerLike: TypeAlias = "PreTrainedTokenizerFast | BackendTokenizer | str | os.PathLike[str]"
TrainingArguments: TypeAlias = Any  # transformers.TrainingArguments (read as Any)


def is_peft(module: Any) -> bool:
    """Whether `module` is peft's (a PeftModel, or a layer an adapter wraps), without importing peft."""
    return type(module).__module__.split(".")[0] == "peft"
