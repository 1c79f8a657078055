"""Run llama.cpp's `convert_hf_to_gguf.py` with its BPE pre-tokenizer named from another tokenizer folder.

`export_gguf` runs this file as a script in a child process:

    python _convert.py CONVERTER_DIR ORIGINAL_TOKENIZER_DIR|- [convert_hf_to_gguf.py arguments ...]

The converter is a script, not a library: it configures the root logger, puts its `gguf-py` first on `sys.path`
and exits on errors, so it gets a process of its own. Its files are not changed: two overrides are made in memory,
on the class that defines `get_vocab_base_pre`, which then hashes the original tokenizer's ids (`-`: the folder's
own tokenizer, as the converter does), and on gguf-py's `LlamaHfVocab`, whose token scores then rank tokens as
tokenizer.json's merges do. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["UNKNOWN_PRE_TOKENIZER", "main"]

UNKNOWN_PRE_TOKENIZER = 3  # exit status when llama.cpp does not know the pre-tokenizer (the converter exits with 1)
_LOOKUP = "get_vocab_base_pre"
# llama.cpp pre-tokenizers with the regex of the value, which llama.cpp runs without ignore_merges and the value with
# it: Llama-3's tokenizer.json hashes as smaug-bpe, and an adapted one needs ignore_merges to reach its new tokens
_IGNORING_MERGES = {"smaug-bpe": "llama-bpe"}


def main(argv: list[str]) -> None:
    converter_dir, original, *arguments = argv
    here = os.path.dirname(os.path.abspath(__file__))  # its modules (gguf.py) must not shadow the converter's
    sys.path[:] = [converter_dir, *(path for path in sys.path if os.path.abspath(path or ".") != here)]
    import convert_hf_to_gguf  # llama.cpp's script, from converter_dir

    owner = _lookup_owner(convert_hf_to_gguf)
    lookup = getattr(owner, _LOOKUP)

    def named_from_original(self: Any, tokenizer: Any) -> str:
        ignores_merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"].get("ignore_merges", False)
        if original != "-":
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(original)
        try:
            name = lookup(self, tokenizer)
        except NotImplementedError:  # "BPE pre-tokenizer was not recognized"
            sys.exit(UNKNOWN_PRE_TOKENIZER)
        return _IGNORING_MERGES.get(name, name) if ignores_merges else name

    setattr(owner, _LOOKUP, named_from_original)
    vocab_class = getattr(sys.modules.get("gguf"), "LlamaHfVocab", None)
    if vocab_class is not None:  # (an older llama.cpp has none)
        _score_by_merges(vocab_class)
    sys.argv = [str(Path(converter_dir) / "convert_hf_to_gguf.py"), *arguments]
    convert_hf_to_gguf.main()


def _score_by_merges(vocab_class: Any) -> None:
    """Give the tokens of a SentencePiece-style tokenizer.json read without a tokenizer.model (`LlamaHfVocab`: Llama-2
    or Mistral after replace mode) the scores of their merges. The converter gives each -1000, and llama.cpp joins
    the pair whose token scores highest: it cut text unlike transformers. Here the earliest merge scores highest."""

    def get_token_score(self: Any, token_id: int) -> float:
        if not hasattr(self, "_vocabshift_scores"):
            self._vocabshift_scores = _merge_scores(Path(self.fname_tokenizer))
        scores, floor = self._vocabshift_scores
        return scores.get(token_id, floor)

    vocab_class.get_token_score = get_token_score


def _merge_scores(tokenizer_json: Path) -> tuple[dict[int, float], float]:
    """-rank of the first merge that builds each token, by id; and a score below them all, for the others."""
    model = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]
    first: dict[str, int] = {}
    for rank, merge in enumerate(model["merges"]):
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        first.setdefault(left + right, rank)
    scores = {index: -float(first[token]) for token, index in model["vocab"].items() if token in first}
    return scores, -float(len(first) + 1)


def _lookup_owner(script: Any) -> Any:
    """The class defining the lookup: `conversion.TextModel` (the converter split into modules), else `TextModel` or
    `Model` of the script itself (older llama.cpp)."""
    for module in (sys.modules.get("conversion"), script):
        for name in ("TextModel", "Model"):
            owner = getattr(module, name, None)
            if owner is not None and _LOOKUP in vars(owner):
                return owner
    raise SystemExit(f"vocabshift: this llama.cpp converter has no {_LOOKUP}; pass a newer llama.cpp checkout.")


if __name__ == "__main__":
    main(sys.argv[1:])
