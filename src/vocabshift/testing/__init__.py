"""Helpers for vocabshift's own tests, benchmarks and demo (not part of the stable API)."""
