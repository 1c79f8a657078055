"""Blockwise similarity helpers equal their dense counterparts; SVD factorization; SALT's least squares is e A⁺;
column statistics."""

from __future__ import annotations

import pytest
import torch

from vocabshift.errors import MethodOptionError
from vocabshift.methods import base, neighbors
from vocabshift.methods.focus import FocusConfig
from vocabshift.methods.neighbors import (
    MIN_TEMPERATURE,
    SparseWeights,
    normalize,
    sparsemax,
    sparsemax_neighbors,
    topk_neighbors,
)
from vocabshift.methods.ofa import OfaConfig
from vocabshift.methods.salt import SaltConfig, _least_squares
from vocabshift.methods.wordmatch import factorize


def _dense(weights: SparseWeights, keys: int) -> torch.Tensor:
    out = torch.zeros(weights.count, keys, dtype=torch.float64)
    out[weights.rows, weights.cols] = weights.values
    return out


def _reference_sparsemax(scores: torch.Tensor) -> torch.Tensor:
    """Sparsemax by its definition, one row at a time (Martins & Astudillo, 2016, Algorithm 1)."""
    out = torch.zeros_like(scores)
    for row, z in enumerate(scores):
        ordered = z.sort(descending=True).values
        k = max(k for k in range(1, len(z) + 1) if 1 + k * ordered[k - 1] > ordered[:k].sum())
        out[row] = (z - (ordered[:k].sum() - 1) / k).clamp_min(0)
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.05, 20.0])
def test_sparsemax_neighbors_equals_the_dense_computation(monkeypatch, temperature):
    monkeypatch.setattr(neighbors, "_BLOCK_ELEMENTS", 3000)  # many blocks
    generator = torch.Generator().manual_seed(0)
    queries, keys = torch.randn(70, 8, generator=generator), torch.randn(400, 8, generator=generator)
    weights = sparsemax_neighbors(queries, keys, temperature=temperature)
    scores = normalize(queries.double()) @ normalize(keys.double()).T / temperature
    expected = _reference_sparsemax(scores)
    torch.testing.assert_close(_dense(weights, len(keys)), expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(sparsemax(scores), expected, rtol=0, atol=1e-12)
    if temperature == 20.0:  # flat scores: supports beyond the first 64 candidates, found by widening
        assert weights.support_sizes().max() > 64


def test_sparsemax_at_the_smallest_temperature_takes_each_query_s_nearest_key():
    """Scores of 1e30: `1 + z_1 > z_1` is lost to rounding unless each row is shifted to start at 0 (an index error
    before)."""
    generator = torch.Generator().manual_seed(3)
    queries, keys = torch.randn(6, 8, generator=generator), torch.randn(50, 8, generator=generator)
    nearest = (normalize(queries) @ normalize(keys).T).argmax(dim=1)
    weights = sparsemax_neighbors(queries, keys, temperature=MIN_TEMPERATURE)
    torch.testing.assert_close(_dense(weights, len(keys)), torch.eye(len(keys), dtype=torch.float64)[nearest])
    scores = normalize(queries.double()) @ normalize(keys.double()).T / MIN_TEMPERATURE
    torch.testing.assert_close(sparsemax(scores), torch.eye(len(keys), dtype=torch.float64)[nearest])


@pytest.mark.parametrize("config", [
    lambda t: FocusConfig(word_vectors="cc.ru.300.bin", temperature=t),
    lambda t: OfaConfig(word_vectors="cc.ru.300.bin", temperature=t),
    lambda t: SaltConfig(word_vectors="cc.ru.300.bin", helper_model=torch.zeros(3, 2), temperature=t),
], ids=["focus", "ofa", "salt"])
def test_methods_refuse_a_temperature_whose_similarities_overflow(config):
    config(MIN_TEMPERATURE)
    with pytest.raises(MethodOptionError, match="temperature=1e-40"):
        config(1e-40)


def test_sparsemax_neighbors_is_exact_where_float32_cannot_rank(monkeypatch):
    """The support's edge between keys whose cosines differ by less than float32 resolution: with sparsemax over
    [1, 0.6], tau is 0.3, so the key at 0.3 + 1e-9 gets a tiny weight and the 30 at 0.3 - 1e-9 none. float32 ranks
    them at random (a float32 ranking with float64 rescoring of its top candidates misses it unless it widens while
    the lowest rescored score is near tau)."""
    monkeypatch.setattr(neighbors, "_START_CANDIDATES", 8)
    generator = torch.Generator().manual_seed(2)

    def key(cosine: float) -> torch.Tensor:  # a unit vector at `cosine` to the first axis
        rest = torch.randn(7, dtype=torch.float64, generator=generator)
        return torch.cat([torch.tensor([cosine], dtype=torch.float64), (1 - cosine**2) ** 0.5 * rest / rest.norm()])

    edge = [key(0.3 - 1e-9) for _ in range(30)] + [key(0.3 + 1e-9)]
    others = [key(-0.5 * float(torch.rand(1, generator=generator))) for _ in range(100)]
    keys = torch.stack([key(1.0), key(0.6), *edge, *others])
    queries = torch.eye(8, dtype=torch.float64)[:1]
    weights = sparsemax_neighbors(queries, keys)
    expected = _reference_sparsemax(normalize(queries) @ normalize(keys).T)
    assert expected[0, 32] > 0 and (expected[0] > 0).sum() == 3
    torch.testing.assert_close(_dense(weights, len(keys)), expected, rtol=0, atol=1e-12)


def test_topk_neighbors_and_weighted_rows_equal_dense(monkeypatch):
    monkeypatch.setattr(neighbors, "_BLOCK_ELEMENTS", 1000)
    generator = torch.Generator().manual_seed(1)
    queries, keys = torch.randn(50, 6, generator=generator), torch.randn(300, 6, generator=generator)
    values, index = topk_neighbors(queries, keys, 5)
    expected_values, expected_index = (normalize(queries) @ normalize(keys).T).topk(5, dim=1)
    assert torch.equal(index, expected_index)
    torch.testing.assert_close(values, expected_values)
    matrix, key_rows = torch.randn(1000, 12, generator=generator), torch.randperm(1000, generator=generator)[:300]
    weights = SparseWeights(torch.arange(50).repeat_interleave(5), index.flatten(), values.double().flatten(), 50)
    torch.testing.assert_close(weights.apply(matrix, key_rows), _dense(weights, 300).float() @ matrix[key_rows])


@pytest.mark.parametrize("cap", [5, 70])
def test_sparsemax_neighbors_cap_keeps_the_most_similar_keys_of_the_support(monkeypatch, cap):
    monkeypatch.setattr(neighbors, "_BLOCK_ELEMENTS", 3000)
    generator = torch.Generator().manual_seed(4)
    queries, keys = torch.randn(60, 8, generator=generator), torch.randn(400, 8, generator=generator)
    weights = sparsemax_neighbors(queries, keys, temperature=20.0, max_support=cap)
    scores = normalize(queries.double()) @ normalize(keys.double()).T / 20.0
    support = (_reference_sparsemax(scores) > 0).sum(dim=1)
    assert weights.capped == int((support > cap).sum()) > 0
    for row in range(len(queries)):
        kept = set(weights.cols[weights.rows == row].tolist())
        assert kept == set(scores[row].topk(int(min(support[row], cap))).indices.tolist())


@pytest.mark.parametrize("ridge", [0.0, 0.1])
def test_salt_least_squares_is_e_times_the_pseudo_inverse(ridge):
    """Per token: c = e A⁺ (ridge: c = e Aᵀ (A Aᵀ + λ I)⁻¹), including rank-deficient supports."""
    generator = torch.Generator().manual_seed(2)
    anchors, targets = torch.randn(40, 6, generator=generator), torch.randn(3, 6, generator=generator)
    anchors[7] = anchors[3] * 2  # collinear anchors: token 1's A has rank < k
    supports = [[0, 1, 2], [3, 7, 8, 9], list(range(10, 19))]  # k = 9 > h = 6: rank-deficient as well
    rows = torch.tensor([i for i, s in enumerate(supports) for _ in s])
    weights = SparseWeights(rows, torch.tensor([j for s in supports for j in s]), torch.ones(len(rows)).double(), 3)
    solved, stats = _least_squares(weights, anchors, targets, ridge)
    for token, support in enumerate(supports):
        a, e = anchors[support].double(), targets[token].double()
        if ridge:
            gram = a @ a.T
            shift = ridge * torch.linalg.eigvalsh(gram).clamp_min(0)[-torch.linalg.matrix_rank(a) :].mean()
            expected = e @ a.T @ torch.linalg.pinv(gram + shift * torch.eye(len(support)), hermitian=True)
            if torch.linalg.matrix_rank(a) < len(support):
                continue  # the ridge is applied on the range of A only: compared where A has full row rank
        else:
            expected = e @ torch.linalg.pinv(a)
        got = solved.values[solved.rows == token]
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-8)
        residual = (e - got @ a).norm() / e.norm()
        assert stats["residual"][token] == pytest.approx(float(residual), rel=1e-6)
    assert stats["rank"].tolist() == [3, 3, 6]


