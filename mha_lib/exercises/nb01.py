"""Checkers for notebook 01 (self-attention without weights).

- `check_softmax(fn)`: a softmax over the last axis of x of any shape (..., M), each row
  stable on its own: 1-D, 2-D and 3-D input, rows far apart, large logits in float32 and
  float64, integer input;
- `check_scaled_dot_product_attention(fn)`: fn(q, k, v) -> output or (output, weights), for
  q (N, d_k), k (M, d_k), v (M, d_v) with N != M, d_k != d_v and large scores;
- `check_diagonal_counterexample(fn)`: fn() -> X (N, C) whose unweighted attention weights
  break the claim α_ij <= max(α_ii, α_jj), with no two tokens parallel.

Answers may be numpy arrays, lists or torch tensors (see `_base`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..attention import scaled_dot_product_attention, self_attention, softmax
from ._base import (
    GENERIC,
    Library,
    as_array,
    checker,
    close,
    diagnose,
    in_case,
    mismatch,
    numpy_habit,
    to_numpy,
)
from ._base import run as _run

__all__ = [
    "check_diagonal_counterexample",
    "check_scaled_dot_product_attention",
    "check_softmax",
]


def run(fn, *args, names: tuple[str, ...] = ()):
    """`_base.run`, with the torch habit named when the answer raised on numpy arrays."""
    result, problem = _run(fn, *args, names=names)
    return result, numpy_habit(problem)


# (what is special, x): the order matters, each case catching what the earlier ones cannot.
_SOFTMAX_CASES = (
    ("a small matrix", np.array([[1.0, 2.0, 3.0], [2.0, -1.0, 0.5]])),
    ("large logits in float32", np.array([[1e4, 0, -1e4], [3, 1e4, 1e4]], dtype=np.float32)),
    ("rows far apart, [[0, 1], [-1e4, -1e4 + 1]]", np.array([[0.0, 1.0], [-1e4, -1e4 + 1]])),
    ("1-D input (one row)", np.array([0.5, -1.0, 2.0])),
    (
        "3-D input (2, 3, 4) with rows far apart",
        np.random.default_rng(5).normal(size=(2, 3, 4))
        + np.array([0.0, -300, 50, 800, -1e4, 2]).reshape(2, 3, 1),  # one offset per row
    ),
    ("large logits in float64", np.array([[1e3, 999.0, -1e3], [-1e3, 0.0, 1e3]])),
    ("integer input", np.array([[1, 2, 3], [4, 4, 4]])),
)


def _softmax_mistakes(x: np.ndarray) -> dict[str, np.ndarray]:
    """The outputs of the usual wrong softmaxes, keyed by what is wrong."""
    x = x.astype(np.result_type(x.dtype, np.float32))  # float32 stays float32: same overflow

    def normalise(z, shift, over=-1):  # exp(z - shift), divided by its sums over `over`
        e = np.exp(z - shift)
        return e / e.sum(axis=over, keepdims=True)

    m = x.max(axis=-1, keepdims=True)
    with np.errstate(all="ignore"):
        return {
            "it normalises over the wrong axis: each ROW must sum to 1 (use axis=-1)": (
                normalise(x, x.max(axis=0, keepdims=True), over=0)
            ),
            "it divides by the sum of the whole array, not of each row": normalise(
                x, x.max(), None
            ),
            "it returns exp(x) without dividing by the row sum": np.exp(x),
            "it divides x by its row sum without exponentiating": x / x.sum(-1, keepdims=True),
            "it subtracts ONE maximum for the whole array instead of each row's own: a row far "
            "below the others becomes 0/0 = NaN (use x.max(axis=-1, keepdims=True))": (
                normalise(x, x.max())
            ),
            "it subtracts each column's maximum (axis=0): the constant must be the same for the "
            "whole row, its maximum (axis=-1)": normalise(x, x.max(axis=0, keepdims=True)),
            "it subtracts each row's MINIMUM: subtract the maximum, so every exponent is <= 0": (
                normalise(x, x.min(axis=-1, keepdims=True))
            ),
            "each row's largest entry is 1 and the rows do not sum to 1: it returns "
            "exp(x - max) without dividing by the row sum (dividing by the row's largest exp "
            "gives the same); divide by e.sum(axis=-1, keepdims=True)": np.exp(x - m),
            "it returns log-softmax (the log of the weights): exponentiate, then normalise": (
                x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
            ),
        }


def _softmax_case(fn, label: str, x: np.ndarray) -> str | None:
    """What is wrong with fn on one input x, or None."""
    raw, problem = run(fn, x, names=("x",))
    if problem is not None and x.ndim > 1 and _lines_up_only_in_1d(fn, problem, x):
        return (
            f"it drops keepdims: on {label} the row maxima (or sums) have shape "
            f"{x.shape[:-1]}, which does not line up with x {x.shape}; keep the reduced axis, "
            "x.max(axis=-1, keepdims=True), so that they broadcast over their rows"
        )
    if problem is not None:
        return problem
    if np.issubdtype(to_numpy(raw).dtype, np.integer):
        return (
            f"with {label} it returns integers: the weights are fractions (an output buffer "
            "like np.zeros_like(x) keeps x's integer dtype; use dtype=float)"
        )
    result, problem = as_array(raw, x.shape)
    expected = softmax(x.astype(np.float64))
    if problem is not None or close(result, expected):
        return problem
    problem = diagnose(result, _softmax_mistakes(x))
    if problem is None and not np.all(np.isfinite(result)):
        problem = (
            f"it returns inf or NaN for {label}: subtract each row's maximum before exp "
            "(exp(1e4) overflows, and a row of exp(-1e4) = 0 gives 0/0)"
        )
    sums = result.sum(axis=-1)
    if (
        problem is None
        and np.all(np.isfinite(sums))
        and not np.allclose(sums, 1, atol=1e-3)
        and not close(result, expected, tol=1e-2)  # rounding: said by `mismatch`
    ):
        problem = (
            f"its rows do not sum to 1 (for {label} the row sums run from {sums.min():.3g} to "
            f"{sums.max():.3g}): divide the exponentials by their own sum over the last axis, "
            "e / e.sum(axis=-1, keepdims=True), with the same e above and below"
        )
    return problem or mismatch(result, expected, f"softmax over the last axis for {label}")


def _lines_up_only_in_1d(fn, problem: str, x: np.ndarray) -> bool:
    """True when fn raised a size error on x but is right on one row of x: the sign of a
    reduction without keepdims, whose result lines up with x only when x has one axis."""
    sizes = ("broadcast", "must match", "shapes")
    if not problem.startswith(GENERIC[0]) or not any(word in problem for word in sizes):
        return False
    return _softmax_case(fn, "one row", x.reshape(-1, x.shape[-1])[0]) is None


@checker("softmax", writes=(Library("mha_lib.attention", "softmax", "mha_lib.softmax"),))
def check_softmax(fn):
    """Check a learner's softmax(x): over the last axis, for x of any shape (..., M).

    Every row must be stable on its own (subtract each row's maximum), for float32,
    float64 and integer input. Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for label, x in _SOFTMAX_CASES:
        problem = _softmax_case(fn, label, x)
        if problem is not None and x.ndim != 2 and problem.startswith(GENERIC):
            return (
                f"it works on 2-D input only ({label}: {problem}); use axis=-1 and "
                "keepdims=True, so that any number of leading axes works"
            )
        if problem is not None:
            return problem
    return None


def _attention_mistakes(q, k, v) -> dict[str, np.ndarray]:
    """The outputs of the usual wrong versions of softmax(q kᵀ / √d_k) v, by diagnosis."""
    (N, d_k), (M, d_v) = q.shape, v.shape
    scores = q @ k.T  # (N, M)
    s = math.sqrt(d_k)
    mistakes = {
        "the 1/√d_k scale is missing: divide the scores q @ k.T by √d_k": softmax(scores) @ v,
        "it divides the scores by d_k; divide by √d_k (np.sqrt(d_k))": softmax(scores / d_k) @ v,
        "it divides by √d_v; the scale uses the width of the queries and keys, d_k = q.shape[-1]": (
            softmax(scores / math.sqrt(d_v)) @ v
        ),
        "it divides by the square root of a number of tokens (N or M); the scale is √d_k, "
        "with d_k = q.shape[-1]": softmax(scores / math.sqrt(M)) @ v,
        "it multiplies the scores by √d_k; divide them by √d_k": softmax(scores * s) @ v,
        "it scales after the softmax: divide the scores by √d_k BEFORE the softmax": (
            softmax(scores) / s @ v
        ),
        "softmax over the wrong axis: normalise each ROW (axis=-1), one row per query": (
            softmax(scores / s, axis=0) @ v
        ),
    }
    if N == M:  # transposed scores keep their shape only when N = M
        mistakes |= {
            "the scores are transposed: use q @ k.T (rows = queries), not k @ q.T": (
                softmax(scores.T / s) @ v
            ),
            "the weights are transposed: rows must be queries, each row summing to 1": (
                softmax(scores.T / s, axis=0) @ v
            ),
        }
    return mistakes


def _square_probe(fn) -> str | None:
    """Name what fn computes on q, k, v all of one square shape, where every wrong product fits
    too, if it is one of the usual shape mistakes; else None."""
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=(4, 4)) for _ in range(3))  # N = M = d_k = d_v = 4
    result, problem = run(fn, q, k, v)
    if problem is not None:
        return None
    expected, weights = scaled_dot_product_attention(q, k, v)
    result, problem = _attention_output(result, 4, 4, 4, expected, weights)
    if problem is not None:
        return None
    candidates = {
        "k is not transposed: the scores are q @ k.T, (N, d_k) @ (d_k, M) (in numpy, "
        "k.transpose(-2, -1) or k.transpose(0, 1) leaves a 2-D k as it is: use k.T)": (
            softmax(q @ k / 2) @ v
        ),
        "it multiplies by v.T: the output is weights @ v, (N, M) @ (M, d_v)": (
            softmax(q @ k.T / 2) @ v.T
        ),
        "k and v are swapped: the scores use the keys, q @ k.T, and the weights multiply the "
        "values, weights @ v": softmax(q @ v.T / 2) @ k,
        "it multiplies q and k entry by entry (q * k): the scores are the matrix product "
        "q @ k.T": softmax(q * k / 2) @ v,
    }
    return diagnose(result, candidates)


