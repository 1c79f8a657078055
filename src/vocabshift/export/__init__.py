"""Export a saved model folder to the formats other runtimes read: GGUF for llama.cpp (`export_gguf`)."""

from .gguf import OUTTYPES, export_gguf
from .llama_cpp import LLAMA_CPP_PYTHON

__all__ = ["LLAMA_CPP_PYTHON", "OUTTYPES", "export_gguf"]
