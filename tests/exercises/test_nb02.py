"""The checkers of notebook 02: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted."""

import numpy as np
import pytest
import torch

from mha_lib import scaled_dot_product_attention, softmax
from mha_lib.exercises import (
    check_attention_with_weights,
    check_next_token_head,
    check_project_qkv,
)


def verdict(checker, fn, capsys):
    """Run a checker; return (passed, the one line it printed)."""
    passed = checker(fn)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return passed, lines[0]


# --- project_qkv -------------------------------------------------------------


def project_qkv(X, W_q, W_k, W_v):
    return X @ W_q, X @ W_k, X @ W_v


def project_torch(X, W_q, W_k, W_v):
    """A list of tensors with requires_grad, as a learner with torch habits might return."""
    X = torch.from_numpy(X)
    return [X @ torch.from_numpy(W).requires_grad_() for W in (W_q, W_k, W_v)]


QKV_RIGHT = [
    project_qkv,
    project_torch,
    lambda X, W_q, W_k, W_v: [torch.from_numpy(X @ W).float() for W in (W_q, W_k, W_v)],
    lambda X, W_q, W_k, W_v: tuple(np.einsum("nc,cd->nd", X, W) for W in (W_q, W_k, W_v)),
    lambda X, W_q, W_k, W_v: tuple((X @ W).astype(np.float32) for W in (W_q, W_k, W_v)),
]

QKV_WRONG = [
    (lambda X, W_q, W_k, W_v: (X @ W_q.T, X @ W_k.T, X @ W_v.T), "not X @ W_q.T"),
    (lambda X, W_q, W_k, W_v: (W_q @ X, W_k @ X, W_v @ X), "wrong side"),
    (lambda X, W_q, W_k, W_v: ((X @ W_q).T, (X @ W_k).T, (X @ W_v).T), "results are transposed"),
    (lambda X, W_q, W_k, W_v: (X.T @ W_q, X.T @ W_k, X.T @ W_v), "multiplies X.T"),
    (lambda X, W_q, W_k, W_v: (X * W_q, X * W_k, X * W_v), "entry by entry"),
    (lambda X, W_q, W_k, W_v: (X @ W_k, X @ W_q, X @ W_v), "Q and K are swapped"),
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_q, X @ W_q), "W_q for all three"),
    (lambda X, W_q, W_k, W_v: (X @ W_v, X @ W_k, X @ W_q), "wrong order"),
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_k, 2 * X @ W_v), "V is wrong"),
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_k), "of 3 arrays; got 2"),
    (lambda X, W_q, W_k, W_v: X @ W_q, "it returns one array of shape (4, 4)"),
    (lambda X, W_q, W_k, W_v: {"Q": X @ W_q, "K": X @ W_k, "V": X @ W_v}, "got dict"),
    (
        lambda X, W_q, W_k, W_v: X @ np.concatenate([W_q, W_k, W_v], axis=1),
        "it returns one array of shape (4, 12)",
    ),
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_k, "V"), "tuple (Q, K, V) of arrays"),
    (lambda X, W_q, W_k, W_v: ..., "not implemented"),
    # K and V swapped: once "K is wrong: expected K = X @ W_k"
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_v, X @ W_k), "K and V are swapped"),
    (lambda X, W_q, W_k, W_v: (X @ W_v, X @ W_k, X @ W_q), "wrong order"),
    (lambda X, W_q, W_k, W_v: (X @ W_k, X @ W_v, X @ W_q), "the arrays are in the wrong order (X"),
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_k, X @ W_k), "V is computed with W_k"),
    (lambda X, W_q, W_k, W_v: (X @ W_q, X @ W_q, X @ W_v), "K is computed with W_q"),
    # torch habits on numpy arrays
    (lambda X, W_q, W_k, W_v: tuple(torch.matmul(X, W) for W in (W_q, W_k, W_v)), "torch.matmul()"),
    (lambda X, W_q, W_k, W_v: tuple(X @ W.t() for W in (W_q, W_k, W_v)), "numpy's is x.T"),
]


def first_rows(X, W_q, W_k, W_v):  # right when N = d_k, wrong otherwise
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    return Q[: W_q.shape[1]], K[: W_k.shape[1]], V


