"""The teacher gate: the teacher's objectives count only after chunks where it predicts the next piece better."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

import vocabshift
from conftest import make_model
from vocabshift.training.distill.collator import DistillationCollator
from vocabshift.training.distill.losses import first_piece_probs, teacher_gate, text_nll
from vocabshift.training.distill.objective import distillation_loss, teacher_targets
from vocabshift.training.distill.pieces import first_pieces, piece_tree
from vocabshift.training.distill.teacher import Teacher
from vocabshift.training.distill.weights import DistillationWeights


def test_gate_compares_both_probabilities_of_the_next_piece():
    """Student ids 0..3 count for old pieces [0, 1, 2, 1]: the student's probability of piece 1 is that of ids 1 and
    3 together. The teacher wins where it gives the next piece more; never after a row's last real chunk."""
    probs = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]])
    grouped = first_piece_probs(probs.log(), torch.tensor([0, 1, 2, 1]), 3)
    assert torch.allclose(grouped, torch.tensor([[[0.1, 0.6, 0.3, 0.0], [0.7, 0.2, 0.1, 0.0], [0.25, 0.5, 0.25, 0]]]))
    student = grouped.gather(-1, torch.tensor([[[1], [0], [2]]])).squeeze(-1).log()  # the next pieces
    teacher = torch.tensor([[0.5, 0.8, 0.9]]).log()  # piece 1: 0.5 < 0.6; piece 0: 0.8 > 0.7
    assert teacher_gate(student, teacher, torch.tensor([[True, True, True]])).tolist() == [[0.0, 1.0, 0.0]]
    longer = [torch.cat([student, student[:, :1]], 1), torch.cat([teacher, teacher[:, :1]], 1)]
    assert teacher_gate(*longer, torch.tensor([[True, True, True, True]])).tolist() == [[0.0, 1.0, 1.0, 0.0]]
    assert teacher_gate(*longer, torch.tensor([[True, True, True, False]])).tolist() == [[0.0, 1.0, 0.0, 0.0]]


@pytest.fixture
def setup(tokenizers_en, tokenizers_ru, ru_lines):
    source = tokenizers_en["bytelevel"]
    model = copy.deepcopy(make_model("qwen2-tied", source))
    tokenizer = model.extend_vocabulary(tokenizers_ru["bytelevel"], source_tokenizer=source)
    record, rows = vocabshift.get_record(model), model.get_input_embeddings().weight.shape[0]
    teacher = Teacher(model, old_rows=record.old_vocab_size, frozen_old_rows=True)
    batch = DistillationCollator(tokenizer, source, max_length=24)(ru_lines[:3])
    return model, teacher, batch, first_pieces(record, rows), piece_tree(record, rows)


def _loss_and_grad(model, targets, batch, weights, pieces, tree):
    model.zero_grad()
    loss, parts = distillation_loss(model, targets, batch, weights, first_pieces=pieces, tree=tree)
    loss.backward()
    return loss.item(), parts, model.get_input_embeddings().weight.grad.clone()


def test_a_teacher_that_never_knows_better_leaves_cross_entropy(setup):
    """Where the teacher gives every next piece probability 0, the gated objective is plain cross-entropy: the same
    loss and gradient, every teacher objective 0, and the teacher won no chunk."""
    model, teacher, batch, pieces, tree = setup
    weights = DistillationWeights(chunk=1.0, teacher_share=1)
    targets = teacher_targets(teacher, batch, weights, tree=tree)
    never = dataclasses.replace(targets, piece_logps=torch.full_like(targets.piece_logps, -math.inf))
    loss, parts, grad = _loss_and_grad(model, never, batch, weights, pieces, tree)
    plain, _, plain_grad = _loss_and_grad(model, targets, batch, DistillationWeights.next_token_only(), pieces, tree)
    assert parts["teacher_wins"] == 0.0
    assert all(parts[name] == 0.0 for name in ("hidden", "chunk", "next_piece", "piece_tree"))
    assert loss == pytest.approx(plain, rel=1e-6)
    assert torch.allclose(grad, plain_grad, atol=1e-7)


def test_a_teacher_that_always_knows_better_counts_every_followed_chunk(setup):
    """Where the teacher is certain of every next piece it wins every chunk that another follows: piece_tree (which
    only scores those) and chunk (each chunk judged where it is predicted, after the one before) are the ungated
    ones, the others lose only each row's last chunk."""
    model, teacher, batch, pieces, tree = setup
    weights = DistillationWeights(chunk=1.0, teacher_share=1)
    ungated = DistillationWeights(chunk=1.0, teacher_share=1, gate=False)
    targets = teacher_targets(teacher, batch, weights, tree=tree)
    always = dataclasses.replace(targets, piece_logps=torch.zeros_like(targets.piece_logps))
    gated = distillation_loss(model, always, batch, weights, first_pieces=pieces, tree=tree)[1]
    plain = distillation_loss(model, teacher_targets(teacher, batch, ungated, tree=tree), batch, ungated,
                              first_pieces=pieces, tree=tree)[1]
    assert gated["teacher_wins"] == 1.0
    for name in ("piece_tree", "chunk"):
        assert gated[name] == pytest.approx(plain[name], rel=1e-6), name
    for name in ("hidden", "next_piece"):
        assert 0 < gated[name] < plain[name], name


