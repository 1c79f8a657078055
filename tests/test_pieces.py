"""The piece_tree objective: its tree against the decompositions, its loss against a direct computation."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import vocabshift
from conftest import make_model
from vocabshift.errors import InvalidArgumentError
from vocabshift.training.distill.collator import DistillationCollator
from vocabshift.training.distill.objective import distillation_loss, teacher_targets
from vocabshift.training.distill.pieces import piece_tree
from vocabshift.training.distill.teacher import Teacher
from vocabshift.training.distill.weights import DistillationWeights


def _extended(tokenizers_en, tokenizers_ru, mode):
    source = tokenizers_en["bytelevel"]
    model = copy.deepcopy(make_model("qwen2-tied", source))
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=source, mode=mode)
    record = vocabshift.get_record(model)
    sequences = {new: (old,) for new, old in record.shared_pairs()}
    sequences.update({i: tuple(p) for i, p in zip(record.new_ids, record.decomposition_lists()) if p})
    return model, tokenizer, source, record, sequences


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_tree_follows_the_decompositions(tokenizers_en, tokenizers_ru, mode):
    model, _, _, record, sequences = _extended(tokenizers_en, tokenizers_ru, mode)
    tree = piece_tree(record, model.get_input_embeddings().weight.shape[0])
    position = {int(token): i for i, token in enumerate(tree.order)}
    assert set(position) == set(sequences)
    deep = [(t, p) for t, p in sequences.items() if len(p) > 2]
    assert deep
    for token, pieces in deep:
        node = torch.tensor([0])
        for depth, piece in enumerate(pieces):
            if depth:  # the root's split is next_piece's, not kept
                assert int(tree.child_pieces[node, tree.slots[position[token], depth]]) == piece
            node = tree.child(node, torch.tensor([piece]))
            start, size = int(tree.start[node]), int(tree.size[node])
            assert start <= position[token] < start + size
            members = {int(t) for t in tree.order[start : start + size]}
            assert members == {t for t, p in sequences.items() if p[: depth + 1] == pieces[: depth + 1]}
        assert bool(tree.has_stop[node]) and int(tree.slots[position[token], len(pieces)]) == 0


def _direct(student_logits, teacher_logits, batch, sequences):
    """The loss chunk by chunk in Python: at each prefix of the next chunk's pieces, the teacher's next-piece
    distribution against the student's tokens with that prefix, grouped by their next piece."""
    per_row = []
    for b in range(batch["input_ids"].shape[0]):
        chunks, length = int(batch["chunk_mask"][b].sum()), int(batch["teacher_attention_mask"][b].sum())
        totals = []
        for c in range(chunks - 1):
            total, prefix, at = 0.0, (), int(batch["teacher_chunk_ends"][b, c])
            while at + 1 < length:
                at += 1
                prefix += (int(batch["teacher_input_ids"][b, at]),)
                members = [t for t, p in sequences.items() if p[: len(prefix)] == prefix]
                children = sorted({sequences[t][len(prefix)] for t in members if len(sequences[t]) > len(prefix)})
                if not members:
                    break
                if not children:
                    continue
                probs = student_logits[b, int(batch["chunk_ends"][b, c]), members].softmax(-1)
                teacher = teacher_logits[b, at].softmax(-1)
                want = {q: float(teacher[q]) for q in children}
                if any(len(sequences[t]) == len(prefix) for t in members):
                    want[None] = max(1 - sum(want.values()), 0.0)
                norm = sum(want.values())
                got = {q: 0.0 for q in want}
                for t, p in zip(members, probs):
                    got[sequences[t][len(prefix)] if len(sequences[t]) > len(prefix) else None] += float(p)
                total += sum(w / norm * math.log(w / norm / got[q]) for q, w in want.items() if w > 0)
            totals.append(total)
        if totals:
            per_row.append(sum(totals) / len(totals))
    return sum(per_row) / len(per_row)


@pytest.mark.parametrize("mode", ["extend", "replace"])
def test_loss_matches_a_direct_computation(tokenizers_en, tokenizers_ru, ru_lines, mode):
    model, tokenizer, source, record, sequences = _extended(tokenizers_en, tokenizers_ru, mode)
    tree = piece_tree(record, model.get_input_embeddings().weight.shape[0])
    batch = DistillationCollator(tokenizer, source, max_length=24)(ru_lines[:3])
    teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=mode == "extend")
    weights = DistillationWeights(hidden=0, next_piece=0, piece_tree=1, next_token=0, teacher_share=1, gate=False)
    with torch.no_grad():
        targets = teacher_targets(teacher, batch, weights, tree=tree)
        _, parts = distillation_loss(model, targets, batch, weights, tree=tree)
        student = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        out = teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
    assert int(targets.tree_index[:, 2].max()) >= 1  # splits below the second level were scored
    assert parts["piece_tree"] > 0
    assert parts["piece_tree"] == pytest.approx(_direct(student, out.logits, batch, sequences), rel=1e-4)


def test_piece_tree_needs_its_table(tokenizers_en, en_lines):
    tokenizer = tokenizers_en["bytelevel"]
    model = make_model("qwen2-tied", tokenizer)
    batch = DistillationCollator(tokenizer, tokenizer, max_length=32)(en_lines[:2])
    teacher = Teacher(model, old_rows=len(tokenizer), frozen_old_rows=True)
    with pytest.raises(InvalidArgumentError, match="piece_tree"):
        teacher_targets(teacher, batch, DistillationWeights(piece_tree=1))


def test_a_tree_without_splits_scores_zero(tokenizers_en, tokenizers_ru, ru_lines):
    # the English Unigram tokenizer has no byte fallback: it writes no Russian token, so no node of the tree splits
    source = tokenizers_en["unigram"]
    model = copy.deepcopy(make_model("llama-untied", source))
    tokenizer = model.extend_vocabulary(tokenizers_ru["unigram"], source_tokenizer=source)
    record = vocabshift.get_record(model)
    assert not any(record.decomposition_lists())
    tree = piece_tree(record, model.get_input_embeddings().weight.shape[0])
    batch = DistillationCollator(tokenizer, source, max_length=24)(ru_lines[:2])
    teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=True)
    weights = DistillationWeights(hidden=0, next_piece=0, piece_tree=1, next_token=0, teacher_share=1, gate=False)
    with torch.no_grad():
        targets = teacher_targets(teacher, batch, weights, tree=tree)
        _, parts = distillation_loss(model, targets, batch, weights, tree=tree)
    assert len(targets.tree_nodes) == 0 and parts["piece_tree"] == 0.0
