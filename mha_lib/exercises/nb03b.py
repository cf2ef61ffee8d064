"""Checkers for notebook 03b (what heads buy).

- `check_head_scores(fn)`: fn(X (N, C), W_q, W_k, num_heads) -> (h, N, N), each head's scores
  (X W_Q^h)(X W_K^h)ᵀ / √d_k before the softmax;
- `check_two_heads_by_hand(fn)`: fn(n_tok, d_c) -> (W_q, W_k, W_v, W_o), two heads that give
  every token i >= 2 the target [c_(i-2), c_(N-1)] (the content two places back, then the last
  token's content) from inputs x_j = [c_j, one-hot(j)].

Each one recognises the usual mistakes: the scale missing or taken from the full width, a reshape
without the transpose, the weights instead of the scores, the keys' and queries' roles swapped;
for the hand-built heads, the worked example's one step back or token 0 copied, the two halves
of W_O swapped, a softmax that is not sharp, sizes hard-coded. The cases make the shortcuts fail:
N, h and d_k all differ and h·d_k != C; the task is tried on 6 and on 8 tokens. Answers may be
numpy arrays or torch tensors (see `_base`).
"""

from __future__ import annotations

import math

import numpy as np

from ..attention import softmax
from ..multihead import multi_head_attention, split_heads
from ._base import GENERIC, as_array, checker, close, diagnose, mismatch, run

__all__ = ["check_head_scores", "check_two_heads_by_hand"]


# ---------------------------------------------------------------------------- head_scores

# (seed, N, C, h, d_k): h·d_k != C in the second and third, so "d_k = C / h" fails there
_SCORE_CASES = ((0, 5, 6, 2, 3), (1, 4, 5, 3, 2), (2, 3, 8, 2, 3))


def _per_head(X: np.ndarray, W: np.ndarray, h: int) -> np.ndarray:
    return split_heads((X @ W)[None], h)[0]  # (h, N, d_k)