def transposed_only_when_it_fits(X, W_q, W_k, W_v):  # (d_k, N) in the second case
    return (X @ W_q).T, X @ W_k, X @ W_v


QKV_WRONG += [
    (first_rows, "Q has shape (3, 3); expected (N, d_k) = (5, 3)"),
    (transposed_only_when_it_fits, "Q is transposed"),
]


@pytest.mark.parametrize("fn", QKV_RIGHT)
def test_project_qkv_accepts(fn, capsys):
    assert verdict(check_project_qkv, fn, capsys) == (True, "✓ project_qkv: correct")


@pytest.mark.parametrize(("fn", "words"), QKV_WRONG)
def test_project_qkv_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_project_qkv, fn, capsys)
    assert not passed and line.startswith("✗ project_qkv: ") and words in line, line


def test_project_qkv_names_a_transpose_that_shows_only_in_the_shape(capsys):
    def q_transposed(X, W_q, W_k, W_v):
        Q = X @ W_q
        return (Q.T if Q.shape[0] != Q.shape[1] else Q), X @ W_k, X @ W_v

    passed, line = verdict(check_project_qkv, q_transposed, capsys)
    assert not passed and "Q is transposed: it has shape (3, 5)" in line


# --- attention_with_weights --------------------------------------------------


def attention_with_weights(X, W_q, W_k, W_v):
    return scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v)[0]


def attention_row_by_row(X, W_q, W_k, W_v):
    """One query at a time, in float32."""
    Q, K, V = (X @ W for W in (W_q, W_k, W_v))
    rows = [softmax(q @ K.T / np.sqrt(K.shape[1])) @ V for q in Q]
    return np.array(rows, dtype=np.float32)


def attention_torch(X, W_q, W_k, W_v):
    X, W_q, W_k, W_v = (torch.from_numpy(a) for a in (X, W_q, W_k, W_v))
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    return torch.softmax(Q @ K.T / K.shape[1] ** 0.5, dim=-1) @ V  # a tensor


HEAD_RIGHT = [
    attention_with_weights,
    attention_row_by_row,
    attention_torch,
    lambda X, W_q, W_k, W_v: attention_torch(X, W_q, W_k, W_v).float(),
]


def head(scale=None, axis=-1, swap=False, values=None, transpose_weights=False, no_softmax=False):
    """A learner's head with one mistake switched on."""

    def fn(X, W_q, W_k, W_v):
        Q, K, V = X @ W_q, X @ W_k, X @ W_v
        if swap:
            Q, K = K, Q
        s = Q @ K.T / (np.sqrt(K.shape[1]) if scale is None else scale(X, W_q, W_v))
        A = s if no_softmax else softmax(s, axis=axis)
        A = A.T if transpose_weights else A
        return A @ {"X": X, "K": K, "Q": Q, None: V}[values]

    return fn


def unstable(X, W_q, W_k, W_v):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    e = np.exp(Q @ K.T / np.sqrt(K.shape[1]))
    return e / e.sum(axis=-1, keepdims=True) @ V


def first_tokens_only(X, W_q, W_k, W_v):
    """Hard-codes the running case's 5 tokens as the keys: right only when N = 5."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    return softmax(Q @ K[:5].T / np.sqrt(K.shape[1])) @ V[:5]


def clipped_scores(X, W_q, W_k, W_v):
    """Clips the scaled scores to [-50, 50]: right for ordinary scores, wrong for large ones."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    return softmax(np.clip(Q @ K.T / np.sqrt(K.shape[1]), -50, 50)) @ V


