"""Run llama.cpp's `convert_hf_to_gguf.py` with its BPE pre-tokenizer named from another tokenizer folder.

`export_gguf` runs this file as a script in a child process:

    python _convert.py CONVERTER_DIR ORIGINAL_TOKENIZER_DIR|- [convert_hf_to_gguf.py arguments ...]

The converter is a script, not a library: it configures the root logger, puts its `gguf-py` first on `sys.path`
and exits on errors, so it gets a process of its own. Its files are not changed: the one override is made in
memory, on the class that defines `get_vocab_base_pre`, which then hashes the original tokenizer's ids (`-`: the
folder's own tokenizer, as the converter does). Importing this module imports nothing heavy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["UNKNOWN_PRE_TOKENIZER", "main"]

UNKNOWN_PRE_TOKENIZER = 3  # exit status when llama.cpp does not know the pre-tokenizer (the converter exits with 1)
_LOOKUP = "get_vocab_base_pre"


def main(argv: list[str]) -> None:
    converter_dir, original, *arguments = argv
    here = os.path.dirname(os.path.abspath(__file__))  # its modules (gguf.py) must not shadow the converter's
    sys.path[:] = [converter_dir, *(path for path in sys.path if os.path.abspath(path or ".") != here)]
    import convert_hf_to_gguf  # llama.cpp's script, from converter_dir

    owner = _lookup_owner(convert_hf_to_gguf)
    lookup = getattr(owner, _LOOKUP)

    def named_from_original(self: Any, tokenizer: Any) -> str:
        if original != "-":
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(original)
        try:
            return lookup(self, tokenizer)
        except NotImplementedError:  # "BPE pre-tokenizer was not recognized"
            sys.exit(UNKNOWN_PRE_TOKENIZER)

    setattr(owner, _LOOKUP, named_from_original)
    sys.argv = [str(Path(converter_dir) / "convert_hf_to_gguf.py"), *arguments]
    convert_hf_to_gguf.main()


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
