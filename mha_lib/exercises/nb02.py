"""Checkers for notebook 02 (attention with weights).

- `check_project_qkv(fn)`: fn(X, W_q, W_k, W_v) -> (Q, K, V);
- `check_attention_with_weights(fn)`: fn(X, W_q, W_k, W_v) -> output (N, d_v);
- `check_next_token_head(fn)`: fn(N, C) -> (W_q, W_k) for inputs [X | one-hot positions]
  such that every token but the last puts most of its weight on the next token.

Each first tries sizes that coincide (so a transposed matrix keeps its shape and can be
recognised by its values), then sizes that all differ. Answers may be numpy arrays, lists or
torch tensors (see `_base`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..attention import scaled_dot_product_attention, softmax
from ..example import running_example
from ._base import as_array, checker, close, diagnose, in_case, mismatch, numpy_habit
from ._base import run as _run

__all__ = ["check_attention_with_weights", "check_next_token_head", "check_project_qkv"]

_NAMES = ("X", "W_q", "W_k", "W_v")


def run(fn, *args, names: tuple[str, ...] = ()):
    """`_base.run`, with the torch habit named when the answer raised on numpy arrays."""
    result, problem = _run(fn, *args, names=names)
    return result, numpy_habit(problem)


def _random_inputs(seed: int, N: int, C: int, d_k: int, d_v: int, size: float = 1.0):
    """A seeded X (N, C) and W_q, W_k (C, d_k), W_v (C, d_v); scores grow with `size`."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, C))  # (N, C)
    W_q = size * rng.normal(size=(C, d_k)) / np.sqrt(C)  # (C, d_k)
    W_k = rng.normal(size=(C, d_k)) / np.sqrt(C)  # (C, d_k)
    W_v = rng.normal(size=(C, d_v)) / np.sqrt(C)  # (C, d_v)
    return X, W_q, W_k, W_v


def _arrays(result, count: int, what: str):
    """Unpack a learner's tuple of `count` arrays, or explain why it cannot be unpacked."""
    if not isinstance(result, (tuple, list)):
        return None, f"expected a tuple {what}; got {type(result).__name__}"
    if len(result) != count:
        return None, f"expected a tuple {what} of {count} arrays; got {len(result)}"
    arrays = [as_array(r, None) for r in result]
    if any(problem for _, problem in arrays):
        return None, f"expected a tuple {what} of arrays"
    return [a for a, _ in arrays], None


