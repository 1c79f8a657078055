"""vocabshift: move a Hugging Face LLM to a new language through its vocabulary.

`import vocabshift` registers `PreTrainedModel.extend_vocabulary`.
"""

import functools
from typing import Any

from transformers import PreTrainedModel

from . import methods
from ._typing import Tokenizer, TokenizerLike
from ._version import __version__
from .errors import VocabShiftError
from .export import export_gguf
from .extend import extend_vocabulary
from .hub import model_card, push_to_hub
from .inspection import inspect_folder
from .methods import InitContext, InitResult
from .propagation import propagate
from .record import ExtensionRecord, get_record
from .registry import get_method, list_methods, register_method
from .save import save_pretrained_atomic
from .training import (
    DistillationTrainer,
    DistillationWeights,
    EmbeddingOnlyCallback,
    Evaluation,
    ProbeResult,
    SecondStage,
    evaluate,
    probe,
)
from .vocab import MergeReport, align, merge_tokenizers, tokens_per_word, train_tokenizer
from .word_vector_training import train_word_vectors
from .wordvectors import WordVectors, load_word_vectors

__all__ = [
    "DistillationTrainer",
    "DistillationWeights",
    "EmbeddingOnlyCallback",
    "Evaluation",
    "ExtensionRecord",
    "InitContext",
    "InitResult",
    "MergeReport",
    "ProbeResult",
    "SecondStage",
    "VocabShiftError",
    "WordVectors",
    "__version__",
    "align",
    "evaluate",
    "export_gguf",
    "extend_vocabulary",
    "get_method",
    "get_record",
    "inspect_folder",
    "list_methods",
    "load_word_vectors",
    "merge_tokenizers",
    "methods",
    "model_card",
    "probe",
    "propagate",
    "push_to_hub",
    "register_method",
    "save_pretrained_atomic",
    "tokens_per_word",
    "train_tokenizer",
    "train_word_vectors",
]


@functools.wraps(extend_vocabulary)
def _extend_vocabulary_method(self: PreTrainedModel, new_tokenizer: TokenizerLike, **kwargs: Any) -> Tokenizer:
    return extend_vocabulary(self, new_tokenizer, **kwargs)


PreTrainedModel.extend_vocabulary = _extend_vocabulary_method
