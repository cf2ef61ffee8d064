"""Checkers for notebook 02 (attention with weights).

- `check_project_qkv(fn)`: fn(X, W_q, W_k, W_v) -> (Q, K, V);
- `check_attention_with_weights(fn)`: fn(X, W_q, W_k, W_v) -> output (N, d_v);
- `check_next_token_head(fn)`: fn(N, C) -> (W_q, W_k) for inputs [X | one-hot positions]
  such that every token but the last puts most of its weight on the next token.
"""

from __future__ import annotations

import numpy as np

from ..attention import scaled_dot_product_attention, softmax
from ..example import running_example
from ._base import as_array, close, diagnose, report, run

__all__ = ["check_attention_with_weights", "check_next_token_head", "check_project_qkv"]


def _random_inputs(seed: int, N: int, C: int, d_k: int, d_v: int):
    """A seeded X (N, C) and W_q, W_k (C, d_k), W_v (C, d_v) with moderate scores."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, C))  # (N, C)
    W_q = rng.normal(size=(C, d_k)) / np.sqrt(C)  # (C, d_k)
    W_k = rng.normal(size=(C, d_k)) / np.sqrt(C)  # (C, d_k)
    W_v = rng.normal(size=(C, d_v)) / np.sqrt(C)  # (C, d_v)
    return X, W_q, W_k, W_v


def _as_triple(result):
    """Unpack a learner's (Q, K, V), or explain why it cannot be unpacked."""
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        return None, f"expected a tuple (Q, K, V); got {type(result).__name__}"
    try:
        return [np.asarray(r, dtype=float) for r in result], None
    except (TypeError, ValueError):
        return None, "expected a tuple of three arrays (Q, K, V)"


def check_project_qkv(fn) -> bool:
    """Check fn(X, W_q, W_k, W_v) -> (Q, K, V) = (X W_q, X W_k, X W_v)."""
    name = "project_qkv"
    # Round 1: N = C = d_k = d_v = 4, so a transposed or misplaced W still gives a
    # (4, 4) array and the usual mistakes can be recognised by their values.
    X, W_q, W_k, W_v = _random_inputs(20, N=4, C=4, d_k=4, d_v=4)
    result, problem = run(fn, X.copy(), W_q.copy(), W_k.copy(), W_v.copy())
    if problem is None:
        result, problem = _as_triple(result)
    if problem is None:
        Q, K, V = X @ W_q, X @ W_k, X @ W_v  # (4, 4) each
        if any(r.shape != (4, 4) for r in result):
            problem = f"expected three (4, 4) arrays; got shapes {[r.shape for r in result]}"
        elif not all(close(r, e) for r, e in zip(result, (Q, K, V))):
            stacked = np.stack(result)  # (3, 4, 4)
            problem = diagnose(
                stacked,
                {
                    "the weights are transposed: project with X @ W_q where W_q has shape "
                    "(C, d_k), not X @ W_q.T": np.stack([X @ W_q.T, X @ W_k.T, X @ W_v.T]),
                    "W is on the wrong side: the rows of X are tokens, so each token's row "
                    "is multiplied by W (X @ W_q, not W_q @ X)": np.stack(
                        [W_q @ X, W_k @ X, W_v @ X]
                    ),
                    "Q and K are swapped: Q = X @ W_q and K = X @ W_k": np.stack([K, Q, V]),
                    "it uses W_q for all three projections: K needs W_k and V needs W_v": (
                        np.stack([Q, Q, Q])
                    ),
                    "the arrays are in the wrong order: return (Q, K, V)": np.stack([V, K, Q]),
                },
            )
            if problem is None:
                for label, r, e, w in zip("QKV", result, (Q, K, V), ("W_q", "W_k", "W_v")):
                    if not close(r, e):
                        problem = f"{label} is wrong: expected {label} = X @ {w}"
                        break
    if problem is None:
        # Round 2: every size different, to check the shapes.
        N, C, d_k, d_v = 5, 4, 3, 2
        X, W_q, W_k, W_v = _random_inputs(21, N=N, C=C, d_k=d_k, d_v=d_v)
        result, problem = run(fn, X.copy(), W_q.copy(), W_k.copy(), W_v.copy())
        if problem is None:
            result, problem = _as_triple(result)
        if problem is None:
            expected = (X @ W_q, X @ W_k, X @ W_v)
            for label, r, e, want in zip(
                "QKV", result, expected, ("(N, d_k)",) * 2 + ("(N, d_v)",)
            ):
                if r.shape != e.shape:
                    problem = f"{label} has shape {r.shape}; expected {want} = {e.shape}"
                    break
                if not close(r, e):
                    problem = f"{label} is wrong when N, C, d_k, d_v all differ"
                    break
    return report(name, problem)