def _score_mistakes(X, W_q, W_k, h: int) -> dict[str, np.ndarray]:
    """Outputs of the usual wrong head_scores, keyed by what is wrong."""
    N, C = X.shape
    d_k = W_q.shape[1] // h
    q, k = _per_head(X, W_q, h), _per_head(X, W_k, h)  # (h, N, d_k)
    raw = q @ k.swapaxes(-1, -2)  # (h, N, N)
    Q, K = X @ W_q, X @ W_k  # (N, h*d_k)
    q_bug, k_bug = Q.reshape(h, N, d_k), K.reshape(h, N, d_k)
    q_int, k_int = (M.reshape(N, d_k, h).transpose(2, 0, 1) for M in (Q, K))
    mistakes = {}
    if 0 < C // h != d_k:
        mistakes[
            f"it divides by √(C // h) = √{C // h}: read d_k off W_q, d_k = W_q.shape[1] // "
            f"num_heads = {d_k}, not from C"
        ] = raw / math.sqrt(C // h)
    mistakes.update(
        {
            "the scores are not divided by √d_k: each head's scores are q·k / √d_k": raw,
            f"each head divides by √(h·d_k) = √{h * d_k}, the full width; a head divides by the "
            f"square root of its own d_k = {d_k}": raw / math.sqrt(h * d_k),
            f"it divides by d_k = {d_k}, not by its square root √d_k": raw / d_k,
            "these are the weights, not the scores: the softmax is applied; return the scores "
            "before the softmax": softmax(raw / math.sqrt(d_k), axis=-1),
            "rows and columns are swapped: rows are queries, columns keys; compute q @ k.T, "
            "not k @ q.T": raw.swapaxes(-1, -2) / math.sqrt(d_k),
            "every head got the wide head's scores (X W_q)(X W_k)ᵀ: take head i's columns "
            "i*d_k:(i+1)*d_k of X W_q and X W_k first": np.broadcast_to(
                Q @ K.T / math.sqrt(d_k), (h, N, N)
            ),
            "the keys are computed with W_q: use X W_k for the keys": (
                q @ q.swapaxes(-1, -2) / math.sqrt(d_k)
            ),
            "reshape without transpose: (X W_q).reshape(h, N, d_k) has the right shape but "
            "scrambles tokens; reshape to (N, h, d_k), then move the head axis first": (
                q_bug @ k_bug.swapaxes(-1, -2) / math.sqrt(d_k)
            ),
            "heads taken as interleaved columns (head i got columns i, i+h, ...); head i owns the "
            "contiguous block i*d_k:(i+1)*d_k": q_int @ k_int.swapaxes(-1, -2) / math.sqrt(d_k),
        }
    )
    return mistakes


def _scores_shape(shape: tuple, N: int, h: int) -> str | None:
    """Name a head_scores result of the wrong shape."""
    if shape == (N, N):
        return (
            f"it returns one (N, N) matrix, {shape}: that is one head (or the heads summed); "
            f"return one (N, N) matrix per head, shape (h, N, N) = {(h, N, N)}"
        )
    if shape == (N, N, h) and h != N:
        return f"the head axis comes last, {shape}: put it first, (h, N, N) = {(h, N, N)}"
    if shape == (1, h, N, N):
        return f"it keeps a batch axis of 1, {shape}: return (h, N, N) = {(h, N, N)}"
    return None


@checker("head_scores")
def check_head_scores(fn):
    """Check a learner's head_scores(X, W_q, W_k, num_heads): X (N, C), W_q and W_k
    (C, h*d_k) -> (h, N, N), head i's scores (X W_Q^i)(X W_K^i)ᵀ / √d_k.
    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for seed, N, C, h, d_k in _SCORE_CASES:
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((N, C))  # (N, C)
        W_q, W_k = (rng.standard_normal((C, h * d_k)) for _ in range(2))  # (C, h*d_k)
        q, k = _per_head(X, W_q, h), _per_head(X, W_k, h)  # (h, N, d_k)
        expected = q @ k.swapaxes(-1, -2) / math.sqrt(d_k)  # (h, N, N)
        result, problem = run(fn, X, W_q, W_k, h, names=("X", "W_q", "W_k"))
        if problem is None:
            result, problem = as_array(result, None)
        if problem is None and result.shape != expected.shape:
            problem = _scores_shape(result.shape, N, h) or (
                f"expected shape (h, N, N) = {expected.shape}; got {result.shape}"
            )
        if problem is None and not close(result, expected):
            problem = diagnose(result, _score_mistakes(X, W_q, W_k, h)) or mismatch(
                result, expected, "head i's scores (X W_Q^i)(X W_K^i)ᵀ / √d_k in out[i]"
            )
        if problem is not None and problem.startswith(GENERIC):
            if h != 2 and _head_scores_right_on(fn, seed + 10, N, C, 2, d_k):
                problem += (
                    f" [it is right with 2 heads and wrong with {h}: use num_heads, do not "
                    "hard-code it]"
                )
            elif h * d_k != C and _head_scores_right_on(fn, seed + 20, N, h * d_k, h, d_k):
                problem += (
                    f" [it is right when h·d_k = C and wrong with h·d_k = {h * d_k}, C = {C}: "
                    "read d_k = W_q.shape[1] // num_heads, not C // num_heads]"
                )
        if problem is not None:
            return problem
    return None


def _head_scores_right_on(fn, seed: int, N: int, C: int, h: int, d_k: int) -> bool:
    """Whether fn is right on another case (for the hint of a failed one)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, C))
    W_q, W_k = (rng.standard_normal((C, h * d_k)) for _ in range(2))
    result, problem = run(fn, X, W_q, W_k, h)
    if problem is None:
        result, problem = as_array(result, (h, N, N))
    if problem is not None:
        return False
    q, k = _per_head(X, W_q, h), _per_head(X, W_k, h)
    return close(result, q @ k.swapaxes(-1, -2) / math.sqrt(d_k))


