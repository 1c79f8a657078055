"""Helpers for vocabshift's own tests, benchmarks and demo, kept out of the installed package: `LoopbackHub` (a
Hub-compatible HTTP server on 127.0.0.1), the corpora / SmolLM2 helpers in `vocabshift_testing.corpora`, the real
tokenizers of big model families in `vocabshift_testing.real_tokenizers` and the reference FOCUS in
`vocabshift_testing.deepfocus`.

It sits at the checkout's top level, beside `src/`: pytest puts the checkout on `sys.path` (`pythonpath` in
setup.cfg), and the scripts that use it (examples/demo.py, benchmarks/, scripts/gpu_check.py) do so themselves.
"""

from .hub import LoopbackHub

__all__ = ["LoopbackHub"]