def _projection_mistakes(X, W_q, W_k, W_v) -> dict[str, np.ndarray]:
    """The usual wrong (Q, K, V), stacked, for a square case; keyed by what is wrong."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    return {
        "the weights are transposed: project with X @ W_q where W_q has shape (C, d_k), not "
        "X @ W_q.T": np.stack([X @ W_q.T, X @ W_k.T, X @ W_v.T]),
        "W is on the wrong side: the rows of X are tokens, so each token's row is multiplied "
        "by W (X @ W_q, not W_q @ X)": np.stack([W_q @ X, W_k @ X, W_v @ X]),
        "the results are transposed: Q has one ROW per token, (N, d_k); X @ W_q, not "
        "(X @ W_q).T": np.stack([Q.T, K.T, V.T]),
        "it multiplies X.T: the rows of X are tokens, so Q = X @ W_q": np.stack(
            [X.T @ W_q, X.T @ W_k, X.T @ W_v]
        ),
        "it multiplies entry by entry (X * W_q): a projection is a matrix product, X @ W_q": (
            np.stack([X * W_q, X * W_k, X * W_v])
        ),
        "Q and K are swapped: Q = X @ W_q and K = X @ W_k": np.stack([K, Q, V]),
        "it uses W_q for all three projections: K needs W_k and V needs W_v": np.stack([Q, Q, Q]),
        "the arrays are in the wrong order: return (Q, K, V)": np.stack([V, K, Q]),
    }


def _mixed_projections(result, expected) -> str | None:
    """Name (Q, K, V) built from the right products but with the wrong weights or in the wrong
    places ((Q, V, K), (Q, K, K), ...), or None when some array is none of X W_q, X W_k, X W_v."""
    labels, weights = "QKV", ("W_q", "W_k", "W_v")
    sources = []
    for r in result:
        found = [i for i, e in enumerate(expected) if close(r, e)]
        if not found:
            return None
        sources.append(found[0])
    if sorted(sources) == [0, 1, 2]:  # the right three, in the wrong places
        wrong = [i for i in range(3) if sources[i] != i]
        if len(wrong) == 2:
            a, b = (labels[i] for i in wrong)
            return (
                f"{a} and {b} are swapped: it returns X @ {weights[sources[wrong[0]]]} as "
                f"{a} and X @ {weights[sources[wrong[1]]]} as {b}; return (Q, K, V) = "
                "(X @ W_q, X @ W_k, X @ W_v)"
            )
        got = ", ".join(f"X @ {weights[i]}" for i in sources)
        return f"the arrays are in the wrong order ({got}): return (Q, K, V)"
    i = next(i for i in range(3) if sources[i] != i)
    return (
        f"{labels[i]} is computed with {weights[sources[i]]}: {labels[i]} = X @ {weights[i]} "
        "(each projection has its own matrix)"
    )


# (seed, N, C, d_k, d_v): all equal first, so that mistakes keep the shape; then all different.
_QKV_CASES = ((20, 4, 4, 4, 4), (21, 5, 4, 3, 2))


@checker("project_qkv")
def check_project_qkv(fn):
    """Check fn(X, W_q, W_k, W_v) -> (Q, K, V) = (X W_q, X W_k, X W_v), as a tuple or list.

    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for seed, N, C, d_k, d_v in _QKV_CASES:
        X, W_q, W_k, W_v = _random_inputs(seed, N, C, d_k, d_v)
        result, problem = run(fn, X, W_q, W_k, W_v, names=_NAMES)
        if problem is None and not isinstance(result, (tuple, list)) and hasattr(result, "shape"):
            problem = (
                f"it returns one array of shape {tuple(result.shape)}: return the three "
                "arrays as a tuple, (Q, K, V) = (X @ W_q, X @ W_k, X @ W_v)"
            )
        if problem is None:
            result, problem = _arrays(result, 3, "(Q, K, V)")
        if problem is not None:
            return problem
        expected = (X @ W_q, X @ W_k, X @ W_v)  # (N, d_k), (N, d_k), (N, d_v)
        if all(close(r, e) for r, e in zip(result, expected)):
            continue
        if N == C == d_k == d_v and all(r.shape == (N, N) for r in result):
            problem = diagnose(np.stack(result), _projection_mistakes(X, W_q, W_k, W_v))
            problem = problem or _mixed_projections(result, expected)
            if problem:
                return problem
        for label, r, e, w in zip("QKV", result, expected, ("W_q", "W_k", "W_v")):
            want = "(N, d_v)" if label == "V" else "(N, d_k)"
            if r.shape == e.shape[::-1] and r.shape != e.shape:
                return f"{label} is transposed: it has shape {r.shape}; expected {want} = {e.shape}"
            if r.shape != e.shape:
                return f"{label} has shape {r.shape}; expected {want} = {e.shape}"
            if close(r, e.T):
                return f"{label} is transposed: one ROW per token, {label} = X @ {w}"
            if not close(r, e):
                where = "" if N == C else " (when N, C, d_k, d_v all differ)"
                return f"{label} is wrong{where}: expected {label} = X @ {w}"
    return None