# ---------------------------------------------------------------------------- two heads by hand

_TASK_SIZES = ((6, 8), (8, 8))  # (n_tok, d_c): 6 tokens as in the notebook, then 8
_TOLERANCE = 1e-4  # relative error allowed on the scored tokens


def _task(n_tok: int, d_c: int, seed: int = 0, B: int = 64):
    """B sequences x_j = [c_j, one-hot(j)] (B, N, d + N) and their contents c (B, N, d)."""
    c = np.random.default_rng(seed).standard_normal((B, n_tok, d_c))  # (B, N, d)
    position = np.broadcast_to(np.eye(n_tok), (B, n_tok, n_tok))  # (B, N, N)
    return np.concatenate([c, position], axis=-1), c


def _relative_error(Y: np.ndarray, T: np.ndarray) -> float:
    """E|y_i - t_i|^2 / E|t_i|^2 over the scored tokens i >= 2."""
    return float(((Y - T)[:, 2:] ** 2).sum() / (T[:, 2:] ** 2).sum())


def _halves(c: np.ndarray) -> dict[str, np.ndarray]:
    """What each half of the output may hold, by name: (B, N, d) each."""
    N = c.shape[1]
    return {
        "two back": np.roll(c, 2, axis=1),
        "one back": np.roll(c, 1, axis=1),
        "itself": c,
        "last": np.broadcast_to(c[:, N - 1 :], c.shape),
        "first": np.broadcast_to(c[:, :1], c.shape),
        "token 5": np.broadcast_to(c[:, 5:6], c.shape),
        "mix": 0.5 * (np.roll(c, 2, axis=1) + np.broadcast_to(c[:, N - 1 :], c.shape)),
    }


def _read_weights(answer, n_tok: int, d_c: int):
    """The four weight matrices as float arrays of consistent shapes, or (None, why not)."""
    C, D = d_c + n_tok, 2 * d_c
    if isinstance(answer, (tuple, list)) and len(answer) != 4:
        return None, (
            f"it returns {len(answer)} arrays; expected a tuple of four arrays (W_q, W_k, W_v, W_o)"
        )
    if not isinstance(answer, (tuple, list)):
        return (
            None,
            f"expected a tuple of four arrays (W_q, W_k, W_v, W_o); got {type(answer).__name__}",
        )
    arrays = []
    for name, a in zip(("W_q", "W_k", "W_v", "W_o"), answer):
        arr, problem = as_array(a, None, what=f"an array for {name}")
        if problem is not None:
            return None, problem
        if arr.ndim != 2:
            return None, f"{name} has shape {arr.shape}; expected a matrix"
        arrays.append(arr)
    W_q, W_k, W_v, W_o = arrays
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if W.shape[0] != C:
            return None, (
                f"{name} has {W.shape[0]} rows; it reads x_j = [c_j, one-hot(j)], so it needs "
                f"C = d_c + n_tok = {C} rows (here n_tok = {n_tok}: do not hard-code the sizes)"
            )
        if W.shape[1] % 2:
            return None, f"{name} has {W.shape[1]} columns: two heads need an even number, 2·d"
    if W_q.shape != W_k.shape:
        return None, f"W_q {W_q.shape} and W_k {W_k.shape} must have the same shape (C, 2·d_k)"
    if W_o.shape != (W_v.shape[1], D):
        return None, (
            f"W_o has shape {W_o.shape}; expected (2·d_v, 2·d_c) = {(W_v.shape[1], D)}: "
            "one row per value feature, one column per output feature"
        )
    return arrays, None


