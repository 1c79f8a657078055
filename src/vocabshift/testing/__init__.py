"""Test helpers shipped with vocabshift: `LoopbackHub`, a Hub-compatible HTTP server on 127.0.0.1."""

from .hub import LoopbackHub

__all__ = ["LoopbackHub"]
