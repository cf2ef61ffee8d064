"""Tests of `mha_lib.circuits`: the scores detect hand-built heads and reject random ones;
the circuits are the products of the right weight blocks and have rank <= d."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_lib.circuits import (
    composition_score,
    head_weights,
    induction_score,
    ov_circuit,
    previous_token_score,
    qk_circuit,
    relation_scores,
)
from mha_lib.exercises.nb06 import _weights
from mha_lib.pytorch import MultiHeadAttention


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
    mha = MultiHeadAttention(C, h, bias=False)
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
