"""The checkers of notebook 03b: a catalogue of wrong answers, each rejected with a message
that names the mistake, and several correct forms, each accepted."""

import math

import numpy as np
import pytest
import torch

from mha_lib import softmax
from mha_lib.exercises import check_head_scores, check_two_heads_by_hand


def verdict(checker, fn, capsys):
    """Run a checker; return (passed, the one line it printed)."""
    passed = checker(fn)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1, lines
    return passed, lines[0]


def not_implemented(*args):
    return None  # your code here


# ---------------------------------------------------------------------------- head_scores


def _qk(X, W_q, W_k, h):
    N, d_k = X.shape[0], W_q.shape[1] // h
    q = (X @ W_q).reshape(N, h, d_k).transpose(1, 0, 2)  # (h, N, d_k)
    k = (X @ W_k).reshape(N, h, d_k).transpose(1, 0, 2)  # (h, N, d_k)
    return q, k, d_k


def scores_right(X, W_q, W_k, num_heads):
    q, k, d_k = _qk(X, W_q, W_k, num_heads)
    return q @ k.transpose(0, 2, 1) / math.sqrt(d_k)


def scores_loop(X, W_q, W_k, num_heads):
    d_k = W_q.shape[1] // num_heads
    return np.stack(
        [
            (X @ W_q[:, i * d_k : (i + 1) * d_k])
            @ (X @ W_k[:, i * d_k : (i + 1) * d_k]).T
            / np.sqrt(d_k)
            for i in range(num_heads)
        ]
    )


def scores_einsum_float32(X, W_q, W_k, num_heads):
    q, k, d_k = _qk(X.astype(np.float32), W_q.astype(np.float32), W_k.astype(np.float32), num_heads)
    return np.einsum("hnd,hmd->hnm", q, k) / np.float32(math.sqrt(d_k))


def scores_torch(X, W_q, W_k, num_heads):
    X, W_q, W_k = (torch.as_tensor(a) for a in (X, W_q, W_k))
    N, d_k = X.shape[0], W_q.shape[1] // num_heads
    q = (X @ W_q).view(N, num_heads, d_k).transpose(0, 1)
    k = (X @ W_k).view(N, num_heads, d_k).transpose(0, 1)
    return q @ k.transpose(-1, -2) / d_k**0.5


def scores_torch_float32(X, W_q, W_k, num_heads):
    return scores_torch(X, W_q, W_k, num_heads).float()


SCORES_RIGHT = [
    scores_right,
    scores_loop,
    scores_einsum_float32,
    scores_torch,
    scores_torch_float32,
]


@pytest.mark.parametrize("fn", SCORES_RIGHT, ids=lambda f: f.__name__)
def test_head_scores_accepts_correct_forms(fn, capsys):
    passed, line = verdict(check_head_scores, fn, capsys)
    assert passed and line.startswith("✓"), line


def scores_no_scale(X, W_q, W_k, num_heads):
    q, k, _ = _qk(X, W_q, W_k, num_heads)
    return q @ k.transpose(0, 2, 1)


def scores_full_width(X, W_q, W_k, num_heads):
    q, k, _ = _qk(X, W_q, W_k, num_heads)
    return q @ k.transpose(0, 2, 1) / math.sqrt(W_q.shape[1])


def scores_by_d_k(X, W_q, W_k, num_heads):
    q, k, d_k = _qk(X, W_q, W_k, num_heads)
    return q @ k.transpose(0, 2, 1) / d_k


def scores_softmaxed(X, W_q, W_k, num_heads):
    return softmax(scores_right(X, W_q, W_k, num_heads), axis=-1)


def scores_transposed(X, W_q, W_k, num_heads):
    q, k, d_k = _qk(X, W_q, W_k, num_heads)
    return k @ q.transpose(0, 2, 1) / math.sqrt(d_k)


def scores_wide_repeated(X, W_q, W_k, num_heads):
    d_k = W_q.shape[1] // num_heads
    wide = (X @ W_q) @ (X @ W_k).T / math.sqrt(d_k)
    return np.stack([wide] * num_heads)


