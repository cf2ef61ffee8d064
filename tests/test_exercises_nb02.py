"""The checkers of notebook 02 accept the reference and name the typical mistakes."""

import numpy as np
import pytest

from mha_lib import scaled_dot_product_attention, softmax
from mha_lib.exercises import (
    check_attention_with_weights,
    check_next_token_head,
    check_project_qkv,
)

# --- project_qkv -------------------------------------------------------------


def project_qkv(X, W_q, W_k, W_v):
    return X @ W_q, X @ W_k, X @ W_v


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda X, W_q, W_k, W_v: (X @ W_q.T, X @ W_k.T, X @ W_v.T), "transposed"),
        (lambda X, W_q, W_k, W_v: (W_q @ X, W_k @ X, W_v @ X), "wrong side"),
        (lambda X, W_q, W_k, W_v: (X @ W_k, X @ W_q, X @ W_v), "Q and K are swapped"),
        (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_q, X @ W_q), "W_q for all three"),
        (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_k, X @ W_k), "V is wrong"),
        (lambda X, W_q, W_k, W_v: X @ W_q, "expected a tuple"),
        (lambda X, W_q, W_k, W_v: ..., "not implemented"),
    ],
)
def test_project_qkv_rejects(wrong, phrase, capsys):
    assert check_project_qkv(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ project_qkv:")
    assert phrase in out


def test_project_qkv_accepts_reference(capsys):
    assert check_project_qkv(project_qkv) is True
    assert capsys.readouterr().out == "✓ project_qkv: correct\n"


def test_project_qkv_catches_wrong_shape_only_in_rectangular_round(capsys):
    def first_rows(X, W_q, W_k, W_v):  # right when N = d_k, wrong otherwise
        Q, K, V = X @ W_q, X @ W_k, X @ W_v
        return Q[: W_q.shape[1]], K[: W_k.shape[1]], V

    assert check_project_qkv(first_rows) is False
    assert "Q has shape (3, 3); expected (N, d_k) = (5, 3)" in capsys.readouterr().out


# --- attention_with_weights --------------------------------------------------


def attention_with_weights(X, W_q, W_k, W_v):
    return scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v)[0]


def _scores(X, W_q, W_k):
    return (X @ W_q) @ (X @ W_k).T


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (
            lambda X, W_q, W_k, W_v: (
                softmax(_scores(X, W_q, W_k) / np.sqrt(X.shape[1])) @ (X @ W_v)
            ),
            "√C",
        ),
        (
            lambda X, W_q, W_k, W_v: softmax(_scores(X, W_q, W_k)) @ (X @ W_v),
            "not scaled",
        ),
        (
            lambda X, W_q, W_k, W_v: (
                softmax(_scores(X, W_q, W_k) / np.sqrt(W_q.shape[1])).T @ (X @ W_v)
            ),
            "transposed",
        ),
        (
            lambda X, W_q, W_k, W_v: softmax(_scores(X, W_q, W_k) / np.sqrt(W_q.shape[1])) @ X,
            "uses X as the values",
        ),
        (
            lambda X, W_q, W_k, W_v: (
                softmax(_scores(X, W_q, W_k) / np.sqrt(W_q.shape[1]), axis=0) @ (X @ W_v)
            ),
            "wrong axis",
        ),
        (
            lambda X, W_q, W_k, W_v: (
                softmax(_scores(X, W_k, W_q) / np.sqrt(W_q.shape[1])) @ (X @ W_v)
            ),
            "swapped",
        ),
        (
            lambda X, W_q, W_k, W_v: scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v),
            "returns a tuple",
        ),
        (
            lambda X, W_q, W_k, W_v: scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v)[1],
            "returns the attention weights",
        ),
        (lambda X, W_q, W_k, W_v: None, "not implemented"),
    ],
)
def test_attention_with_weights_rejects(wrong, phrase, capsys):
    assert check_attention_with_weights(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ attention_with_weights:")
    assert phrase in out


def test_attention_with_weights_accepts_reference(capsys):
    assert check_attention_with_weights(attention_with_weights) is True
    assert capsys.readouterr().out == "✓ attention_with_weights: correct\n"


# --- next_token_head ---------------------------------------------------------


def _shift_head(N, C, k, beta=16.0):
    W_q = np.zeros((C + N, N))  # (C + N, d_k) with d_k = N
    W_k = np.zeros((C + N, N))
    W_q[C:] = beta * np.eye(N, k=k)  # query i = beta * e_{i+k}
    W_k[C:] = np.eye(N)  # key j = e_j
    return W_q, W_k


def test_next_token_head_accepts_reference(capsys):
    assert check_next_token_head(lambda N, C: _shift_head(N, C, k=1)) is True
    assert capsys.readouterr().out == "✓ next_token_head: correct\n"


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda N, C: _shift_head(N, C, k=-1), "previous-token head"),
        (lambda N, C: _shift_head(N, C, k=0), "attends to itself"),
        (lambda N, C: _shift_head(N, C, k=1, beta=2.0), "weakly"),
        (lambda N, C: tuple(W[C:] for W in _shift_head(N, C, k=1)), "expected (C + N, d_k)"),
        (lambda N, C: _shift_head(N, C, k=1)[0], "expected a tuple"),
        (lambda N, C: None, "not implemented"),
    ],
)
def test_next_token_head_rejects(wrong, phrase, capsys):
    assert check_next_token_head(wrong) is False
    out = capsys.readouterr().out
    assert out.startswith("✗ next_token_head:")
    assert phrase in out


def test_next_token_head_rejects_content_dependent_answer(capsys):
    def content_too(N, C):
        W_q, W_k = _shift_head(N, C, k=1)
        W_k[:C] = 10.0  # keys also shout their content: random content wins
        return W_q, W_k

    assert check_next_token_head(content_too) is False
    assert "✗ next_token_head:" in capsys.readouterr().out