def test_factorize_reconstructs_and_orders_by_singular_value():
    generator = torch.Generator().manual_seed(3)
    matrix = torch.randn(500, 10, generator=generator) @ torch.diag(torch.linspace(3, 0.1, 10))
    full, low = factorize(matrix, 10), factorize(matrix, 4)
    torch.testing.assert_close(full.coordinates @ full.primitives, matrix, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(full.coordinates.T @ full.coordinates, torch.eye(10), atol=1e-4, rtol=1e-4)
    assert full.explained == pytest.approx(1.0)
    u, s, v = torch.linalg.svd(matrix.double(), full_matrices=False)
    best = (u[:, :4] * s[:4]) @ v[:4]
    torch.testing.assert_close((low.coordinates @ low.primitives).double(), best, atol=1e-4, rtol=1e-4)
    assert low.explained == pytest.approx(float((s[:4] ** 2).sum() / (s**2).sum()), rel=1e-6)


def test_column_std_mean_equals_torch(monkeypatch):
    monkeypatch.setattr(base, "_BLOCK", 7)  # several blocks and a short last one
    matrix = torch.randn(100, 5, generator=torch.Generator().manual_seed(3)) * 0.02 + 0.5
    std, mean = base.column_std_mean(matrix)
    expected_std, expected_mean = torch.std_mean(matrix.double(), dim=0)
    torch.testing.assert_close(std, expected_std.float(), rtol=1e-5, atol=0)
    torch.testing.assert_close(mean, expected_mean.float(), rtol=1e-6, atol=0)
