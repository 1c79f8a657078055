"""The reference FOCUS implementation (the `deepfocus` package, benchmark-only) run on vocabshift's inputs, for the
row-equality test and the speed benchmark."""

from __future__ import annotations

from typing import Any

__all__ = ["deepfocus_rows"]


def deepfocus_rows(tokenizer: Any, source: Any, matrix: Any, path: str, *, shared: dict[int, int] | None = None,
                   extend_tokenizer: Any = None, line_end_anchor: bool = False) -> Any:
    """deepfocus's `FOCUS(...)` rows for `tokenizer` from `source` and its `matrix`, with the fastText model at `path`.

    With `shared` (target id -> source id), its overlap is replaced by ours (same tokens copied from the same rows).
    `line_end_anchor=True` keeps deepfocus's use of fastText's line-end word "</s>" as the vector of an EOS token
    named "</s>" (out of the box); by default it is off, since that word is no token vector.
    """
    import deepfocus.focus as reference

    original, rare = reference.get_overlapping_tokens, reference.is_very_rare_token
    if shared is not None:
        reference.get_overlapping_tokens = _same_overlap(original, shared, source)
    if not line_end_anchor:
        reference.is_very_rare_token = lambda token, model: token == "</s>" or rare(token, model)
    try:
        return reference.FOCUS(target_tokenizer=tokenizer, source_tokenizer=source, source_embeddings=matrix,
                               fasttext_model_path=path, extend_tokenizer=extend_tokenizer, verbosity="silent")
    finally:
        reference.get_overlapping_tokens, reference.is_very_rare_token = original, rare


def _same_overlap(original: Any, shared: dict[int, int], source: Any) -> Any:
    from deepfocus.vocab_helper import NewToken, TokenClass

    def same_overlap(**kwargs: Any) -> Any:
        overlap, new = original(**kwargs)
        for key, info in list(overlap.items()):
            if info.target.id not in shared:
                new[key] = NewToken(target=info.target)
                del overlap[key]
            elif info.source[0].id != shared[info.target.id]:
                index = shared[info.target.id]
                info.source = [TokenClass(source.convert_ids_to_tokens(index), index, "", "", "", "", False)]
        return overlap, new

    return same_overlap