def _attention_mistakes(X, W_q, W_k, W_v) -> dict[str, np.ndarray]:
    """The outputs of the usual wrong heads, keyed by what is wrong."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v  # (N, d_k), (N, d_k), (N, d_v)
    (N, C), d_k, d_v = X.shape, W_q.shape[1], W_v.shape[1]
    S = Q @ K.T  # (N, N) unscaled scores
    A = softmax(S / np.sqrt(d_k))  # (N, N), the right weights
    return {
        "it divides the scores by √C (the model width); divide by √d_k, the width of the "
        "queries and keys": softmax(S / np.sqrt(C)) @ V,
        "it divides the scores by √d_v; divide by √d_k, the width of the queries and keys": (
            softmax(S / np.sqrt(d_v)) @ V
        ),
        "it divides the scores by √N (the number of tokens); divide by √d_k": (
            softmax(S / np.sqrt(N)) @ V
        ),
        "the scores are not scaled: divide Q Kᵀ by √d_k": softmax(S) @ V,
        "it divides the scores by d_k; divide by √d_k": softmax(S / d_k) @ V,
        "it multiplies the scores by √d_k; divide them by √d_k": softmax(S * np.sqrt(d_k)) @ V,
        "the attention weights are transposed: use weights @ V with the weights normalised "
        "over each row (one row per query)": A.T @ V,
        "softmax is taken over the wrong axis: each ROW (one query) must sum to 1, use "
        "axis=-1": softmax(S / np.sqrt(d_k), axis=0) @ V,
        "queries and keys are swapped: scores = (X W_q)(X W_k)ᵀ, row i belongs to query i": softmax(
            S.T / np.sqrt(d_k)
        )
        @ V,
        "there is no softmax: the scores must become weights that sum to 1 per row": (
            S / np.sqrt(d_k) @ V
        ),
    }


def _shape_mistake(result, X, W_q, W_k, W_v) -> str | None:
    """Name an answer of the wrong shape: the weights, or the wrong values matrix."""
    Q, K = X @ W_q, X @ W_k  # (N, d_k) each
    A = softmax(Q @ K.T / np.sqrt(W_q.shape[1]))  # (N, N)
    if close(result, A):
        return "it returns the attention weights: return weights @ V"
    if close(result, A @ X):
        return "it uses X as the values: multiply the weights by V = X @ W_v"
    if close(result, A @ K):
        return "it uses K as the values: multiply the weights by V = X @ W_v"
    if close(result, A @ Q):
        return "it uses Q as the values: multiply the weights by V = X @ W_v"
    if close(result, (A @ (X @ W_v)).T):
        return "the output is transposed: weights @ V is (N, d_v), one row per token"
    return None


def _head_problem(fn, seed: int, N: int, C: int, d_k: int, d_v: int, size: float) -> str | None:
    """What is wrong with fn on one seeded case, or None."""
    X, W_q, W_k, W_v = _random_inputs(seed, N, C, d_k, d_v, size)
    expected, _ = scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v)  # (N, d_v)
    result, problem = run(fn, X, W_q, W_k, W_v, names=_NAMES)
    if problem is None and isinstance(result, tuple):
        return (
            "it returns a tuple: return only the output (scaled_dot_product_attention "
            "returns (output, weights))"
        )
    if problem is None:
        result, problem = as_array(result, None)
    if problem is None and result.shape != (N, d_v):
        problem = _shape_mistake(result, X, W_q, W_k, W_v)
        problem = problem or f"expected shape (N, d_v) = {(N, d_v)}; got {result.shape}"
    if problem is None and not close(result, expected):
        problem = diagnose(result, _attention_mistakes(X, W_q, W_k, W_v))
        if problem is None and size > 1 and not np.all(np.isfinite(result)):
            problem = (
                "it returns inf or NaN when the scores are large (about 1e3): use "
                "mha_lib.softmax, which subtracts each row's maximum"
            )
        problem = problem or mismatch(result, expected, "softmax(X W_q (X W_k)ᵀ / √d_k) X W_v")
    return problem


# (seed, N, C, d_k, d_v, size of W_q): sizes that all differ, then others, then scores of 1e3
_HEAD_CASES = (
    (22, 5, 6, 4, 3, 1.0),
    (23, 7, 5, 3, 2, 1.0),
    (24, 4, 3, 3, 2, 1e3),
)


def _swaps_k_and_v(fn, case: tuple) -> bool:
    """True when fn is right once handed W_v as W_k and W_k as W_v: it swaps K and V."""
    seed, N, C, d_k, d_v, size = case
    X, W_q, W_k, W_v = _random_inputs(seed, N, C, d_k, d_v, size)
    expected, _ = scaled_dot_product_attention(X @ W_q, X @ W_k, X @ W_v)  # (N, d_v)
    result, problem = run(fn, X, W_q, W_v, W_k, names=_NAMES)
    if problem is not None or isinstance(result, tuple):
        return False
    result, problem = as_array(result, None)
    return problem is None and close(result, expected)


def _head_hints(fn, case: tuple) -> list[tuple[str, Callable[[], bool]]]:
    """The hints for a failed case, each with the test of the answer that shows it: the same
    answer is right on a probe that changes only what the hint is about (see `in_case`)."""
    seed, N, C, d_k, d_v, size = case
    _, N0, C0, d_k0, d_v0, _ = _HEAD_CASES[0]
    hints = [
        (
            "it is right when the scores are about 1 and wrong when they are about 1e3",
            lambda: _head_problem(fn, seed + 10, N, C, d_k, d_v, 1.0) is None,
        ),
        (
            f"it is right with d_k = {d_k0}, d_v = {d_v0} and wrong with d_k = {d_k}, "
            f"d_v = {d_v}: read d_k = W_q.shape[1] and d_v = W_v.shape[1]",
            lambda: _head_problem(fn, seed + 20, N, C, d_k0, d_v0, size) is None,
        ),
        (
            f"it is right with N = {N0} tokens of C = {C0} features and wrong with N = {N}, "
            f"C = {C}: read N and C from X.shape",
            lambda: _head_problem(fn, seed + 30, N0, C0, d_k, d_v, size) is None,
        ),
    ]
    return hints if size > 1 else hints[1:]


@checker("attention_with_weights")
def check_attention_with_weights(fn):
    """Check fn(X, W_q, W_k, W_v) -> softmax(X W_q (X W_k)ᵀ / √d_k) X W_v, shape (N, d_v).

    Only the output is asked for: a tuple (output, weights) is rejected with a hint.
    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for i, case in enumerate(_HEAD_CASES):
        problem = _head_problem(fn, *case)
        if problem is not None and _swaps_k_and_v(fn, case):
            return (
                "K and V are swapped: it computes the scores with X @ W_v and weights X @ W_k; "
                "the scores are Q Kᵀ with K = X @ W_k, and the output is weights @ V with "
                "V = X @ W_v"
            )
        if problem is not None and "mismatch" in problem:
            return (
                "a matrix product's shapes do not line up: Q = X @ W_q is (N, d_k), the scores "
                "Q @ K.T are (N, N), the output weights @ V is (N, d_v) (if you wrote "
                "K.transpose(-2, -1): on a 2-D numpy array it changes nothing; use K.T) "
                f"[{problem}]"
            )
        if problem is not None and i > 0:  # an earlier case passed: say what differs, if shown
            problem = in_case(problem, *_head_hints(fn, case))
        if problem is not None:
            return problem
    return None