HEAD_WRONG = [
    (head(scale=lambda X, W_q, W_v: np.sqrt(X.shape[1])), "√C"),
    (head(scale=lambda X, W_q, W_v: np.sqrt(W_v.shape[1])), "√d_v"),
    (head(scale=lambda X, W_q, W_v: np.sqrt(X.shape[0])), "√N"),
    (head(scale=lambda X, W_q, W_v: 1.0), "not scaled"),
    (head(scale=lambda X, W_q, W_v: W_q.shape[1]), "by d_k"),
    (head(scale=lambda X, W_q, W_v: 2.0), "right with d_k = 4, d_v = 3"),
    (head(scale=lambda X, W_q, W_v: 2.0), "read d_k = W_q.shape[1]"),
    (first_tokens_only, "right with N = 5 tokens of C = 6 features"),
    (clipped_scores, "right when the scores are about 1 and wrong when they are about 1e3"),
    (head(transpose_weights=True), "weights are transposed"),
    (head(axis=0), "wrong axis"),
    (head(swap=True), "swapped"),
    (head(no_softmax=True), "no softmax"),
    (head(values="X"), "uses X as the values"),
    (head(values="K"), "uses K as the values"),
    (head(values="Q"), "uses Q as the values"),
    (unstable, "large (about 1e3)"),
    (
        lambda X, W_q, W_k, W_v: scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v),
        "returns a tuple",
    ),
    (
        lambda X, W_q, W_k, W_v: scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v)[1],
        "returns the attention weights",
    ),
    (lambda X, W_q, W_k, W_v: None, "not implemented"),
    # K and V swapped: once a shape error ("your function raised ValueError")
    (lambda X, W_q, W_k, W_v: attention_with_weights(X, W_q, W_v, W_k), "K and V are swapped"),
    (head(scale=lambda X, W_q, W_v: 1 / np.sqrt(W_q.shape[1])), "multiplies the scores by √d_k"),
    (lambda X, W_q, W_k, W_v: attention_with_weights(X, W_q, W_k, W_v).T, "output is transposed"),
    (
        lambda X, W_q, W_k, W_v: softmax((X @ W_q) @ (X @ W_k).transpose(-2, -1)) @ (X @ W_v),
        "K.transpose(-2, -1)",
    ),
    (
        lambda X, W_q, W_k, W_v: torch.softmax((X @ W_q) @ (X @ W_k).T / 2, dim=-1) @ (X @ W_v),
        "it passes a numpy array to torch.softmax()",
    ),
    (
        lambda X, W_q, W_k, W_v: softmax((X @ W_q) @ (X @ W_k).T, axis=-1).view(-1) @ X,
        "calls .view(...)",
    ),
]


def test_attention_with_weights_adds_no_hint_that_the_answer_does_not_show(capsys):
    """Wrong as soon as anything differs from the first case: no probe passes, so no hint."""

    def wrong_unless_case_one(X, W_q, W_k, W_v):
        off = X.shape != (5, 6) or W_q.shape[1] != 4
        return attention_with_weights(X, W_q, W_k, W_v) + 0.1 * off

    passed, line = verdict(check_attention_with_weights, wrong_unless_case_one, capsys)
    assert not passed and "wrong values" in line and "[" not in line, line


@pytest.mark.parametrize("fn", HEAD_RIGHT)
def test_attention_with_weights_accepts(fn, capsys):
    passed, line = verdict(check_attention_with_weights, fn, capsys)
    assert passed and line == "✓ attention_with_weights: correct"


@pytest.mark.parametrize(("fn", "words"), HEAD_WRONG)
def test_attention_with_weights_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_attention_with_weights, fn, capsys)
    assert not passed and line.startswith("✗ attention_with_weights: ") and words in line, line


# --- next_token_head ---------------------------------------------------------


def growing_beta(N, d_k):
    """β = 2·√d_k·ln N: the next token's score leads by 2 ln N, e^(2 ln N) = N² against N - 1."""
    return 2 * np.sqrt(d_k) * np.log(N)


def shift_head(N, C, k=1, beta=None, d_k=None):
    """Queries beta * e_(i+k), keys e_j, both in the position rows, d_k = N (or larger);
    beta defaults to one that grows with N."""
    d_k = d_k or N
    beta = growing_beta(N, d_k) if beta is None else beta
    W_q = np.zeros((C + N, d_k))  # (C + N, d_k)
    W_k = np.zeros((C + N, d_k))
    W_q[C:, :N] = beta * np.eye(N, k=k)  # query i = beta * e_{i+k}
    W_k[C:, :N] = np.eye(N)  # key j = e_j
    return W_q, W_k


def shift_the_keys(N, C):
    """The other valid design: query i = beta * e_i, key j = e_(j-1), as tensors in a list."""
    W_q = torch.zeros(C + N, N)
    W_k = torch.zeros(C + N, N)
    W_q[C:] = float(growing_beta(N, N)) * torch.eye(N)
    W_k[C:] = torch.from_numpy(np.eye(N, k=-1)).float()
    return [W_q, torch.nn.Parameter(W_k)]


