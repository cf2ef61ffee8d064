"""Checkers for notebook 03 (multi-head attention).

- `check_split_heads(fn)`: fn(Y (B, N, h*d), num_heads) -> (B, h, N, d);
- `check_merge_heads(fn)`: fn(Y (B, h, N, d)) -> (B, N, h*d);
- `check_multi_head_attention(fn)`: fn(X (N, C), W_q, W_k, W_v, W_o, num_heads) -> (N, C).

Each one recognises the usual mistakes: a reshape without the transpose (it
scrambles tokens), heads taken as interleaved columns, a missing W_o, heads
averaged instead of concatenated, the scale √(h·d_k) or √(C/h) instead of √d_k, ...
The cases make the shortcuts fail: B, N, h and d all differ, d_k != d_v, and
h·d_k != C. Answers may be numpy arrays or torch tensors (see `_base`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..attention import softmax
from ..multihead import merge_heads, multi_head_attention, split_heads
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

__all__ = ["check_merge_heads", "check_multi_head_attention", "check_split_heads"]


def run(fn, *args, names: tuple[str, ...] = ()):
    """`_base.run`, with the torch habit named when the answer raised on numpy arrays."""
    result, problem = _run(fn, *args, names=names)
    return result, numpy_habit(problem)


def _labelled(*shape: int) -> np.ndarray:
    """A float array whose entries are all different (0, 1, 2, ...), so any mix-up shows."""
    return np.arange(math.prod(shape), dtype=float).reshape(shape)


def _explain(problem: str | None) -> str | None:
    """Add the likely cause to an error that a float size produces in reshape."""
    if problem and "raised" in problem and "float" in problem and "int" in problem:
        return f"{problem}: a size is a float; use integer division, hd // num_heads"
    return problem


# ---------------------------------------------------------------------------- split_heads

_SPLIT_CASES = ((2, 4, 3, 2), (1, 5, 2, 3), (3, 3, 4, 1))  # (B, N, h, d); all differ


def _split_mistakes(Y: np.ndarray, h: int) -> dict[str, np.ndarray]:
    """Outputs of the usual wrong split_heads, keyed by what is wrong."""
    B, N, hd = Y.shape
    d = hd // h
    return {
        "reshape without transpose: Y.reshape(B, h, N, d) has the right shape but scrambles "
        "tokens (head 0 gets token 0's whole row, then token 1's, ...); reshape to "
        "(B, N, h, d) first, then transpose to (B, h, N, d)": Y.reshape(B, h, N, d),
        "heads taken as interleaved columns (head i got columns i, i+h, i+2h, ...); head i "
        "owns the contiguous block of columns i*d:(i+1)*d, so reshape to (B, N, h, d), "
        "not (B, N, d, h)": Y.reshape(B, N, d, h).transpose(0, 3, 1, 2),
        "it transposes before reshaping, which mixes tokens and features; reshape "
        "(B, N, h*d) to (B, N, h, d) first, then move the head axis": (
            Y.transpose(0, 2, 1).reshape(B, h, N, d)
        ),
    }


def _split_shape(shape: tuple, B: int, N: int, h: int, d: int) -> str | None:
    """Name a split_heads result of the wrong shape."""
    if shape == (B, N, h, d):
        return (
            f"it returns shape (B, N, h, d) = {shape}: the head axis must come before the "
            "token axis; transpose(0, 2, 1, 3) after the reshape"
        )
    if shape == (B, h, d, N):
        return (
            f"it returns shape (B, h, d, N) = {shape}: the last two axes are swapped; each "
            "head must hold one row of d features per token"
        )
    if shape == (h, B, N, d):
        return (
            f"it returns shape (h, B, N, d) = {shape}: the heads come before the batch; "
            "stack them on axis 1 (or transpose(0, 2, 1, 3))"
        )
    if shape in ((h, N, d), (N, h, d)):
        return f"it returns shape {shape}: the batch axis B = {B} is lost; keep it first"
    if len(shape) == 4 and shape[::2] == (B, N) and shape[1] * shape[3] == h * d:
        return f"it makes {shape[1]} heads; num_heads = {h}: use the argument num_heads"
    return None


def _swaps_sizes(fn) -> bool:
    """True when fn gives (B, d, N, h) on a probe with other sizes too (h = 2, d = 5)."""
    result, problem = run(fn, _labelled(1, 3, 10), 2)
    return problem is None and np.shape(to_numpy(result)) == (1, 5, 3, 2)


@checker(
    "split_heads",
    writes=(
        Library("mha_lib.multihead", "split_heads", "mha_lib.split_heads"),
        Library("mha_lib.pytorch", "split_heads", "mha_lib.pytorch.split_heads", load=False),
    ),
)
def check_split_heads(fn):
    """Check a learner's split_heads(Y, num_heads): (B, N, h*d) -> (B, h, N, d).

    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for B, N, h, d in _SPLIT_CASES:
        Y = _labelled(B, N, h * d)  # (B, N, h*d)
        expected = split_heads(Y, h)  # (B, h, N, d)
        result, problem = run(fn, Y, h, names=("Y",))
        if problem is None:
            result, problem = as_array(result, None)
        if problem is None and result.shape == (B, d, N, h) != expected.shape:
            if _swaps_sizes(fn):  # not a hard-coded count that happens to equal d here
                return (
                    f"it returns shape (B, d, N, h) = {result.shape}: {d} heads of {h} "
                    "features, the sizes swapped; make num_heads pieces, np.split(Y, "
                    "num_heads, axis=-1) or reshape(B, N, num_heads, d)"
                )
        if problem is None and result.shape != expected.shape:
            problem = _split_shape(result.shape, B, N, h, d) or (
                f"expected shape (B, h, N, d) = {expected.shape}; got {result.shape}"
            )
        if problem is None and not close(result, expected):
            problem = diagnose(result, _split_mistakes(Y, h)) or (
                "wrong values: out[b, i, n] must be Y[b, n, i*d:(i+1)*d] "
                "(token n's features of head i)"
            )
        if problem is not None:
            return _explain(problem)
    return None