def test_the_gate_judges_each_chunk_likelihood_where_it_is_predicted(setup):
    """chunk scores the likelihood of chunk k, which the student and the teacher predict after chunk k - 1: it counts
    where the teacher gave chunk k's first piece more probability, not chunk k + 1's."""
    model, teacher, batch, pieces, tree = setup
    weights = DistillationWeights(hidden=0, chunk=1.0, piece_tree=0, teacher_share=1, adaptive_share=False)
    targets = teacher_targets(teacher, batch, weights, tree=tree)
    with torch.no_grad():
        parts = distillation_loss(model, targets, batch, weights, first_pieces=pieces)[1]
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        out = teacher(batch["teacher_input_ids"], batch["teacher_attention_mask"], layer=-1, logits=True)
    per_row = []
    for b in range(len(batch["input_ids"])):
        ends, teacher_ends = batch["chunk_ends"][b].tolist(), batch["teacher_chunk_ends"][b].tolist()
        ids, teacher_ids = batch["input_ids"][b], batch["teacher_input_ids"][b]
        count, total = int(batch["chunk_mask"][b].sum()), 0.0
        for k in range(1, count):
            piece = int(teacher_ids[teacher_ends[k - 1] + 1])  # chunk k's first old piece
            student_piece = logits[b, ends[k - 1]].softmax(-1)[pieces == piece].sum().log()
            if out.logits[b, teacher_ends[k - 1]].log_softmax(-1)[piece] <= student_piece:
                continue
            span, teacher_span = slice(ends[k - 1], ends[k]), slice(teacher_ends[k - 1], teacher_ends[k])
            student = logits[b, span].log_softmax(-1).gather(-1, ids[span.start + 1: span.stop + 1, None])
            expected = out.logits[b, teacher_span].log_softmax(-1).gather(
                -1, teacher_ids[teacher_span.start + 1: teacher_span.stop + 1, None])
            total += abs(student.sum().item() - expected.sum().item())
        per_row.append(total / (count - 1))
    assert 0 < parts["chunk"] == pytest.approx(sum(per_row) / len(per_row), rel=1e-4)


def test_the_gate_without_next_piece(setup):
    """The gate judges from the next pieces' log probabilities alone, which teacher_targets keeps without next_piece:
    the other objectives are gated as with it."""
    model, teacher, batch, pieces, tree = setup
    without = DistillationWeights(next_piece=0, teacher_share=1, adaptive_share=False)
    with_it = DistillationWeights(teacher_share=1, adaptive_share=False)
    parts = [distillation_loss(model, teacher_targets(teacher, batch, w, tree=tree), batch, w, first_pieces=pieces,
                               tree=tree)[1] for w in (without, with_it)]
    assert "next_piece" not in parts[0]
    for name in ("hidden", "piece_tree", "next_token", "teacher_wins", "teacher_lead"):
        assert parts[0][name] == pytest.approx(parts[1][name], rel=1e-6), name


def test_the_gate_reports_the_share_of_chunks_the_teacher_won(setup):
    model, teacher, batch, pieces, tree = setup
    weights = DistillationWeights(teacher_share=1)
    parts = distillation_loss(model, teacher_targets(teacher, batch, weights, tree=tree), batch, weights,
                              first_pieces=pieces, tree=tree)[1]
    assert 0.0 <= parts["teacher_wins"] <= 1.0 and math.isfinite(parts["teacher_lead"])
    ungated = DistillationWeights(teacher_share=1, gate=False)
    parts = distillation_loss(model, teacher_targets(teacher, batch, ungated, tree=tree), batch, ungated,
                              first_pieces=pieces, tree=tree)[1]
    assert "teacher_wins" not in parts and "teacher_lead" not in parts


def test_the_text_lead_compares_both_losses_on_the_same_text(setup):
    """`teacher_text_lead` is (student loss - teacher loss) / student loss, each summed over the tokens after the
    first of the same sequences: the student's with the new tokenization, the teacher's over the old vocabulary
    with the old one; computed a few positions at a time, the sums are the same."""
    model, teacher, batch, pieces, tree = setup
    old_rows = vocabshift.get_record(model).old_vocab_size

    def summed(ids, mask, rows):
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits[..., :rows].float()
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        return (nll * mask[:, 1:]).sum()

    student = summed(batch["input_ids"], batch["attention_mask"], None)
    expected = summed(batch["teacher_input_ids"], batch["teacher_attention_mask"], old_rows)
    weights = DistillationWeights(teacher_share=1)
    targets = teacher_targets(teacher, batch, weights, tree=tree)
    assert targets.text_nll.sum().item() == pytest.approx(expected.item(), rel=1e-5)
    parts = distillation_loss(model, targets, batch, weights, first_pieces=pieces, tree=tree)[1]
    assert parts["teacher_text_lead"] == pytest.approx(((student - expected) / student).item(), rel=1e-4)
    with torch.no_grad():
        states = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    whole, blocks = (text_nll(lambda s: s, states, batch["input_ids"], batch["attention_mask"], rows=rows)
                     for rows in (1024, 5))
    assert torch.allclose(whole, blocks) and whole.sum().item() == pytest.approx(student.item(), rel=1e-5)
    fixed = DistillationWeights(teacher_share=1, adaptive_share=False)
    assert teacher_targets(teacher, batch, fixed, tree=tree).text_nll is None
