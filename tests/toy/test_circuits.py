"""Tests of `mha_lib.toy.circuits`: the scores detect hand-built heads and reject random ones;
the circuits are the products of the right weight blocks and have rank <= d."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_lib.exercises.nb06 import _weights
from mha_lib.pytorch import MultiHeadAttention
from mha_lib.toy.circuits import (
    composition_score,
    duplicate_token_score,
    head_weights,
    induction_score,
    k_composition,
    ov_circuit,
    previous_token_score,
    q_composition,
    qk_circuit,
    random_composition,
    relation_scores,
    v_composition,
)


def previous_token_head(N: int) -> torch.Tensor:
    """Weights (N, N) of a hand-built previous-token head (token 0 attends to itself)."""
    A = torch.zeros(N, N)
    A[0, 0] = 1.0
    A[torch.arange(1, N), torch.arange(N - 1)] = 1.0
    return A


def random_heads(h: int, N: int, seed: int = 0) -> torch.Tensor:
    """Causal random attention weights (h, N, N)."""
    scores = torch.randn(h, N, N, generator=torch.Generator().manual_seed(seed))
    scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1)


def test_previous_token_score_detects_a_hand_built_head_and_rejects_random_ones():
    N = 12
    A = torch.stack([previous_token_head(N), *random_heads(3, N)])  # (4, N, N)
    score = previous_token_score(A)
    assert score.shape == (4,)
    assert float(score[0]) == 1.0
    assert bool((score[1:] < 0.4).all())
    batched = previous_token_score(torch.stack([A, A]))  # (B, h, N, N) -> (h,)
    torch.testing.assert_close(batched, score)


def test_induction_score_detects_a_hand_built_head():
    T = 5
    A = torch.eye(2 * T)  # first copy: attend to self
    for i in range(T, 2 * T):
        A[i] = 0.0
        A[i, i - T + 1] = 1.0  # the token after the previous occurrence
    heads = torch.stack([A, previous_token_head(2 * T), *random_heads(2, 2 * T)])
    score = induction_score(heads, T)
    assert float(score[0]) == 1.0 and bool((score[1:] < 0.4).all())
    with pytest.raises(ValueError, match="2T <= N"):
        induction_score(heads, 6)
    with pytest.raises(ValueError, match="T must be at least 2; got 1"):
        induction_score(heads, 1)
    with pytest.raises(TypeError, match="T must be an int; got float"):
        induction_score(heads, 5.0)


def test_scores_equal_the_exercise_references():
    A = _weights(0, 3, 2, 8)  # numpy (B, h, N, N)
    ref_prev = np.diagonal(A, -1, -2, -1).mean(axis=(0, 2))
    rows = np.arange(4, 8)
    ref_ind = A[:, :, rows, rows - 3].mean(axis=(0, 2))
    np.testing.assert_allclose(previous_token_score(torch.from_numpy(A)).numpy(), ref_prev)
    np.testing.assert_allclose(induction_score(torch.from_numpy(A), 4).numpy(), ref_ind)


def test_relation_scores():
    N = 6
    A = torch.stack([previous_token_head(N), torch.full((N, N), 1 / N)])[None]  # (1, 2, N, N)
    where = torch.stack([torch.arange(-1, N - 1), torch.full((N,), -1)])[None]  # (1, 2, N)
    where[0, 1, :3] = torch.tensor([2, 2, 2])
    scores = relation_scores(A, where)
    assert scores.shape == (2, 2)
    torch.testing.assert_close(scores[0], torch.tensor([1.0, 0.0]))  # head 0
    torch.testing.assert_close(scores[1], torch.tensor([1 / N, 1 / N]))  # uniform head


def test_circuits_are_the_products_of_the_head_blocks():
    torch.manual_seed(0)
    C, h = 12, 3
    d = C // h
    mha = MultiHeadAttention(C, h, bias=False, batch_first=True)
    x = torch.randn(5, C)
    q = x @ mha.in_proj_weight[:C].T  # (N, h*d)
    k = x @ mha.in_proj_weight[C : 2 * C].T
    for head in range(h):
        W_q, W_k, W_v, W_o = head_weights(mha, head)
        assert W_q.shape == W_k.shape == W_v.shape == (C, d) and W_o.shape == (d, C)
        cols = slice(head * d, (head + 1) * d)
        scores = q[:, cols] @ k[:, cols].T  # (N, N) unscaled scores of this head
        W_QK, W_OV = qk_circuit(mha, head), ov_circuit(mha, head)
        torch.testing.assert_close(x @ W_QK @ x.T, scores.detach(), atol=1e-5, rtol=1e-5)
        assert int(torch.linalg.matrix_rank(W_QK)) <= d
        assert int(torch.linalg.matrix_rank(W_OV)) <= d
    # the weights of head 1's map, with every other head removed, equal x W_OV^1 summed
    with torch.no_grad():
        out, w = mha(
            x,
            need_weights=True,
            average_attn_weights=False,
            head_mask=torch.tensor([0.0, 1.0, 0.0]),
        )
        torch.testing.assert_close(out, w[1] @ x @ ov_circuit(mha, 1), atol=1e-5, rtol=1e-5)


def test_composition_score():
    A = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    assert composition_score(A, A) > composition_score(A, torch.randn(6, 6))
    P = torch.zeros(6, 6)
    P[0, 0] = 1.0
    Q = torch.zeros(6, 6)
    Q[1, 1] = 1.0
    assert composition_score(P, Q) == 0.0 and composition_score(P, P) == 1.0
    with pytest.raises(ValueError, match=r"\(C, C\)"):
        composition_score(A, A[:3])


def test_duplicate_token_score_detects_a_hand_built_head():
    T = 5
    A = torch.zeros(2 * T, 2 * T)
    A[torch.arange(T), torch.arange(T)] = 1.0  # the first copy attends to itself
    A[torch.arange(T, 2 * T), torch.arange(T)] = 1.0  # the second copy to the earlier copy
    heads = torch.stack([A, previous_token_head(2 * T), *random_heads(2, 2 * T)])
    score = duplicate_token_score(heads, T)
    assert float(score[0]) == 1.0 and bool((score[1:] < 0.4).all())
    assert float(induction_score(A, T)) == 0.0  # one key too early for an induction head
    rows = np.arange(T, 2 * T)
    B = _weights(3, 2, 3, 2 * T)
    np.testing.assert_allclose(
        duplicate_token_score(torch.from_numpy(B), T).numpy(), B[:, :, rows, rows - T].mean((0, 2))
    )
    with pytest.raises(ValueError, match="2T <= N"):
        duplicate_token_score(heads, 6)


def test_compositions_are_the_normalised_products_of_elhage_et_al():
    gen = torch.Generator().manual_seed(0)
    W_QK, W_OV, W_OV1 = (torch.randn(6, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    norm = torch.linalg.norm
    assert k_composition(W_QK, W_OV) == pytest.approx(
        float(norm(W_QK @ W_OV.T) / (norm(W_QK) * norm(W_OV)))
    )
    assert q_composition(W_QK, W_OV) == pytest.approx(
        float(norm(W_OV @ W_QK) / (norm(W_QK) * norm(W_OV)))
    )
    assert v_composition(W_OV1, W_OV) == pytest.approx(
        float(norm(W_OV @ W_OV1) / (norm(W_OV1) * norm(W_OV)))
    )
    assert q_composition(W_QK, W_OV) != pytest.approx(k_composition(W_QK, W_OV))


def test_q_and_k_composition_see_the_side_the_earlier_head_writes_to():
    """A layer-0 head writes into a subspace S; a layer-1 head whose queries read only S has
    full Q-composition and none through its keys, and the other way round."""
    C = 8
    S = torch.zeros(C, C, dtype=torch.float64)
    S[0, 4] = 1.0  # W_OV: reads coordinate 0, writes coordinate 4
    reads_query = torch.zeros(C, C, dtype=torch.float64)
    reads_query[4, 1] = 1.0  # W_QK: query coordinate 4 against key coordinate 1
    assert q_composition(reads_query, S) == pytest.approx(1.0)
    assert k_composition(reads_query, S) == pytest.approx(0.0)
    assert k_composition(reads_query.T, S) == pytest.approx(1.0)
    assert q_composition(reads_query.T, S) == pytest.approx(0.0)


def test_random_composition_is_the_null_level_and_matches_the_exercise_reference():
    scores = random_composition(32, 16, count=50, seed=0)
    assert scores.shape == (50,)
    assert bool(((scores > 0) & (scores < 1)).all())
    assert 0.1 < float(scores.mean()) < 0.3 and float(scores.std()) < 0.05
    torch.testing.assert_close(scores, random_composition(32, 16, count=50, seed=0))
    rng = np.random.default_rng(1)
    W_QK, W_OV = rng.standard_normal((5, 5)), rng.standard_normal((5, 5))
    expected = np.linalg.norm(W_OV @ W_QK) / (np.linalg.norm(W_QK) * np.linalg.norm(W_OV))
    assert q_composition(torch.from_numpy(W_QK), torch.from_numpy(W_OV)) == pytest.approx(expected)