# ---------------------------------------------------------------------------- merge_heads

_MERGE_CASES = ((2, 3, 4, 2), (1, 2, 5, 3), (3, 4, 3, 1))  # (B, h, N, d)


def _merge_shape(shape: tuple, B: int, h: int, N: int, d: int) -> str | None:
    """Name a merge_heads result of the wrong shape."""
    if shape == (B, N, h, d):
        return (
            f"it returns shape (B, N, h, d) = {shape}: the transpose is right, now reshape to "
            "(B, N, h*d) to put the heads side by side"
        )
    if shape == (B, N, d):
        return (
            f"it returns shape (B, N, d) = {shape}: it sums or averages the heads; "
            "concatenate them along the features instead"
        )
    if shape == (B, h * N, d):
        return (
            f"it returns shape (B, h*N, d) = {shape}: it stacks the heads along the tokens; "
            "they go side by side along the features, (B, N, h*d)"
        )
    if shape == (N, h * d):
        return f"it returns shape (N, h*d) = {shape}: the batch axis B = {B} is lost"
    return None


@checker(
    "merge_heads",
    writes=(
        Library("mha_lib.multihead", "merge_heads", "mha_lib.merge_heads"),
        Library("mha_lib.pytorch", "merge_heads", "mha_lib.pytorch.merge_heads", load=False),
    ),
)
def check_merge_heads(fn):
    """Check a learner's merge_heads(Y): (B, h, N, d) -> (B, N, h*d), heads side by side.

    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for B, h, N, d in _MERGE_CASES:
        Z = _labelled(B, h, N, d)  # (B, h, N, d)
        expected = merge_heads(Z)  # (B, N, h*d)
        result, problem = run(fn, Z, names=("Y",))
        if problem is None:
            result, problem = as_array(result, None)
        if problem is None and result.shape != expected.shape:
            problem = _merge_shape(result.shape, B, h, N, d) or (
                f"expected shape (B, N, h*d) = {expected.shape}; got {result.shape}"
            )
        if problem is None and not close(result, expected):
            problem = diagnose(
                result,
                {
                    "reshape without transpose: Y.reshape(B, N, h*d) scrambles tokens (an "
                    "output row holds several tokens of one head, not one token of every "
                    "head); transpose to (B, N, h, d) first, then reshape": Z.reshape(B, N, h * d),
                    "the heads' features are interleaved (feature j of every head, then "
                    "feature j+1, ...); head i must fill the block of columns i*d:(i+1)*d, "
                    "so transpose(0, 2, 1, 3), not (0, 2, 3, 1)": (
                        Z.transpose(0, 2, 3, 1).reshape(B, N, h * d)
                    ),
                    "the heads are in reverse order: head i fills columns i*d:(i+1)*d": (
                        merge_heads(Z[:, ::-1])
                    ),
                },
            ) or ("wrong values: out[b, n, i*d:(i+1)*d] must be Y[b, i, n] (head i of token n)")
        if problem is not None:
            return _explain(problem)
    return None


# ---------------------------------------------------------------------------- multi-head attention


def _heads(Y: np.ndarray, h: int, how: str) -> np.ndarray:
    """(N, h*d) -> (h, N, d): correctly ("blocks") or in one of two wrong ways."""
    N, hd = Y.shape
    d = hd // h
    if how == "no transpose":
        return Y.reshape(h, N, d)
    if how == "interleaved":
        return Y.reshape(N, d, h).transpose(2, 0, 1)
    return Y.reshape(N, h, d).transpose(1, 0, 2)


def _mha_variant(X, W_q, W_k, W_v, W_o, h, split="blocks", scale=None, axis=-1, swap=False):
    """Multi-head attention with one switch flipped; returns (heads (h, N, d_v), output (N, C))."""
    q, k, v = (_heads(X @ W, h, split) for W in (W_q, W_k, W_v))  # (h, N, d)
    d_k = q.shape[-1]
    scores = q @ k.transpose(0, 2, 1) / (math.sqrt(d_k) if scale is None else scale)  # (h, N, N)
    if swap:
        scores = scores.transpose(0, 2, 1)
    heads = softmax(scores, axis=axis) @ v  # (h, N, d_v)
    N = X.shape[0]
    concat = heads.transpose(1, 0, 2).reshape(N, -1)  # (N, h*d_v)
    return heads, concat @ W_o  # (h, N, d_v), (N, C)


def _mha_mistakes(X, W_q, W_k, W_v, W_o, h) -> dict[str, np.ndarray]:
    """Outputs of the usual wrong multi-head attentions, keyed by what is wrong."""
    (N, C), d_k, d_v = X.shape, W_q.shape[1] // h, W_v.shape[1] // h
    args = (X, W_q, W_k, W_v, W_o, h)
    heads, out = _mha_variant(*args)  # (h, N, d_v), (N, C): the right answer
    q, k, v = (_heads(X @ W, h, "blocks") for W in (W_q, W_k, W_v))  # (h, N, d)
    A_mean = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d_k)).mean(axis=0)  # (N, N)
    one_pattern = (A_mean @ v).transpose(1, 0, 2).reshape(N, -1) @ W_o  # (N, C)
    return {
        "it divides the scores by √(h·d_k), the width of W_q; each head divides its own "
        "scores by √d_k with d_k = W_q.shape[1] // num_heads": (
            _mha_variant(*args, scale=math.sqrt(h * d_k))[1]
        ),
        "it takes d_k = C / num_heads for the scale; h·d_k need not be C: d_k = "
        "W_q.shape[1] // num_heads": _mha_variant(*args, scale=math.sqrt(C / h))[1],
        "it divides the scores by √d_v; the scale uses d_k, the width of one head's queries "
        "and keys": _mha_variant(*args, scale=math.sqrt(d_v))[1],
        "it does not divide the scores by √d_k": _mha_variant(*args, scale=1.0)[1],
        "it divides the scores by √N, the number of tokens; each head divides by √d_k, "
        "d_k = W_q.shape[1] // num_heads": _mha_variant(*args, scale=math.sqrt(N))[1],
        "it splits the heads with a reshape without transpose ((N, h*d) -> (h, N, d) "
        "directly), which scrambles tokens; reshape to (N, h, d), then transpose": (
            _mha_variant(*args, split="no transpose")[1]
        ),
        "it takes each head's columns interleaved (i, i+h, ...); head i owns the block of "
        "columns i*d_k:(i+1)*d_k": _mha_variant(*args, split="interleaved")[1],
        "it averages the heads (the result is 1/h of the expected one); concatenate the "
        "heads and multiply by W_o, which sums their contributions": out / h,
        "it averages the attention weights over the heads, so every head uses one shared "
        "pattern; each head must apply its own weights to its own values": one_pattern,
        "it merges the heads with a reshape without transpose ((h, N, d_v) -> (N, h*d_v) "
        "directly), which scrambles tokens; transpose to (N, h, d_v) first": (
            heads.reshape(N, -1) @ W_o
        ),
        "the heads meet the row blocks of W_o in reverse order: head i's output is "
        "multiplied by the rows i*d_v:(i+1)*d_v of W_o (concatenate the heads in order)": (
            heads[::-1].transpose(1, 0, 2).reshape(N, -1) @ W_o
        ),
        "its scores are transposed (K Qᵀ instead of Q Kᵀ, or W_q and W_k swapped)": (
            _mha_variant(*args, swap=True)[1]
        ),
        "it uses W_q for the keys too: K = X @ W_k": _mha_variant(X, W_q, W_q, W_v, W_o, h)[1],
        "softmax over the wrong axis: each query's row of weights must sum to 1 "
        "(axis=-1)": _mha_variant(*args, axis=-2)[1],
        "it adds X to the output (a residual connection): multi-head attention alone is "
        "Concat(heads) @ W_o; the residual belongs to the block around it": out + X,
        "it computes a single head over all the columns of W_q, W_k, W_v: split them into "
        "num_heads heads": _mha_variant(*args[:5], 1)[1],
    }


def _mha_case(seed: int, N: int, C: int, h: int, d_k: int, d_v: int):
    """Seeded random inputs (X, W_q, W_k, W_v, W_o) for one test case."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, C))  # (N, C)
    W_q = rng.standard_normal((C, h * d_k)) / math.sqrt(C)  # (C, h*d_k)
    W_k = rng.standard_normal((C, h * d_k)) / math.sqrt(C)  # (C, h*d_k)
    W_v = rng.standard_normal((C, h * d_v))  # (C, h*d_v)
    W_o = rng.standard_normal((h * d_v, C))  # (h*d_v, C)
    return X, W_q, W_k, W_v, W_o