def _attention_output(result, N: int, M: int, d_v: int, expected, weights):
    """Take the output from a learner's result (an array or an (output, weights) pair)."""
    if isinstance(result, (tuple, list)) and len(result) == 2:
        first, second = (to_numpy(r) for r in result)
        if first.shape == (N, M) and second.shape == (N, d_v) and close(second, expected):
            return None, "the pair is in the wrong order: return (output, weights)"
        result = first
    arr, problem = as_array(result, None)
    if problem is None and arr.shape == (N, M) and arr.shape != (N, d_v):
        if close(arr, weights):
            return None, "it returns the attention weights: multiply them by v to get the output"
        return None, (
            f"it returns an (N, M) = {arr.shape} matrix: the output is weights @ v, of shape "
            f"(N, d_v) = ({N}, {d_v})"
        )
    return (None, problem) if problem else as_array(arr, (N, d_v))


def _attention_problem(fn, seed: int, N: int, M: int, d_k: int, d_v: int, size: float):
    """What is wrong with fn on seeded q (N, d_k) times `size`, k (M, d_k), v (M, d_v), or None."""
    rng = np.random.default_rng(seed)
    q = size * rng.normal(size=(N, d_k))  # (N, d_k)
    k = rng.normal(size=(M, d_k))  # (M, d_k)
    v = rng.normal(size=(M, d_v))  # (M, d_v)
    expected, weights = scaled_dot_product_attention(q, k, v)  # (N, d_v), (N, M)
    result, problem = run(fn, q, k, v, names=("q", "k", "v"))
    if problem is not None and problem.startswith(GENERIC[0]) and "ValueError" in problem:
        square = _square_probe(fn)  # what the answer computes when every product fits
        if square is not None:
            return f"{square} [with N = {N}, M = {M}, d_k = {d_k}, d_v = {d_v} it {problem[14:]}]"
        if "mismatch" in problem or "not aligned" in problem:
            return (
                "a matrix product's shapes do not line up: the scores are q @ k.T, (N, d_k) @ "
                "(d_k, M), and the output weights @ v, (N, M) @ (M, d_v) (did you forget to "
                "transpose k? In numpy, k.transpose(-2, -1) or k.transpose(0, 1) leaves a 2-D k "
                f"as it is: use k.T) [{problem}]"
            )
    if problem is None:
        result, problem = _attention_output(result, N, M, d_v, expected, weights)
    if problem is None and not close(result, expected):
        problem = diagnose(result, _attention_mistakes(q, k, v))
        if problem is None and size > 1 and not np.all(np.isfinite(result)):
            problem = (
                "it returns inf or NaN when the scores are large (about 1e3): use a stable "
                "softmax, which subtracts each row's maximum before exp"
            )
        problem = problem or mismatch(result, expected, "softmax(q @ k.T / √d_k) @ v")
    return problem


