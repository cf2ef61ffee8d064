"""Checkers for notebook 01 (self-attention without weights).

- `check_softmax(fn)`: a row-wise, numerically stable softmax;
- `check_scaled_dot_product_attention(fn)`: fn(q, k, v) -> output or (output, weights);
- `check_diagonal_counterexample(fn)`: fn() -> X (N, C) whose unweighted attention weights
  break the claim α_ij <= max(α_ii, α_jj), with no two tokens parallel.
"""

from __future__ import annotations

import math

import numpy as np

from ..attention import scaled_dot_product_attention, self_attention, softmax
from ._base import as_array, close, diagnose, report, run

__all__ = [
    "check_diagonal_counterexample",
    "check_scaled_dot_product_attention",
    "check_softmax",
]


def check_softmax(fn) -> bool:
    """Check a learner's softmax(x) that normalises over the last axis."""
    name = "softmax"
    x = np.array([[1.0, 2.0, 3.0], [2.0, -1.0, 0.5]])  # (2, 3)
    result, problem = run(fn, x.copy())
    if problem is None:
        result, problem = as_array(result, x.shape)
    if problem is None and not close(result, softmax(x)):
        e = np.exp(x)
        problem = diagnose(
            result,
            {
                "it normalises over the wrong axis: each ROW must sum to 1 (use axis=-1)": e
                / e.sum(axis=0, keepdims=True),
                "it divides by the sum of the whole matrix, not of each row": e / e.sum(),
                "it returns exp(x) without dividing by the row sum": e,
                "it divides x by its row sum without exponentiating": x
                / x.sum(axis=-1, keepdims=True),
            },
        ) or ("wrong values: expected softmax(x) with rows summing to 1")
    if problem is None:
        big = np.array([[1e4, 0.0, -1e4]], dtype=np.float32)  # (1, 3)
        with np.errstate(all="ignore"):
            result, problem = run(fn, big.copy())
        if problem is None:
            result, problem = as_array(result, big.shape)
        if problem is None and not np.all(np.isfinite(result)):
            problem = (
                "it overflows for large logits (1e4 gives inf/NaN): subtract each row's "
                "maximum before exp"
            )
        elif problem is None and not close(result, [[1.0, 0.0, 0.0]]):
            problem = "wrong values for large logits: expected [1, 0, 0]"
    return report(name, problem)


def _attention_mistakes(q, k, v) -> dict[str, np.ndarray]:
    """The outputs of the usual wrong versions of softmax(q kᵀ / √d_k) v, by diagnosis."""
    d_k, d_v = q.shape[-1], v.shape[-1]
    scores = q @ k.T  # (N, M)
    scores_t = k @ q.T  # (M, N): the transposed scores; square in the checker's first case
    s = math.sqrt(d_k)
    return {
        "the 1/√d_k scale is missing: divide the scores q @ k.T by √d_k": softmax(scores) @ v,
        "it divides the scores by d_k; divide by √d_k (np.sqrt(d_k))": softmax(scores / d_k) @ v,
        "it divides by √d_v; the scale uses the width of the queries and keys, d_k = q.shape[-1]": (
            softmax(scores / math.sqrt(d_v)) @ v
        ),
        "softmax over the wrong axis: normalise each ROW (axis=-1), one row per query": (
            softmax(scores / s, axis=0) @ v
        ),
        "the scores are transposed: use q @ k.T (rows = queries), not k @ q.T": (
            softmax(scores_t / s) @ v
        ),
        "the weights are transposed: rows must be queries, each row summing to 1": (
            softmax(scores_t / s, axis=0) @ v
        ),
        "it scales after the softmax: divide the scores by √d_k BEFORE the softmax": (
            softmax(scores) / s @ v
        ),
    }


def _attention_output(result, N: int, M: int, d_v: int, weights: np.ndarray):
    """Take the output from a learner's result (an array or an (output, weights) pair)."""
    if isinstance(result, (tuple, list)) and len(result) == 2:
        result = result[0]
    try:
        arr = np.asarray(result, dtype=float)
    except (TypeError, ValueError):
        return None, f"expected an array of shape ({N}, {d_v}); got {type(result).__name__}"
    if arr.shape == (N, M) and arr.shape != (N, d_v):
        if close(arr, weights):
            return None, "it returns the attention weights: multiply them by v to get the output"
        return None, (
            f"it returns an (N, M) = {arr.shape} matrix: the output is weights @ v, of shape "
            f"(N, d_v) = ({N}, {d_v})"
        )
    return as_array(arr, (N, d_v))


