"""The checkers of notebook 07 accept correct answers and name the usual mistakes."""

import numpy as np
import pytest
import torch

from mha_lib.conv import grid_positions, relative_position_scores
from mha_lib.exercises import check_relative_scores, check_value_weights


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# relative_scores --------------------------------------------------------------------------------


def positions(H, W):
    n = np.arange(H * W)
    return np.stack([n // W, n % W], axis=1)  # (N, 2), row by row


def scores_broadcast(H, W, shift, kappa):
    p = positions(H, W)  # (N, 2)
    delta = p[None, :, :] - p[:, None, :]  # (N, N, 2): key minus query
    return -kappa * ((delta - np.array(shift)) ** 2).sum(-1)  # (N, N)


def scores_loops(H, W, shift, kappa):
    N = H * W
    S = np.zeros((N, N))
    for n in range(N):
        for m in range(N):
            dy = (m // W - n // W) - shift[0]
            dx = (m % W - n % W) - shift[1]
            S[n, m] = -kappa * (dy * dy + dx * dx)
    return S


def scores_dimension_3(H, W, shift, kappa):
    # the quadratic encoding: v · r_δ with r_δ = (‖δ‖², δ_1, δ_2); equals the scores + κ‖Δ‖²
    p = positions(H, W)
    delta = p[None, :, :] - p[:, None, :]  # (N, N, 2)
    r = np.concatenate([(delta**2).sum(-1, keepdims=True), delta], axis=-1)  # (N, N, 3)
    v = -kappa * np.array([1.0, -2 * shift[0], -2 * shift[1]])  # (3,)
    return r @ v  # (N, N)


def scores_library(H, W, shift, kappa):
    pos = grid_positions(H, W)
    return relative_position_scores(pos, pos, torch.tensor([shift]), kappa)[0]  # (N, N) tensor


@pytest.mark.parametrize(
    "correct", [scores_broadcast, scores_loops, scores_dimension_3, scores_library]
)
def test_check_relative_scores_accepts_correct_forms(capsys, correct):
    assert check_relative_scores(correct) is True
    assert verdict(capsys) == "✓ relative_scores: correct\n"


def _softmax(S):
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _column_major(H, W, shift, kappa):
    n = np.arange(H * W)
    p = np.stack([n % H, n // H], axis=1)
    delta = p[None, :, :] - p[:, None, :]
    return -kappa * ((delta - np.array(shift)) ** 2).sum(-1)


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda H, W, s, a: scores_broadcast(H, W, s, a).T, "the peak is at q − Δ"),
        (lambda H, W, s, a: scores_broadcast(H, W, (-s[0], -s[1]), a), "the peak is at q − Δ"),
        (lambda H, W, s, a: -scores_broadcast(H, W, s, a), "the sign is wrong"),
        (lambda H, W, s, a: scores_broadcast(H, W, s, 1.0), "κ is missing"),
        (lambda H, W, s, a: -np.sqrt(-scores_broadcast(H, W, s, a) / a) * a, "not squared"),
        (lambda H, W, s, a: _softmax(scores_broadcast(H, W, s, a)), "returns the softmax"),
        (lambda H, W, s, a: scores_broadcast(H, W, (s[1], s[0]), a), "components of the shift"),
        (_column_major, "column by column"),
        (lambda H, W, s, a: scores_broadcast(H, W, s, a)[:-1], "expected shape"),
        (lambda H, W, s, a: None, "not implemented"),
        (lambda H, W, s, a: scores_broadcast(H, W, s, a) + np.eye(H * W), "wrong values"),
    ],
)
def test_check_relative_scores_rejects_mistakes(capsys, wrong, phrase):
    assert check_relative_scores(wrong) is False
    out = verdict(capsys)
    assert out.startswith("✗ relative_scores:") and phrase in out, out


def test_check_relative_scores_names_the_manhattan_distance(capsys):
    def manhattan(H, W, shift, kappa):
        p = positions(H, W)
        delta = p[None, :, :] - p[:, None, :]
        return -kappa * np.abs(delta - np.array(shift)).sum(-1)

    assert check_relative_scores(manhattan) is False
    assert "squared Euclidean" in verdict(capsys)


# value_weights ----------------------------------------------------------------------------------


def value_weights_permute(weight):
    C_out, C_in, k, _ = weight.shape
    return weight.permute(1, 2, 3, 0).reshape(C_in, k * k * C_out)  # (C_in, k²·C_out)


def value_weights_loop(weight):
    k = weight.shape[-1]
    return torch.cat([weight[:, :, i, j].T for i in range(k) for j in range(k)], dim=1)


def value_weights_numpy(weight):
    w = weight.numpy()  # (C_out, C_in, k, k)
    return np.einsum("oiab->iabo", w).reshape(w.shape[1], -1)


def value_weights_parameter(weight):  # an nn.Parameter (requires_grad) is read by its values
    return torch.nn.Parameter(value_weights_permute(weight))


@pytest.mark.parametrize(
    "correct",
    [value_weights_permute, value_weights_loop, value_weights_numpy, value_weights_parameter],
)
def test_check_value_weights_accepts_correct_forms(capsys, correct):
    assert check_value_weights(correct) is True
    assert verdict(capsys) == "✓ value_weights: correct\n"


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda w: w.reshape(w.shape[1], -1), "scrambled"),
        (lambda w: w.permute(1, 3, 2, 0).reshape(w.shape[1], -1), "wrong order"),
        (lambda w: value_weights_permute(w.flip(2, 3)), "flipped"),
        (lambda w: w.permute(1, 0, 2, 3).reshape(w.shape[1], -1), "grouped by output channel"),
        (lambda w: w.permute(0, 2, 3, 1).reshape(w.shape[0], -1), "(C_out, h·C_in)"),
        (lambda w: w[:, :, w.shape[2] // 2, w.shape[3] // 2].T, "one head's block"),
        (lambda w: w.permute(2, 3, 1, 0).reshape(-1, w.shape[0]), "stacked along the rows"),
        (lambda w: value_weights_permute(w) * 2, "wrong values"),
        (lambda w: 1 / 0, "ZeroDivisionError"),
        (lambda w: ..., "not implemented"),
    ],
)
def test_check_value_weights_rejects_mistakes(capsys, wrong, phrase):
    assert check_value_weights(wrong) is False
    out = verdict(capsys)
    assert out.startswith("✗ value_weights:") and phrase in out, out
