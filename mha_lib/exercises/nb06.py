"""Checkers for notebook 06 (heads that learn to specialise).

- `check_per_head_previous_token_score(fn)`: fn(A (B, h, N, N)) -> (h,), the mean weight from
  query i on key i - 1 over i >= 1 and over the batch;
- `check_induction_score(fn)`: fn(A (B, h, 2T, 2T), T) -> (h,), the mean weight from query i
  of the second copy (T <= i < 2T) on key i - T + 1, the token after the previous occurrence.

The references are written in numpy here (tests check that they equal `mha_lib.circuits`),
so this module does not import torch. The test weights are random rows that sum to 1, with
N ≠ h ≠ B, so a wrong axis or a wrong diagonal gives a different number.
"""

from __future__ import annotations

import numpy as np

from ._base import as_array, checker, close, diagnose, run

__all__ = ["check_induction_score", "check_per_head_previous_token_score"]


def _weights(seed: int, B: int, h: int, N: int) -> np.ndarray:
    """Random attention weights (B, h, N, N), every row summing to 1."""
    scores = np.random.default_rng(seed).standard_normal((B, h, N, N)) * 2.0
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)  # (B, h, N, N)


def _stripe(A: np.ndarray, offset: int) -> np.ndarray:
    """A[..., i, i + offset] for every i where it exists: (B, h, n)."""
    return np.diagonal(A, offset=offset, axis1=-2, axis2=-1)


# ---------------------------------------------------------------------------- previous token


def _previous_mistakes(A: np.ndarray) -> dict[str, np.ndarray]:
    _, h, N, _ = A.shape
    below = _stripe(A, -1)  # (B, h, N - 1)
    return {
        "that is the diagonal A[i, i] (each token on itself); the previous token is key "
        "i - 1, one below the diagonal": _stripe(A, 0).mean(axis=(0, 2)),
        "that is the weight on the NEXT token, A[i, i + 1] (rows are queries, columns keys); "
        "the previous token is A[i, i - 1]": _stripe(A, 1).mean(axis=(0, 2)),
        "query 0 has no previous token: it wraps around to the last key (np.roll?); average "
        "over i >= 1 only": (below.sum(axis=-1) + A[:, :, 0, -1]).mean(axis=0) / N,
        "it divides by N instead of N - 1: only the N - 1 queries i >= 1 have a previous "
        "token": below.sum(axis=-1).mean(axis=0) / N,
        "it sums over the queries instead of averaging them": below.sum(axis=-1).mean(axis=0),
        "it averages the heads together: return one score per head, (h,)": np.full(h, below.mean()),
        "it takes the largest weight below the diagonal, not the mean": below.max(axis=-1).mean(
            axis=0
        ),
        "it averages the whole matrix (every row sums to 1, so that is 1/N), not the "
        "stripe A[i, i - 1]": A.mean(axis=(0, 2, 3)),
    }


@checker("per_head_previous_token_score")
def check_per_head_previous_token_score(fn):
    """Check fn(A (B, h, N, N)) -> (h,) = mean over b and i >= 1 of A[b, :, i, i - 1]."""
    problem = None
    for seed, (B, h, N) in enumerate(((3, 2, 7), (1, 4, 5))):
        A = _weights(seed, B, h, N)
        expected = _stripe(A, -1).mean(axis=(0, 2))  # (h,)
        result, problem = run(fn, A.copy())
        if problem is None:
            got, problem = as_array(result, (h,))
            if problem is not None and np.asarray(result, dtype=object).shape == (B, h):
                problem = f"expected shape {(h,)}; got {(B, h)}: average over the batch too"
            if problem is None and not close(got, expected):
                problem = diagnose(got, _previous_mistakes(A)) or "wrong values"
        if problem is not None:
            break
    return problem


# ---------------------------------------------------------------------------- induction


def _induction_mistakes(A: np.ndarray, T: int) -> dict[str, np.ndarray]:
    def mean(offset, start, stop):  # mean of A[i, i + offset] for start <= i < stop
        rows = np.arange(start, stop)
        return A[:, :, rows, rows + offset].mean(axis=(0, 2))

    return {
        "that is the weight on the previous occurrence itself, A[i, i - T] (a duplicate-token "
        "head); an induction head looks one further, at i - T + 1": mean(-T, T, 2 * T),
        "that is the previous token A[i, i - 1], not the token after the previous occurrence "
        "(i - T + 1)": mean(-1, T, 2 * T),
        "it looks at i - T - 1, the token BEFORE the previous occurrence; the induction "
        "target is the one after it, i - T + 1": mean(-T - 1, T + 1, 2 * T),
        "it starts at query T - 1: the last token of the first copy has no earlier "
        "occurrence; use the queries T <= i < 2T": mean(1 - T, T - 1, 2 * T - 1),
        "it stops at query 2T - 2 and leaves out the last query 2T - 1; use T <= i < 2T": mean(
            1 - T, T, 2 * T - 1
        ),
        "it reads the transposed matrix, A[i - T + 1, i]: rows are queries and columns are keys": A[
            :, :, np.arange(1, T + 1), np.arange(T, 2 * T)
        ].mean(axis=(0, 2)),
        "it averages the heads together: return one score per head, (h,)": np.full(
            A.shape[1], mean(1 - T, T, 2 * T).mean()
        ),
    }


@checker("induction_score")
def check_induction_score(fn):
    """Check fn(A (B, h, 2T, 2T), T) -> (h,) = mean over b and T <= i < 2T of A[b, :, i, i-T+1]."""
    problem = None
    for seed, (B, h, T) in enumerate(((2, 3, 5), (1, 2, 4))):
        A = _weights(10 + seed, B, h, 2 * T)
        rows = np.arange(T, 2 * T)
        expected = A[:, :, rows, rows - T + 1].mean(axis=(0, 2))  # (h,)
        result, problem = run(fn, A.copy(), T)
        if problem is None:
            got, problem = as_array(result, (h,))
            if problem is not None and np.asarray(result, dtype=object).shape == (B, h):
                problem = f"expected shape {(h,)}; got {(B, h)}: average over the batch too"
            if problem is None and not close(got, expected):
                problem = diagnose(got, _induction_mistakes(A, T)) or "wrong values"
        if problem is not None:
            break
    return problem
