"""Helpers for vocabshift's own tests, benchmarks and demo: `LoopbackHub` (a Hub-compatible HTTP server on
127.0.0.1) and the shared corpora / SmolLM2 helpers in `vocabshift.testing.corpora`. Not part of the stable API."""

from .hub import LoopbackHub

__all__ = ["LoopbackHub"]