def _positional_inputs(N: int, C: int, seed: int | None):
    """[X | I_N] (N, C + N): the running example (seed None) or random content."""
    if seed is None:
        _, X = running_example()  # (11, 6)
    else:
        X = 3 * np.random.default_rng(seed).normal(size=(N, C))  # (N, C)
    return np.concatenate([X, np.eye(N)], axis=1)  # (N, C + N)


def _head_matrices(result, N: int, C: int):
    """(W_q, W_k), each (C + N, d_k), from a learner's answer, or (None, what is wrong)."""
    pair, problem = _arrays(result, 2, "(W_q, W_k)")
    if problem is not None:
        return None, problem
    for label, W in zip(("W_q", "W_k"), pair):
        if W.ndim == 2 and W.shape[0] == 6 + 11 and (N, C) != (11, 6):
            return None, (
                f"{label} has {W.shape[0]} rows, the size for the running example (N = 11, "
                f"C = 6): use the arguments; for N = {N}, C = {C} it needs C + N = {C + N}"
            )
        if W.ndim != 2 or W.shape[0] != C + N:
            return None, (
                f"{label} has shape {W.shape}; expected (C + N, d_k) = ({C + N}, d_k) because "
                f"it multiplies X_pos = [X | one-hot positions] (N = {N}, C = {C})"
            )
        if not np.all(np.isfinite(W)):
            return None, f"{label} contains inf or NaN: use finite numbers"
    if pair[0].shape != pair[1].shape:
        return None, f"W_q has shape {pair[0].shape} but W_k has {pair[1].shape}: the same d_k"
    return pair, None