def _two_heads_problem(fn, n_tok: int, d_c: int) -> str | None:
    result, problem = run(fn, n_tok, d_c)
    if problem is not None:
        return problem
    weights, problem = _read_weights(result, n_tok, d_c)
    if problem is not None:
        return problem
    X, c = _task(n_tok, d_c, seed=n_tok)
    options = _halves(c)
    T = np.concatenate([options["two back"], options["last"]], axis=-1)  # (B, N, 2d)
    with np.errstate(all="ignore"):
        Y = multi_head_attention(X, *weights, 2)  # (B, N, 2d)
    if not np.all(np.isfinite(Y)):
        return "the output contains inf or NaN: are some scores huge? s = 50 is plenty"
    err = _relative_error(Y, T)
    if err < _TOLERANCE:
        return None
    first, second = Y[..., :d_c], Y[..., d_c:]
    if np.abs(Y[:, 2:]).max() < 1e-9:
        return "the output is zero: W_v or W_o does not pass the content c_j on to the output"
    matches = {
        half: [n for n, t in options.items() if _relative_error(out, t) < 1e-3]
        for half, out in (("first", first), ("second", second))
    }
    if "last" in matches["first"] and "two back" in matches["second"]:
        return (
            "the two halves are swapped: the first d_c outputs must hold c_(i-2) and the last "
            "d_c the last token's c_(N-1); swap the blocks of W_o"
        )
    if "one back" in matches["first"] and "first" in matches["second"]:
        return (
            "these are the worked example's heads, one step back and token 0; this task needs "
            "head 0 two steps back (the key of token j answers position j + 2) and head 1 on "
            "the last token, position N - 1"
        )
    if "mix" in matches["first"] and "mix" in matches["second"]:
        return (
            "both halves hold the same half-and-half mix of c_(i-2) and c_(N-1): that is one "
            "attention pattern doing both jobs, the average of the two heads; give each head its "
            "own pattern and route each head to its own half with W_o"
        )
    named = {
        "one back": "looks one step back (i - 1), as the worked example; this task needs two "
        "steps back: the key of token j must answer position j + 2",
        "itself": "looks at the token itself; it must look two steps back, at i - 2",
        "first": "looks at token 0, as the worked example; here it must look at the last token, "
        "position N - 1",
        "token 5": "looks at position 5, the last one when N = 6: use n_tok - 1, do not "
        "hard-code the sizes",
    }
    for half, want in (("first", "two back"), ("second", "last")):
        if want in matches[half]:
            continue
        for got in matches[half]:
            if got in named:
                head = (
                    "head 0 (the first d_c outputs)"
                    if half == "first"
                    else ("head 1 (the last d_c outputs)")
                )
                return f"{head} {named[got]}"
    if err < 0.2:
        return (
            f"close (relative error {err:.1e}), but the weights are not one-hot: the softmax is "
            "not sharp enough; scale the queries up (s = 50 gives one-hot to about 1e-8)"
        )
    return mismatch(
        Y[:, 2:],
        T[:, 2:],
        "[c_(i-2), c_(N-1)] for every token i >= 2 (head 0 two steps back, head 1 on the last "
        "token, W_o routing head 0 to the first d_c outputs and head 1 to the last d_c)",
    )


@checker("two_heads_by_hand")
def check_two_heads_by_hand(fn):
    """Check a learner's two_heads(n_tok, d_c) -> (W_q, W_k, W_v, W_o): with
    `mha_lib.multi_head_attention(X, W_q, W_k, W_v, W_o, 2)` on inputs x_j = [c_j, one-hot(j)]
    (C = d_c + n_tok), every token i >= 2 must get [c_(i-2), c_(N-1)], to a relative error below
    1e-4. Tried with 6 and with 8 tokens. Arrays are read by value: numpy or torch alike.
    """
    for n_tok, d_c in _TASK_SIZES:
        problem = _two_heads_problem(fn, n_tok, d_c)
        if problem is not None:
            if n_tok != 6 and _two_heads_problem(fn, 6, d_c) is None and "hard-code" not in problem:
                problem += f" [right with 6 tokens, wrong with {n_tok}: do not hard-code n_tok]"
            return problem
    return None