# (seed, N, M, d_k, d_v, size of q): first N = M, so that transposed scores keep their shape and
# can be recognised; then N != M and other d_k, d_v; then d_k < d_v with scores of about 1e3.
_ATTENTION_CASES = (
    (1, 5, 5, 4, 3, 1.0),
    (2, 3, 6, 5, 2, 1.0),
    (3, 4, 7, 3, 5, 1e3),
)


def _attention_hints(fn, case: tuple) -> list[tuple[str, Callable[[], bool]]]:
    """The hints for a failed case, each with the test of the answer that shows it: the same
    answer is right on a probe that changes only what the hint is about (see `in_case`)."""
    seed, N, M, d_k, d_v, size = case
    _, N0, M0, d_k0, d_v0, _ = _ATTENTION_CASES[0]
    hints = [
        (
            "it is right when the scores are about 1 and wrong when they are about 1e3",
            lambda: _attention_problem(fn, seed + 10, N, M, d_k, d_v, 1.0) is None,
        ),
        (
            f"it is right with N = M = {N0} tokens and wrong with N = {N} queries, M = {M} "
            "keys: read N from q and M from k",
            lambda: _attention_problem(fn, seed + 20, N0, M0, d_k, d_v, size) is None,
        ),
        (
            f"it is right with d_k = {d_k0}, d_v = {d_v0} and wrong with d_k = {d_k}, "
            f"d_v = {d_v}: read d_k = q.shape[-1] and d_v = v.shape[-1]",
            lambda: _attention_problem(fn, seed + 30, N, M, d_k0, d_v0, size) is None,
        ),
    ]
    return hints if size > 1 else hints[1:]