def _next_token_weights(X_pos, W_q, W_k):
    """For each token but the last: the key it attends to most, and its weight on the next."""
    _, A = scaled_dot_product_attention(X_pos @ W_q, X_pos @ W_k, X_pos)  # A: (N, N)
    rows = np.arange(len(X_pos) - 1)
    return A[rows].argmax(axis=-1), A[rows, rows + 1]  # (N - 1,), (N - 1,)


def _shift(block: np.ndarray) -> int | None:
    """s when row i of a position block (N, d_k) peaks at column i + s wherever it is nonzero
    (np.eye(N, k=s) times a number), else None."""
    rows = np.flatnonzero(np.abs(block).max(axis=1) > 0)
    if len(rows) == 0:
        return None
    shifts = set((np.abs(block[rows]).argmax(axis=1) - rows).tolist())
    return shifts.pop() if len(shifts) == 1 else None


def _previous_token_message(Q_pos: np.ndarray, K_pos: np.ndarray) -> str:
    """Name what a learner did to get a previous-token head, from the position rows of W_q
    and W_k (N, d_k): which side carries the shift, and which way it points."""
    s_q, s_k = _shift(Q_pos), _shift(K_pos)
    if s_q == 0 and s_k:
        return (
            f"this is a previous-token head: the keys carry the shift, np.eye(N, k={s_k}), so "
            f"key j holds position j{s_k:+d} and query i finds key i{-s_k:+d}. On the key side "
            f"the shift goes the other way, np.eye(N, k={-s_k}) (key j holds position j{-s_k:+d}"
            "), or put np.eye(N, k=1) on the query side and np.eye(N) on the key side"
        )
    if s_k == 0 and s_q:
        return (
            f"this is a previous-token head: the queries carry np.eye(N, k={s_q}), so query i "
            f"asks for position i{s_q:+d}; shift them the other way, np.eye(N, k={-s_q})"
        )
    return (
        "this is a previous-token head: query i must match key i + 1, the query of position i "
        "must equal the key of position i + 1"
    )


# (N, C, seed of the content; None = the running example): short sequences first, then long
# ones, where the next token has N - 2 other keys to beat
_NEXT_TOKEN_CASES = ((11, 6, None), (7, 3, 24), (9, 4, 25), (30, 5, 26), (64, 3, 27))
_SHORT = 11  # the longest of the short sequences


def _lead(X_pos, W_q, W_k) -> float:
    """By how much the next token's score beats every other score, at worst over the rows
    i < N - 1 (the scores divided by √d_k, as the softmax sees them)."""
    S = (X_pos @ W_q) @ (X_pos @ W_k).T / np.sqrt(W_q.shape[1])  # (N, N)
    rows = np.arange(len(X_pos) - 1)
    nxt = S[rows, rows + 1]
    others = S[rows].copy()
    others[rows, rows + 1] = -np.inf
    return float((nxt - others.max(axis=1)).min())


