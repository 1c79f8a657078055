"""Tokenizer side: canonical token forms, alignment, merge (extend mode), replacement, training, statistics."""

from .align import Alignment, align
from .forms import TokenForm, detect_family, token_forms
from .load import fingerprint
from .merge import MergeReport, merge_tokenizers
from .replace import replacement_tokenizer
from .stats import tokens_per_word
from .train import train_tokenizer

__all__ = [
    "Alignment",
    "MergeReport",
    "TokenForm",
    "align",
    "detect_family",
    "fingerprint",
    "merge_tokenizers",
    "replacement_tokenizer",
    "token_forms",
    "tokens_per_word",
    "train_tokenizer",
]
