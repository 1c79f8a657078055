"""Type aliases for what vocabshift takes and returns (annotations only; nothing is checked at run time).

transformers' classes are read as `Any` by the type checker (its annotations are partial), so these aliases say to
a reader what is expected without promising more than is checked.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from tokenizers import Tokenizer as BackendTokenizer
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["Model", "Tokenizer", "TokenizerLike", "TrainingArguments"]

Model: TypeAlias = "PreTrainedModel"  # a transformers model: `config`, `get_input_embeddings()`, ...
Tokenizer: TypeAlias = "PreTrainedTokenizerFast"  # a fast tokenizer (with `backend_tokenizer`)
# What a tokenizer argument accepts: a fast tokenizer, a `tokenizers.Tokenizer`, a tokenizer.json, a folder, a repo id.
TokenizerLike: TypeAlias = "PreTrainedTokenizerFast | BackendTokenizer | str | os.PathLike[str]"
TrainingArguments: TypeAlias = Any  # transformers.TrainingArguments (read as Any)
