"""Every error vocabshift raises on bad input.

Each error subclasses `VocabShiftError` and the built-in exception it refines, so that
`except ValueError` keeps working in user code. Messages say what was given, why it is refused and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "ConversionError",
    "CorpusError",
    "HelperModelError",
    "IncompatibleTokenizerError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidTokenizerError",
    "LineageError",
    "LlamaCppError",
    "MethodOptionError",
    "MethodOptionTypeError",
    "MethodResultError",
    "ModelFolderError",
    "NoNewTokensError",
    "NonFiniteWeightsError",
    "OutputExistsError",
    "OutputWriteError",
    "RecordError",
    "ShardError",
    "SiblingMismatchError",
    "TokenizerLoadError",
    "TokenizerMismatchError",
    "TrainingDivergedError",
    "TrainingSetupError",
    "UnknownMethodError",
    "UnknownPreTokenizerError",
    "UnsafeWeightsError",
    "UnsupportedModelError",
    "UnsupportedTokenizerError",
    "VocabShiftError",
    "WordVectorsError",
    "WordVectorsNotFoundError",
]


class VocabShiftError(Exception):
    """Base class of every error raised by vocabshift."""


class InvalidArgumentError(VocabShiftError, ValueError):
    """An argument has a value outside what is accepted (e.g. `mode`, `pad_to_multiple_of`, `seed`)."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument is of the wrong type (e.g. one string where a list of strings is expected)."""


class InvalidTokenizerError(VocabShiftError, TypeError):
    """A tokenizer argument is not a fast Hugging Face tokenizer, a `tokenizers.Tokenizer`, or a path to one."""


class TokenizerLoadError(VocabShiftError, ValueError):
    """A tokenizer could not be loaded from the given path or repo id (missing or corrupted files)."""


class TokenizerMismatchError(VocabShiftError, ValueError):
    """The source tokenizer does not belong to the model (ids beyond its embedding rows, or another fingerprint)."""


class UnsupportedTokenizerError(VocabShiftError, ValueError):
    """A tokenizer's family is none of byte-level BPE, SentencePiece-style or WordPiece."""


class IncompatibleTokenizerError(VocabShiftError, ValueError):
    """Two tokenizers cannot be merged (their models are of different kinds)."""


class NoNewTokensError(VocabShiftError, ValueError):
    """The new tokenizer brings no token that the model does not already have."""


class UnknownMethodError(VocabShiftError, ValueError):
    """No initialization method is registered under the given name."""


class MethodOptionError(VocabShiftError, ValueError):
    """A method option is missing, out of range, or (`MethodOptionTypeError`) unknown or of the wrong type."""


class MethodOptionTypeError(MethodOptionError, TypeError):
    """A method option the method does not know, or of the wrong type (a `TypeError` too, as Python raises for an
    unexpected or mistyped keyword argument)."""


class MethodResultError(VocabShiftError, RuntimeError):
    """An initialization method returned rows of the wrong shape or with NaN/Inf (a bug in that method)."""


class UnsupportedModelError(VocabShiftError, TypeError):
    """The model has no input embeddings, or embeddings vocabshift cannot resize."""


class NonFiniteWeightsError(VocabShiftError, ValueError):
    """The model's own weights hold NaN or infinite values where vocabshift reads them."""


class RecordError(VocabShiftError, ValueError):
    """A model carries no ExtensionRecord, or one that cannot be read."""


class ModelFolderError(VocabShiftError, FileNotFoundError):
    """A path is not a saved model folder (no config.json, no safetensors weights), or cannot be replaced safely."""


class UnsafeWeightsError(VocabShiftError, ValueError):
    """A folder to publish holds pickle files (.bin, .pt, .pth, .ckpt, .pkl): vocabshift pushes safetensors only."""


class TrainingDivergedError(VocabShiftError, FloatingPointError):
    """Training turned the weights it trains NaN or infinite (a learning rate too high for the run, an overflow)."""


class TrainingSetupError(VocabShiftError, RuntimeError):
    """A training setup in which embedding-only training cannot be made safe (e.g. an optimizer built before
    freezing)."""


class SiblingMismatchError(VocabShiftError, ValueError):
    """`base` and `instruct` are not siblings: their architectures, hidden sizes, vocabularies or tying differ."""


class LineageError(VocabShiftError, ValueError):
    """`adapted` was not made from `base` (per its ExtensionRecord: source tokenizer, rows, frozen rows)."""


class ShardError(VocabShiftError, OSError):
    """A safetensors shard is missing, truncated or corrupted (or disagrees with the index)."""


class OutputExistsError(VocabShiftError, FileExistsError):
    """An output folder that must be new or empty already holds files."""


class OutputWriteError(VocabShiftError, OSError):
    """An output could not be written: its disk is full, a quota is exceeded or a file outgrew what the filesystem (or
    `ulimit -f`) allows. Nothing is half-written: the temporary sibling is removed and the previous output kept."""


class CorpusError(VocabShiftError, ValueError):
    """A text corpus is empty, of the wrong type, or not UTF-8 text."""


class WordVectorsError(VocabShiftError, ValueError):
    """Word vectors cannot be read, have inconsistent dimensions, or cover none of the tokens."""


class WordVectorsNotFoundError(WordVectorsError, FileNotFoundError):
    """A word-vector file does not exist."""


class HelperModelError(VocabShiftError, ValueError):
    """A helper model has no input embeddings or its vocabulary does not match the new tokenizer."""


class LlamaCppError(VocabShiftError, OSError):
    """llama.cpp's converter cannot be found at the given path, or its source distribution cannot be fetched."""


class ConversionError(VocabShiftError, RuntimeError):
    """llama.cpp's converter failed on a model folder (its last lines of output are in the message)."""


class UnknownPreTokenizerError(VocabShiftError, ValueError):
    """llama.cpp does not know a model's pre-tokenizer, so its GGUF could not be tokenized as transformers does."""
