"""The ridge map SALT fits from helper rows to model rows: exact on linear data, honest about what it cannot see."""

from __future__ import annotations

import math

import torch

from vocabshift.methods.linear_map import fit_linear_map


def test_a_linear_relation_is_recovered_and_scored_on_held_out_pairs():
    generator = torch.Generator().manual_seed(0)
    source = torch.randn(300, 12, generator=generator)
    weight, offset = torch.randn(12, 5, generator=generator), torch.randn(5, generator=generator)
    fitted = fit_linear_map(source, source @ weight + offset, seed=0)
    assert fitted.held_out_r2 > 0.999 and fitted.ridge <= 1e-2
    query = torch.randn(7, 12, generator=generator)
    torch.testing.assert_close(fitted.predict(query), query @ weight + offset, atol=1e-2, rtol=1e-2)
    unrelated = fit_linear_map(source, torch.randn(300, 5, generator=generator), seed=0)
    assert unrelated.held_out_r2 < 0.05


def test_too_few_pairs_give_a_map_but_no_held_out_score():
    generator = torch.Generator().manual_seed(1)
    fitted = fit_linear_map(torch.randn(5, 4, generator=generator), torch.randn(5, 3, generator=generator), seed=0)
    assert math.isnan(fitted.held_out_r2) and torch.isfinite(fitted.weight).all()
    assert fitted.predict(torch.zeros(2, 4)).shape == (2, 3)
