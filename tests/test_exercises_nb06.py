"""The checkers of notebook 06 accept right answers and name the usual mistakes."""

import numpy as np
import pytest

from mha_lib.exercises import check_induction_score, check_per_head_previous_token_score


def verdict(capsys) -> str:
    """The single line a checker printed."""
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out


# previous_token_score ---------------------------------------------------------------------------


def test_check_per_head_previous_token_score_accepts_correct_forms(capsys):
    assert check_per_head_previous_token_score(
        lambda A: np.diagonal(A, -1, -2, -1).mean(axis=(0, 2))
    )
    assert "✓ per_head_previous_token_score: correct" in verdict(capsys)
    # a loop over queries
    assert check_per_head_previous_token_score(
        lambda A: (
            sum(A[:, :, i, i - 1] for i in range(1, A.shape[-1])).mean(axis=0) / (A.shape[-1] - 1)
        )
    )
    assert "✓" in verdict(capsys)
    # fancy indexing, returning a list
    assert check_per_head_previous_token_score(
        lambda A: list(
            A[:, :, np.arange(1, A.shape[-1]), np.arange(A.shape[-1] - 1)].mean(axis=(0, 2))
        )
    )
    assert "✓" in verdict(capsys)


def _prev(A, offset):
    return np.diagonal(A, offset, -2, -1).mean(axis=(0, 2))


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda A: _prev(A, 0), "diagonal A[i, i]"),
        (lambda A: _prev(A, 1), "NEXT token"),
        (lambda A: np.diagonal(np.roll(A, 1, axis=-1), 0, -2, -1).mean(axis=(0, 2)), "wraps"),
        (lambda A: np.diagonal(A, -1, -2, -1).sum(-1).mean(0) / A.shape[-1], "instead of N - 1"),
        (lambda A: np.diagonal(A, -1, -2, -1).sum(-1).mean(0), "sums over the queries"),
        (lambda A: np.full(A.shape[1], np.diagonal(A, -1, -2, -1).mean()), "averages the heads"),
        (lambda A: np.diagonal(A, -1, -2, -1).max(-1).mean(0), "largest weight"),
        (lambda A: A.mean(axis=(0, 2, 3)), "whole matrix"),
        (lambda A: np.diagonal(A, -1, -2, -1).mean(-1), "average over the batch"),
        (lambda A: None, "not implemented"),
        (lambda A: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_check_per_head_previous_token_score_rejects_mistakes(capsys, wrong, message):
    assert not check_per_head_previous_token_score(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ per_head_previous_token_score:") and message in out


# induction_score --------------------------------------------------------------------------------


def _ind(A, T, offset, start, stop):
    rows = np.arange(start, stop)
    return A[:, :, rows, rows + offset].mean(axis=(0, 2))


def test_check_induction_score_accepts_correct_forms(capsys):
    assert check_induction_score(lambda A, T: _ind(A, T, 1 - T, T, 2 * T))
    assert "✓ induction_score: correct" in verdict(capsys)
    assert check_induction_score(
        lambda A, T: np.diagonal(A, 1 - T, -2, -1)[..., 1 : T + 1].mean(axis=(0, 2))
    )
    assert "✓" in verdict(capsys)
    assert check_induction_score(
        lambda A, T: np.mean([A[:, :, i, i - T + 1] for i in range(T, 2 * T)], axis=(0, 1))
    )
    assert "✓" in verdict(capsys)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda A, T: _ind(A, T, -T, T, 2 * T), "previous occurrence itself"),
        (lambda A, T: _ind(A, T, -1, T, 2 * T), "previous token A[i, i - 1]"),
        (lambda A, T: _ind(A, T, -T - 1, T + 1, 2 * T), "BEFORE the previous occurrence"),
        (lambda A, T: _ind(A, T, 1 - T, T - 1, 2 * T - 1), "starts at query T - 1"),
        (lambda A, T: _ind(A, T, 1 - T, T, 2 * T - 1), "leaves out the last query"),
        (
            lambda A, T: A[:, :, np.arange(1, T + 1), np.arange(T, 2 * T)].mean(axis=(0, 2)),
            "transposed",
        ),
        (lambda A, T: np.full(A.shape[1], _ind(A, T, 1 - T, T, 2 * T).mean()), "averages the"),
        (
            lambda A, T: A[:, :, np.arange(T, 2 * T), np.arange(1, T + 1)].mean(axis=2),
            "average over the batch",
        ),
        (lambda A, T: None, "not implemented"),
    ],
)
def test_check_induction_score_rejects_mistakes(capsys, wrong, message):
    assert not check_induction_score(wrong)
    out = verdict(capsys)
    assert out.startswith("✗ induction_score:") and message in out