def _run_attention(fn, q, k, v):
    """Call fn(q, k, v); add a hint when the shapes of a matrix product did not line up."""
    result, problem = run(fn, q.copy(), k.copy(), v.copy())
    if problem is not None and ("mismatch" in problem or "not aligned" in problem):
        problem = (
            "a matrix product's shapes do not line up: the scores are q @ k.T, "
            "(N, d_k) @ (d_k, M) (did you forget to transpose k?)"
        )
    return result, problem


def check_scaled_dot_product_attention(fn) -> bool:
    """Check a learner's fn(q, k, v) -> softmax(q kᵀ / √d_k) v for 2-D q (N, d_k), k (M, d_k),
    v (M, d_v). fn may return the output (N, d_v) or a pair (output, weights)."""
    name = "scaled dot-product attention"
    rng = np.random.default_rng(1)
    problem = None
    # First a square case (N = M) so that transposed scores still have the right shape and
    # can be recognised; then N != M and d_k != d_v to catch mixed-up sizes.
    for N, M, d_k, d_v in ((5, 5, 4, 3), (3, 6, 4, 2)):
        q = rng.normal(size=(N, d_k))  # (N, d_k)
        k = rng.normal(size=(M, d_k))  # (M, d_k)
        v = rng.normal(size=(M, d_v))  # (M, d_v)
        expected, weights = scaled_dot_product_attention(q, k, v)  # (N, d_v), (N, M)
        result, problem = _run_attention(fn, q, k, v)
        if problem is None:
            result, problem = _attention_output(result, N, M, d_v, weights)
        if problem is None and not close(result, expected):
            problem = diagnose(result, _attention_mistakes(q, k, v)) or (
                "wrong values: expected softmax(q @ k.T / √d_k, axis=-1) @ v"
            )
        if problem is not None:
            break
    return report(name, problem)


def check_diagonal_counterexample(fn) -> bool:
    """Check that fn() returns X (N, C), no two tokens parallel, whose self-attention weights
    α = softmax(X Xᵀ / √C) have a pair i != j with α_ij > max(α_ii, α_jj)."""
    name = "diagonal counterexample"
    result, problem = run(fn)
    if problem is None:
        try:
            X = np.asarray(result, dtype=float)
        except (TypeError, ValueError):
            X, problem = None, f"expected a matrix X of shape (N, C); got {type(result).__name__}"
    if problem is None and X.ndim != 2:
        problem = f"expected a matrix X of shape (N, C); got shape {X.shape}"
    elif problem is None and not np.all(np.isfinite(X)):
        problem = "X contains inf or NaN: use finite numbers"
    elif problem is None and X.shape[0] < 3:
        problem = (
            f"X has N = {X.shape[0]} tokens; with fewer than 3 tokens the claim holds "
            "(it reduces to the raw-score bound): use at least 3"
        )
    if problem is None:
        norms = np.linalg.norm(X, axis=1)  # (N,)
        cos = (X @ X.T) / np.outer(norms, norms).clip(min=1e-300)  # (N, N) cosines
        np.fill_diagonal(cos, 0.0)
        if np.any(norms == 0):
            problem = "a token is the zero vector: give every token a nonzero vector"
        elif np.any(np.abs(cos) > 1 - 1e-9):
            i, j = np.argwhere(np.abs(cos) > 1 - 1e-9)[0]
            problem = (
                f"tokens {i} and {j} are parallel; tokens on one line are the easy case shown in "
                "the notebook: make every pair point in different directions (C >= 2)"
            )
    if problem is None:
        _, A = self_attention(X)  # (N, N)
        d = np.diag(A)  # (N,)
        beats_own_diag = A > d[:, None] + 1e-9  # alpha_ij > alpha_ii
        violations = A > np.maximum.outer(d, d) + 1e-9  # alpha_ij > max(alpha_ii, alpha_jj)
        np.fill_diagonal(beats_own_diag, False)
        np.fill_diagonal(violations, False)
        if violations.any():
            pass
        elif np.allclose(norms, norms[0]):
            problem = (
                "all your tokens have the same norm, so every row's largest weight is its "
                "diagonal: give token j a larger norm than token i"
            )
        elif not beats_own_diag.any():
            problem = (
                "no token attends more to another token than to itself: for α_ij > α_ii token j "
                "needs x_i·x_j > |x_i|² (a longer vector pointing a similar way)"
            )
        else:
            problem = (
                "some α_ij beats α_ii, but α_jj is still larger: lower α_jj by giving row j a "
                "competitor k with x_j·x_k > |x_j|²"
            )
    return report(name, problem)