def check_attention_with_weights(fn) -> bool:
    """Check fn(X, W_q, W_k, W_v) -> softmax(X W_q (X W_k)ᵀ / √d_k) X W_v, shape (N, d_v)."""
    name = "attention_with_weights"
    problem = None
    for seed, (N, C, d_k, d_v) in ((22, (5, 6, 4, 3)), (23, (7, 5, 2, 4))):
        X, W_q, W_k, W_v = _random_inputs(seed, N=N, C=C, d_k=d_k, d_v=d_v)
        Q, K, V = X @ W_q, X @ W_k, X @ W_v  # (N, d_k), (N, d_k), (N, d_v)
        out, A = scaled_dot_product_attention(Q, K, V)  # (N, d_v), (N, N)
        result, problem = run(fn, X.copy(), W_q.copy(), W_k.copy(), W_v.copy())
        if problem is None and isinstance(result, tuple):
            problem = (
                "it returns a tuple: return only the output (scaled_dot_product_attention "
                "returns (output, weights))"
            )
        if problem is None:
            try:
                shape = np.shape(result)
            except (TypeError, ValueError):
                shape = None
            if shape == (N, N) and close(result, A) and N != d_v:
                problem = "it returns the attention weights: return weights @ V"
            elif shape == (N, C) and close(result, A @ X) and C != d_v:
                problem = "it uses X as the values: multiply the weights by V = X @ W_v"
        if problem is None:
            result, problem = as_array(result, (N, d_v))
        if problem is None and not close(result, out):
            S = Q @ K.T  # (N, N) unscaled scores
            problem = (
                diagnose(
                    result,
                    {
                        "it divides the scores by √C (the model width); divide by √d_k, the "
                        "width of the queries and keys": softmax(S / np.sqrt(C)) @ V,
                        "the scores are not scaled: divide Q Kᵀ by √d_k": softmax(S) @ V,
                        "it divides the scores by d_k; divide by √d_k": softmax(S / d_k) @ V,
                        "the attention weights are transposed: use weights @ V with the weights "
                        "normalised over each row (one row per query)": A.T @ V,
                        "softmax is taken over the wrong axis: each ROW (one query) must sum to "
                        "1, use axis=-1": softmax(S / np.sqrt(d_k), axis=0) @ V,
                        "queries and keys are swapped: scores = (X W_q)(X W_k)ᵀ, row i belongs "
                        "to query i": softmax(S.T / np.sqrt(d_k)) @ V,
                        "there is no softmax: the scores must become weights that sum to 1 per "
                        "row": (S / np.sqrt(d_k)) @ V,
                    },
                )
                or "wrong values: expected softmax(X W_q (X W_k)ᵀ / √d_k) X W_v"
            )
        if problem is not None:
            break
    return report(name, problem)


def _positional_inputs(N: int, C: int, seed: int | None):
    """[X | I_N] (N, C + N): the running example (seed None) or random content."""
    if seed is None:
        _, X = running_example()  # (11, 6)
    else:
        X = np.random.default_rng(seed).normal(size=(N, C))  # (N, C)
    return np.concatenate([X, np.eye(N)], axis=1)  # (N, C + N)


def check_next_token_head(fn) -> bool:
    """Check fn(N, C) -> (W_q, W_k), each (C + N, d_k), for inputs X_pos = [X | I_N]:
    every token i < N - 1 must put more than half of its weight on token i + 1."""
    name = "next_token_head"
    problem = None
    for N, C, seed in ((11, 6, None), (7, 3, 24)):
        X_pos = _positional_inputs(N, C, seed)  # (N, C + N)
        result, problem = run(fn, N, C)
        if problem is None and (not isinstance(result, (tuple, list)) or len(result) != 2):
            problem = f"expected a tuple (W_q, W_k); got {type(result).__name__}"
        if problem is None:
            try:
                W_q, W_k = (np.asarray(w, dtype=float) for w in result)
            except (TypeError, ValueError):
                problem = "expected a tuple of two arrays (W_q, W_k)"
        if problem is None:
            for label, W in (("W_q", W_q), ("W_k", W_k)):
                if W.ndim != 2 or W.shape[0] != C + N:
                    problem = (
                        f"{label} has shape {W.shape}; expected (C + N, d_k) = ({C + N}, d_k) "
                        f"because it multiplies X_pos = [X | one-hot positions] (N = {N}, "
                        f"C = {C})"
                    )
                    break
            if problem is None and W_q.shape != W_k.shape:
                problem = f"W_q has shape {W_q.shape} but W_k has shape {W_k.shape}: same d_k"
        if problem is None:
            _, A = scaled_dot_product_attention(X_pos @ W_q, X_pos @ W_k, X_pos)  # A: (N, N)
            rows = np.arange(N - 1)  # the last token has no next token
            best = A[rows].argmax(axis=-1)  # (N - 1,)
            on_next = A[rows, rows + 1]  # (N - 1,)
            if np.array_equal(best[1:], rows[1:] - 1):
                problem = (
                    "this is a previous-token head: query i must match key i + 1, so shift "
                    "the other way (np.eye(N, k=1) rather than k=-1)"
                )
            elif np.array_equal(best, rows):
                problem = "each token attends to itself: shift the query one position ahead"
            elif not np.array_equal(best, rows + 1):
                i = int(np.flatnonzero(best != rows + 1)[0])
                problem = f"token {i} attends mostly to token {best[i]}; expected {i + 1}"
                if seed is not None:
                    problem += " (with random content: use only the position features)"
            elif on_next.min() <= 0.5:
                problem = (
                    f"the next token wins but weakly (smallest weight {on_next.min():.2f} "
                    "≤ 0.5): make W_q larger, remember the scores are divided by √d_k"
                )
        if problem is not None:
            break
    return report(name, problem)