def _long_sequence_message(fn, N, C, X_pos, W_q, W_k, weight) -> str:
    """A head that works for N <= 11 and not for N: name why its scale does not grow enough."""
    lead, need = _lead(X_pos, W_q, W_k), np.log(N - 1)
    problem = (
        f"right for N ≤ {_SHORT}, but at N = {N} the next token gets only {weight:.2f} of the "
        f"weight: its score leads the others by {lead:.2f}, and against N - 1 = {N - 1} "
        f"competitors the softmax needs a lead above ln(N - 1) = {need:.2f}. The softmax's "
        "competitors grow with N, so the lead β/√d_k must grow with N too, like ln N. "
    )
    N0, C0, _ = _NEXT_TOKEN_CASES[0]
    short = _head_matrices(run(fn, N0, C0)[0], N0, C0)[0]
    if short is None:
        return problem + "Make the lead larger than ln(N - 1) for every N"
    lead0 = _lead(_positional_inputs(N0, C0, None), *short)
    scale, scale0 = (float(np.abs(Q).max() * np.abs(K).max()) for Q, K in ((W_q, W_k), short))
    if np.isclose(scale, scale0, rtol=1e-9, atol=0):
        return problem + (
            f"Yours is a fixed scale (the same for N = {N0} and N = {N}), and once divided by "
            f"√d_k its lead shrinks from {lead0:.2f} at N = {N0}. Let β grow with N, e.g. "
            "β = 2·√d_k·ln N: a lead of 2 ln N, so e^(2 ln N) = N² against N - 1"
        )
    if lead < lead0 - 1e-9:
        return problem + (
            f"Your scale grows, but more slowly than √d_k, so the lead shrinks from {lead0:.2f} at "
            f"N = {N0}. Let β grow like √d_k·ln N, e.g. β = 2·√d_k·ln N"
        )
    if lead <= lead0 + 1e-9:
        return problem + (
            f"A β proportional to √d_k only cancels the division by √d_k: the lead stays "
            f"{lead:.2f} for every N. Multiply by ln N too, e.g. β = 2·√d_k·ln N"
        )
    return problem + (
        f"Your lead grows (from {lead0:.2f} at N = {N0}) but more slowly than ln(N - 1); "
        "e.g. β = 2·√d_k·ln N gives a lead of 2 ln N"
    )


@checker("next_token_head")
def check_next_token_head(fn):
    """Check fn(N, C) -> (W_q, W_k), each (C + N, d_k), for inputs X_pos = [X | I_N]:
    every token i < N - 1 must put more than half of its weight on token i + 1, on the
    running example, on random content of other sizes, and on long sequences (N = 30 and
    N = 64), where a query scale fixed for N = 11 no longer wins.
    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for N, C, seed in _NEXT_TOKEN_CASES:
        X_pos = _positional_inputs(N, C, seed)  # (N, C + N)
        result, problem = run(fn, N, C)
        if problem is None:
            result, problem = _head_matrices(result, N, C)
        if problem is not None:
            return problem
        W_q, W_k = result
        best, on_next = _next_token_weights(X_pos, W_q, W_k)  # (N - 1,), (N - 1,)
        rows = np.arange(N - 1)  # the last token has no next token
        if np.array_equal(best[1:], rows[1:] - 1):
            return _previous_token_message(W_q[C:], W_k[C:])
        if np.array_equal(best, rows):
            return "each token attends to itself: shift the query one position ahead"
        if not np.array_equal(best, rows + 1):
            i = int(np.flatnonzero(best != rows + 1)[0])
            problem = f"token {i} attends mostly to token {best[i]}; expected {i + 1}"
            X_pos[:, :C] = 0  # the same tokens without content
            if np.array_equal(_next_token_weights(X_pos, W_q, W_k)[0], rows + 1):
                problem += (
                    ": the content of X changes where tokens look; keep the feature rows of "
                    "W_q and W_k at zero and use only the position features"
                )
            return problem
        if on_next.min() <= 0.5:
            if N > _SHORT:
                return _long_sequence_message(fn, N, C, X_pos, W_q, W_k, on_next.min())
            return (
                f"the next token wins but weakly (smallest weight {on_next.min():.2f} ≤ 0.5 for "
                f"N = {N}): make W_q larger, remember the scores are divided by √d_k"
            )
    return None