# (seed, N, C, h, d_k, d_v): h·d_v != C first, so a missing W_o shows in the shape; then
# another number of heads; then h·d_k != C and d_k != d_v, so "d_k = C / h" fails.
_MHA_CASES = (
    (3, 5, 6, 2, 3, 2),
    (4, 4, 6, 3, 2, 2),
    (5, 3, 5, 2, 4, 3),
)
_READ_D = "read d_k = W_q.shape[1] // num_heads and d_v = W_v.shape[1] // num_heads"


def _mha_hints(fn, case: tuple) -> list[tuple[str, Callable[[], bool]]]:
    """The hints for a failed case, each with the test of the answer that shows it: the same
    answer is right on a probe that changes only what the hint is about (see `in_case`)."""
    seed, N, C, h, d_k, d_v = case
    hints = []
    if h != 2:
        hints.append(
            (
                f"it is right with 2 heads and wrong with {h}: do not hard-code the number of "
                "heads; use num_heads",
                lambda: _mha_problem(fn, seed + 10, N, C, 2, d_k, d_v) is None,
            )
        )
    if C % h == 0 and (d_k, d_v) != (C // h, C // h):
        hints.append(
            (
                f"it is right when d_k = d_v = C / h = {C // h} and wrong with d_k = {d_k}, "
                f"d_v = {d_v}: {_READ_D}, not C // num_heads",
                lambda: _mha_problem(fn, seed + 20, N, C, h, C // h, C // h) is None,
            )
        )
    if h * d_k != C:
        hints.append(
            (
                f"it is right when h·d_k = C and wrong with h·d_k = {h * d_k}, C = {C}: "
                f"{_READ_D}, not from C",
                lambda: _mha_problem(fn, seed + 30, N, h * d_k, h, d_k, d_v) is None,
            )
        )
    if d_v != d_k:
        hints.append(
            (
                f"it is right when d_v = d_k and wrong with d_k = {d_k}, d_v = {d_v}: {_READ_D}",
                lambda: _mha_problem(fn, seed + 40, N, C, h, d_k, d_k) is None,
            )
        )
    return hints


def _mha_shape(shape: tuple, N: int, C: int, h: int, d_v: int) -> str | None:
    """Name a multi-head attention output of the wrong shape."""
    if shape == (N, h * d_v) and shape != (N, C):
        return (
            f"it returns shape (N, h*d_v) = {shape}, the concatenated heads: W_o is missing; "
            f"multiply by W_o ({h * d_v}, {C}) to get back to (N, C) = {(N, C)}"
        )
    if shape == (h, N, d_v):
        return (
            f"it returns one output per head, shape (h, N, d_v) = {shape}: concatenate the "
            "heads along the features and multiply by W_o"
        )
    if shape == (N, d_v):
        return (
            f"it returns shape (N, d_v) = {shape}: the heads are summed or averaged; "
            "concatenate them to (N, h*d_v) and multiply by W_o"
        )
    return None


def _mha_problem(fn, seed: int, N: int, C: int, h: int, d_k: int, d_v: int, W_o_T=False):
    """What is wrong with fn on one seeded case, or None. W_o_T: pass W_o transposed, (C, h·d_v),
    to test an answer that multiplies by W_o.T."""
    X, W_q, W_k, W_v, W_o = _mha_case(seed, N, C, h, d_k, d_v)
    expected = multi_head_attention(X, W_q, W_k, W_v, W_o, h)  # (N, C)
    args = (X, W_q, W_k, W_v, W_o.T.copy() if W_o_T else W_o, h)
    result, problem = run(fn, *args, names=("X", "W_q", "W_k", "W_v", "W_o"))
    if problem is None:
        result, problem = as_array(result, None)
    if problem is None and result.shape != (N, C):
        problem = _mha_shape(result.shape, N, C, h, d_v) or (
            f"expected shape (N, C) = {(N, C)}; got {result.shape}"
        )
    if problem is None and not close(result, expected):
        problem = diagnose(result, _mha_mistakes(X, W_q, W_k, W_v, W_o, h)) or mismatch(
            result,
            expected,
            "Concat(head_1, ..., head_h) W_o with head_i = softmax(X W_Q^i (X W_K^i)ᵀ / √d_k) "
            "X W_V^i",
        )
    return _explain(problem)


@checker(
    "multi_head_attention",
    writes=(
        Library("mha_lib.multihead", "multi_head_attention", "mha_lib.multi_head_attention"),
        Library(
            "mha_lib.multihead", "multi_head_attention_loop", "mha_lib.multi_head_attention_loop"
        ),
    ),
)
def check_multi_head_attention(fn):
    """Check a learner's multi_head_attention(X, W_q, W_k, W_v, W_o, num_heads) for one
    sequence X (N, C), with W_q, W_k (C, h*d_k), W_v (C, h*d_v), W_o (h*d_v, C).
    Batched X is not part of the exercise and is not tried.
    Arrays are read by value: numpy, nested lists or torch tensors alike.
    """
    for case in _MHA_CASES:
        _, _, C, h, _, d_v = case
        problem = _mha_problem(fn, *case)
        if problem is not None and problem.startswith(GENERIC):
            if _mha_problem(fn, *case, W_o_T=True) is None:
                return (
                    f"it multiplies by W_o.T: W_o has shape (h·d_v, C) = {(h * d_v, C)} and the "
                    "output is Concat(heads) @ W_o (torch's Linear stores the transpose, "
                    "(out, in); numpy's W_o does not)"
                )
            if "mismatch" in problem:
                return (
                    "a matrix product's shapes do not line up: X (N, C) @ W_q (C, h·d_k); per "
                    "head q, k (N, d_k) and v (N, d_v), the scores q @ k.T (N, N); "
                    "Concat(heads) (N, h·d_v) @ W_o (h·d_v, C) (if you wrote k.transpose(-2, "
                    "-1) for one head's 2-D k: in numpy it changes nothing; use k.T) "
                    f"[{problem}]"
                )
            problem = in_case(problem, *_mha_hints(fn, case))
        if problem is not None:
            return problem
    return None