def scores_keys_from_W_q(X, W_q, W_k, num_heads):
    return scores_right(X, W_q, W_q, num_heads)


def scores_reshape_bug(X, W_q, W_k, num_heads):
    N, d_k = X.shape[0], W_q.shape[1] // num_heads
    q, k = ((X @ W).reshape(num_heads, N, d_k) for W in (W_q, W_k))
    return q @ k.transpose(0, 2, 1) / math.sqrt(d_k)


def scores_interleaved(X, W_q, W_k, num_heads):
    N, d_k = X.shape[0], W_q.shape[1] // num_heads
    q, k = ((X @ W).reshape(N, d_k, num_heads).transpose(2, 0, 1) for W in (W_q, W_k))
    return q @ k.transpose(0, 2, 1) / math.sqrt(d_k)


def scores_d_k_from_C(X, W_q, W_k, num_heads):
    q, k, _ = _qk(X, W_q, W_k, num_heads)
    return q @ k.transpose(0, 2, 1) / math.sqrt(X.shape[1] // num_heads)


def scores_summed(X, W_q, W_k, num_heads):
    return scores_right(X, W_q, W_k, num_heads).sum(axis=0)  # (N, N): the wide head


def scores_head_axis_last(X, W_q, W_k, num_heads):
    return scores_right(X, W_q, W_k, num_heads).transpose(1, 2, 0)


def scores_two_heads_always(X, W_q, W_k, num_heads):
    return scores_right(X, W_q, W_k, 2)


SCORES_WRONG = [
    (scores_no_scale, "not divided by √d_k"),
    (scores_full_width, "the full width"),
    (scores_by_d_k, "not by its square root"),
    (scores_softmaxed, "these are the weights, not the scores"),
    (scores_transposed, "rows and columns are swapped"),
    (scores_wide_repeated, "every head got the wide head's scores"),
    (scores_keys_from_W_q, "the keys are computed with W_q"),
    (scores_reshape_bug, "reshape without transpose"),
    (scores_interleaved, "interleaved columns"),
    (scores_d_k_from_C, "read d_k off W_q"),
    (scores_summed, "that is one head (or the heads summed)"),
    (scores_head_axis_last, "the head axis comes last"),
    (scores_two_heads_always, "use num_heads"),
    (not_implemented, "not implemented yet"),
]


@pytest.mark.parametrize(("fn", "message"), SCORES_WRONG, ids=lambda x: getattr(x, "__name__", ""))
def test_head_scores_names_each_mistake(fn, message, capsys):
    passed, line = verdict(check_head_scores, fn, capsys)
    assert not passed and line.startswith("✗"), line
    assert message in line, line


# ---------------------------------------------------------------------------- two heads by hand


def _heads(n_tok, d_c, back=2, target=None, s=50.0, d_k=None, dtype=np.float64):
    """Two heads for [c_(i-back), c_target] (target None: the last token)."""
    target = n_tok - 1 if target is None else target
    C, d_k = d_c + n_tok, d_k or n_tok
    W_q, W_k = np.zeros((C, 2 * d_k)), np.zeros((C, 2 * d_k))
    for i in range(n_tok):
        W_q[d_c + i, i] = s
        W_q[d_c + i, d_k] = s
    for j in range(n_tok - back):
        W_k[d_c + j, j + back] = 1.0
    W_k[d_c + target, d_k] = 1.0
    W_v = np.zeros((C, 2 * d_c))
    W_v[:d_c, :d_c] = W_v[:d_c, d_c:] = np.eye(d_c)
    return tuple(W.astype(dtype) for W in (W_q, W_k, W_v, np.eye(2 * d_c)))


def two_right(n_tok, d_c):
    return _heads(n_tok, d_c)


def two_right_float32(n_tok, d_c):
    return _heads(n_tok, d_c, dtype=np.float32)


def two_right_torch(n_tok, d_c):
    return tuple(torch.from_numpy(W) for W in _heads(n_tok, d_c))


def two_right_torch_float32(n_tok, d_c):
    return tuple(torch.from_numpy(W).float() for W in _heads(n_tok, d_c))


def two_right_wide_keys(n_tok, d_c):
    return list(_heads(n_tok, d_c, d_k=n_tok + 3, s=80.0))  # a list, wider keys, another scale


TWO_RIGHT = [two_right, two_right_float32, two_right_torch, two_right_torch_float32]
TWO_RIGHT.append(two_right_wide_keys)


@pytest.mark.parametrize("fn", TWO_RIGHT, ids=lambda f: f.__name__)
def test_two_heads_accepts_correct_forms(fn, capsys):
    passed, line = verdict(check_two_heads_by_hand, fn, capsys)
    assert passed and line.startswith("✓"), line


def two_one_back(n_tok, d_c):
    return _heads(n_tok, d_c, back=1)


def two_itself(n_tok, d_c):
    return _heads(n_tok, d_c, back=0)


def two_first_token(n_tok, d_c):
    return _heads(n_tok, d_c, target=0)


def two_worked_example(n_tok, d_c):
    return _heads(n_tok, d_c, back=1, target=0)


def two_hard_coded_last(n_tok, d_c):
    return _heads(n_tok, d_c, target=5)


def two_swapped(n_tok, d_c):
    W_q, W_k, W_v, W_o = _heads(n_tok, d_c)
    return W_q, W_k, W_v, np.roll(W_o, d_c, axis=0)  # head 0 -> last half, head 1 -> first


def two_soft(n_tok, d_c):
    return _heads(n_tok, d_c, s=8.0)


def _mix(n_tok, d_c):
    """One attention pattern for both heads: half on i - 2, half on the last token."""
    C = d_c + n_tok
    W_q, W_k = np.zeros((C, 2 * (n_tok + 1))), np.zeros((C, 2 * (n_tok + 1)))
    for h in range(2):
        off = h * (n_tok + 1)
        for i in range(n_tok):
            W_q[d_c + i, off + i] = 50.0
            W_q[d_c + i, off + n_tok] = 50.0
        for j in range(n_tok - 2):
            W_k[d_c + j, off + j + 2] = 1.0
        W_k[d_c + n_tok - 1, off + n_tok] = 1.0
    W_v = np.zeros((C, 2 * d_c))
    W_v[:d_c, :d_c] = W_v[:d_c, d_c:] = np.eye(d_c)
    return W_q, W_k, W_v, np.eye(2 * d_c)


def two_no_values(n_tok, d_c):
    W_q, W_k, W_v, W_o = _heads(n_tok, d_c)
    return W_q, W_k, np.zeros_like(W_v), W_o


def two_rows_hard_coded(n_tok, d_c):
    return _heads(6, d_c)


def two_W_o_wrong_shape(n_tok, d_c):
    W_q, W_k, W_v, W_o = _heads(n_tok, d_c)
    return W_q, W_k, W_v, W_o[:, :d_c]


def two_three_arrays(n_tok, d_c):
    return _heads(n_tok, d_c)[:3]


TWO_WRONG = [
    (two_one_back, "one step back"),
    (two_itself, "looks at the token itself"),
    (two_first_token, "looks at token 0"),
    (two_worked_example, "the worked example's heads"),
    (two_hard_coded_last, "do not hard-code the sizes"),
    (two_swapped, "the two halves are swapped"),
    (two_soft, "not sharp enough"),
    (_mix, "the same half-and-half mix"),
    (two_no_values, "does not pass the content"),
    (two_rows_hard_coded, "do not hard-code the sizes"),
    (two_W_o_wrong_shape, "W_o has shape"),
    (two_three_arrays, "it returns 3 arrays"),
    (not_implemented, "not implemented yet"),
]


@pytest.mark.parametrize(("fn", "message"), TWO_WRONG, ids=lambda x: getattr(x, "__name__", ""))
def test_two_heads_names_each_mistake(fn, message, capsys):
    passed, line = verdict(check_two_heads_by_hand, fn, capsys)
    assert not passed and line.startswith("✗"), line
    assert message in line, line