NEXT_RIGHT = [
    shift_head,
    shift_the_keys,
    lambda N, C: shift_head(N, C, beta=40.0, d_k=N + 5),  # a wider d_k, a larger beta
    lambda N, C: shift_head(N, C, beta=float(N)),  # β = N: a lead of √N, faster than ln N
    lambda N, C: shift_head(N, C, d_k=N + 3),  # a wider d_k, β grown with it
]


def content_too(N, C):
    W_q, W_k = shift_head(N, C)
    W_k[:C] = 10.0  # keys also shout their content: random content wins
    return W_q, W_k


def no_nan(N, C):
    W_q, W_k = shift_head(N, C)
    W_q[0, 0] = np.nan
    return W_q, W_k


def shift_the_keys_the_same_way(N, C):
    """Query i = beta * e_i, key j = e_(j+1): the shift of the solution, put on the key side."""
    W_q, W_k = shift_head(N, C, k=0)
    W_k[C:] = np.eye(N, k=1)
    return W_q, W_k


NEXT_WRONG = [
    (lambda N, C: shift_head(N, C, k=-1), "previous-token head"),
    (lambda N, C: shift_head(N, C, k=-1), "the queries carry np.eye(N, k=-1)"),
    (shift_the_keys_the_same_way, "the keys carry the shift, np.eye(N, k=1)"),
    (shift_the_keys_the_same_way, "key j holds position j+1 and query i finds key i-1"),
    (lambda N, C: shift_head(N, C, k=0), "attends to itself"),
    (lambda N, C: shift_head(N, C, beta=2.0), "weakly"),
    (lambda N, C: shift_head(N, C, beta=8.0, d_k=4 * N), "weakly"),
    # right for N <= 11, wrong for long sequences: the scale does not grow enough with N
    (lambda N, C: shift_head(N, C, beta=16.0), "Yours is a fixed scale"),
    (lambda N, C: shift_head(N, C, beta=16.0), "at N = 30 the next token gets only 0.39"),
    (lambda N, C: shift_head(N, C, beta=16.0), "competitors grow with N"),
    (lambda N, C: shift_head(N, C, beta=10.0), "Yours is a fixed scale"),
    (lambda N, C: shift_head(N, C, beta=4 * np.sqrt(N)), "only cancels the division by √d_k"),
    (lambda N, C: shift_head(N, C, beta=4 * np.sqrt(N)), "at N = 64"),
    (lambda N, C: shift_head(N, C, beta=6 * np.log(N)), "more slowly than √d_k"),
    (lambda N, C: shift_head(N, C, beta=3 * np.sqrt(N) + np.log(N)), "the lead shrinks"),
    (
        lambda N, C: shift_head(N, C, beta=np.sqrt(N) * (1 + np.sqrt(np.log(N)))),
        "more slowly than ln(N - 1)",
    ),
    (lambda N, C: tuple(W[C:] for W in shift_head(N, C)), "expected (C + N, d_k)"),
    (lambda N, C: shift_head(11, 6), "use the arguments"),
    (lambda N, C: (shift_head(N, C)[0], shift_head(N, C, d_k=N + 1)[1]), "the same d_k"),
    (content_too, "use only the position features"),
    (no_nan, "inf or NaN"),
    (lambda N, C: shift_head(N, C)[0], "expected a tuple"),
    (lambda N, C: None, "not implemented"),
]


@pytest.mark.parametrize("fn", NEXT_RIGHT)
def test_next_token_head_accepts(fn, capsys):
    assert verdict(check_next_token_head, fn, capsys) == (True, "✓ next_token_head: correct")


@pytest.mark.parametrize(("fn", "words"), NEXT_WRONG)
def test_next_token_head_names_the_mistake(fn, words, capsys):
    passed, line = verdict(check_next_token_head, fn, capsys)
    assert not passed and line.startswith("✗ next_token_head: ") and words in line, line


def test_catalogues_are_complete():
    for wrong, right in (
        (QKV_WRONG, QKV_RIGHT),
        (HEAD_WRONG, HEAD_RIGHT),
        (NEXT_WRONG, NEXT_RIGHT),
    ):
        assert len(wrong) >= 6 and len(right) >= 2