@checker(
    "scaled dot-product attention",
    writes=(
        Library(
            "mha_lib.attention",
            "scaled_dot_product_attention",
            "mha_lib.scaled_dot_product_attention",
        ),
    ),
)
def check_scaled_dot_product_attention(fn):
    """Check a learner's fn(q, k, v) -> softmax(q kᵀ / √d_k) v for 2-D q (N, d_k), k (M, d_k),
    v (M, d_v). fn may return the output (N, d_v) or a pair (output, weights).
    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for i, case in enumerate(_ATTENTION_CASES):
        problem = _attention_problem(fn, *case)
        if problem is not None and i > 0:  # an earlier case passed: say what differs, if shown
            problem = in_case(problem, *_attention_hints(fn, case))
        if problem is not None:
            return problem
    return None


@checker("diagonal counterexample")
def check_diagonal_counterexample(fn):
    """Check that fn() returns X (N, C), no two tokens parallel, whose self-attention weights
    α = softmax(X Xᵀ / √C) have a pair i != j with α_ij > max(α_ii, α_jj).
    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    result, problem = run(fn)
    if problem is None and isinstance(result, (tuple, list)) and len(result) == 2:
        shapes = [np.shape(to_numpy(r)) if hasattr(r, "shape") else None for r in result]
        if all(shape is not None and len(shape) == 2 for shape in shapes):
            return (
                f"it returns a pair of matrices {tuple(shapes)} (X and its weights?): "
                "return X alone, the tokens (N, C)"
            )
    if problem is None:
        X, problem = as_array(result, None, "a matrix X (N, C)")
    if problem is not None:
        return problem
    if X.ndim != 2:
        return f"expected a matrix X of shape (N, C); got shape {X.shape}"
    problem = _counterexample_problem(X)
    if problem is not None and _looks_like_weights(X):
        return (
            f"it returns a square {X.shape} matrix of positive entries whose rows sum to 1, "
            "like attention weights α, and read as tokens it is no counterexample: return X, "
            "the tokens (N, C) whose weights break the claim (the checker computes α from X)"
        )
    if problem is not None and _counterexample_problem(X.T) is None:
        return (
            f"X looks transposed: the rows are the tokens, (N, C), so your {X.shape} array is "
            f"{X.shape[0]} tokens of {X.shape[1]} features; read the other way, "
            f"{X.shape[1]} tokens of {X.shape[0]} features, it is a counterexample: return X.T"
        )
    return problem


def _looks_like_weights(X: np.ndarray) -> bool:
    """True for a square matrix of positive entries whose rows sum to 1, as a softmax gives."""
    if X.shape[0] != X.shape[1] or X.shape[0] < 2 or not np.all(np.isfinite(X)):
        return False
    return bool(np.all(X > 0) and np.allclose(X.sum(axis=1), 1, atol=1e-6))


def _counterexample_problem(X: np.ndarray) -> str | None:
    """What keeps the matrix X (N, C) from being a counterexample, or None."""
    if not np.all(np.isfinite(X)):
        return "X contains inf or NaN: use finite numbers"
    if X.shape[0] < 3:
        return (
            f"X has N = {X.shape[0]} tokens; with fewer than 3 tokens the claim holds "
            "(it reduces to the raw-score bound): use at least 3"
        )
    norms = np.linalg.norm(X, axis=1)  # (N,)
    if np.any(norms == 0):
        return "a token is the zero vector: give every token a nonzero vector"
    cos = (X @ X.T) / np.outer(norms, norms)  # (N, N) cosines
    np.fill_diagonal(cos, 0.0)
    if np.any(np.abs(cos) > 1 - 1e-9):
        i, j = np.argwhere(np.abs(cos) > 1 - 1e-9)[0]
        return (
            f"tokens {i} and {j} are parallel; tokens on one line are the easy case shown in "
            "the notebook: make every pair point in different directions (C >= 2)"
        )
    _, A = self_attention(X)  # (N, N)
    d = np.diag(A)  # (N,)
    beats_own_diag = A > d[:, None] + 1e-9  # alpha_ij > alpha_ii
    violations = A > np.maximum.outer(d, d) + 1e-9  # alpha_ij > max(alpha_ii, alpha_jj)
    np.fill_diagonal(beats_own_diag, False)
    np.fill_diagonal(violations, False)
    if violations.any():
        return None
    if np.allclose(norms, norms[0]):
        return (
            "all your tokens have the same norm, so every row's largest weight is its "
            "diagonal: give token j a larger norm than token i"
        )
    if not beats_own_diag.any():
        return (
            "no token attends more to another token than to itself: for α_ij > α_ii token j "
            "needs x_i·x_j > |x_i|² (a longer vector pointing a similar way)"
        )
    return (
        "some α_ij beats α_ii, but α_jj is still larger: lower α_jj by giving row j a "
        "competitor k with x_j·x_k > |x_j|²"
    )
