"""Checkers for notebook 03 (multi-head attention).

- `check_split_heads(fn)`: fn(Y (B, N, h*d), num_heads) -> (B, h, N, d);
- `check_merge_heads(fn)`: fn(Y (B, h, N, d)) -> (B, N, h*d);
- `check_multi_head_attention(fn)`: fn(X (N, C), W_q, W_k, W_v, W_o, num_heads) -> (N, C).

Each one recognises the usual mistakes: a reshape without the transpose (it
scrambles tokens), heads taken as interleaved columns, a missing W_o, heads
averaged instead of concatenated, the scale √(h·d_k) instead of √d_k, ...
"""

from __future__ import annotations

import math

import numpy as np

from ..attention import softmax
from ..multihead import merge_heads, multi_head_attention, split_heads
from ._base import as_array, close, diagnose, report, run

__all__ = ["check_merge_heads", "check_multi_head_attention", "check_split_heads"]


def _labelled(*shape: int) -> np.ndarray:
    """A float array whose entries are all different (0, 1, 2, ...), so any mix-up shows."""
    return np.arange(math.prod(shape), dtype=float).reshape(shape)


# ---------------------------------------------------------------------------- split_heads

_SPLIT_CASES = ((2, 4, 3, 2), (1, 5, 2, 3))  # (B, N, h, d); N, h and d all differ


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
        "(B, N, h*d) to (B, N, h, d) first, then move the head axis": Y.transpose(0, 2, 1).reshape(
            B, h, N, d
        ),
    }


def check_split_heads(fn) -> bool:
    """Check a learner's split_heads(Y, num_heads): (B, N, h*d) -> (B, h, N, d)."""
    name = "split_heads"
    problem = None
    for B, N, h, d in _SPLIT_CASES:
        Y = _labelled(B, N, h * d)  # (B, N, h*d)
        expected = split_heads(Y, h)  # (B, h, N, d)
        result, problem = run(fn, Y.copy(), h)
        if problem is None:
            shape = np.shape(result)
            if shape == (B, N, h, d):
                problem = (
                    f"it returns shape (B, N, h, d) = {shape}: the head axis must come before "
                    "the token axis; transpose(0, 2, 1, 3) after the reshape"
                )
            elif shape == (B, h, d, N):
                problem = (
                    f"it returns shape (B, h, d, N) = {shape}: the last two axes are swapped; "
                    "each head must hold one row of d features per token"
                )
        if problem is None:
            result, problem = as_array(result, expected.shape)
        if problem is None and not close(result, expected):
            problem = diagnose(result, _split_mistakes(Y, h)) or (
                "wrong values: out[b, i, n] must be Y[b, n, i*d:(i+1)*d] "
                "(token n's features of head i)"
            )
        if problem is not None:
            break
    return report(name, problem)


# ---------------------------------------------------------------------------- merge_heads

_MERGE_CASES = ((2, 3, 4, 2), (1, 2, 5, 3))  # (B, h, N, d)


def check_merge_heads(fn) -> bool:
    """Check a learner's merge_heads(Y): (B, h, N, d) -> (B, N, h*d), heads side by side."""
    name = "merge_heads"
    problem = None
    for B, h, N, d in _MERGE_CASES:
        Z = _labelled(B, h, N, d)  # (B, h, N, d)
        expected = merge_heads(Z)  # (B, N, h*d)
        result, problem = run(fn, Z.copy())
        if problem is None:
            shape = np.shape(result)
            if shape == (B, N, h, d):
                problem = (
                    f"it returns shape (B, N, h, d) = {shape}: the transpose is right, now "
                    "reshape to (B, N, h*d) to put the heads side by side"
                )
            elif shape == (B, N, d):
                problem = (
                    f"it returns shape (B, N, d) = {shape}: it sums or averages the heads; "
                    "concatenate them along the features instead"
                )
            elif shape == (B, h * N, d):
                problem = (
                    f"it returns shape (B, h*N, d) = {shape}: it stacks the heads along the "
                    "tokens; they go side by side along the features, (B, N, h*d)"
                )
        if problem is None:
            result, problem = as_array(result, expected.shape)
        if problem is None and not close(result, expected):
            problem = (
                diagnose(
                    result,
                    {
                        "reshape without transpose: Y.reshape(B, N, h*d) scrambles tokens (an "
                        "output row holds several tokens of one head, not one token of every "
                        "head); transpose to (B, N, h, d) "
                        "first, then reshape": Z.reshape(B, N, h * d),
                        "the heads' features are interleaved (feature j of every head, then "
                        "feature j+1, ...); head i must fill the block of columns i*d:(i+1)*d, "
                        "so transpose(0, 2, 1, 3), not (0, 2, 3, 1)": Z.transpose(
                            0, 2, 3, 1
                        ).reshape(B, N, h * d),
                    },
                )
                or "wrong values: out[b, n, i*d:(i+1)*d] must be Y[b, i, n] (head i of token n)"
            )
        if problem is not None:
            break
    return report(name, problem)


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


def _mha_variant(
    X, W_q, W_k, W_v, W_o, h, split="blocks", scale=None, axis=-1, transpose_scores=False
):
    """Multi-head attention with one switch flipped; returns (heads (h, N, d_v), output (N, C))."""
    q, k, v = (_heads(X @ W, h, split) for W in (W_q, W_k, W_v))  # (h, N, d)
    d_k = q.shape[-1]
    scores = q @ k.transpose(0, 2, 1) / (math.sqrt(d_k) if scale is None else scale)  # (h, N, N)
    if transpose_scores:
        scores = scores.transpose(0, 2, 1)
    heads = softmax(scores, axis=axis) @ v  # (h, N, d_v)
    N = X.shape[0]
    concat = heads.transpose(1, 0, 2).reshape(N, -1)  # (N, h*d_v)
    return heads, concat @ W_o  # (h, N, d_v), (N, C)


def _mha_mistakes(X, W_q, W_k, W_v, W_o, h) -> dict[str, np.ndarray]:
    """Outputs of the usual wrong multi-head attentions, keyed by what is wrong."""
    N = X.shape[0]
    d_k = W_q.shape[1] // h
    args = (X, W_q, W_k, W_v, W_o, h)
    heads, out = _mha_variant(*args)  # (h, N, d_v), (N, C): the right answer
    q, k, v = (_heads(X @ W, h, "blocks") for W in (W_q, W_k, W_v))  # (h, N, d)
    A_mean = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d_k)).mean(axis=0)  # (N, N)
    one_pattern = (A_mean @ v).transpose(1, 0, 2).reshape(N, -1) @ W_o  # (N, C)
    merged_badly = heads.reshape(N, -1) @ W_o  # (N, C)
    return {
        "it divides the scores by √(h·d_k), the width of W_q; each head divides its own "
        "scores by √d_k with d_k = W_q.shape[1] // num_heads": _mha_variant(
            *args, scale=math.sqrt(h * d_k)
        )[1],
        "it does not divide the scores by √d_k": _mha_variant(*args, scale=1.0)[1],
        "it splits the heads with a reshape without transpose ((N, h*d) -> (h, N, d) "
        "directly), which scrambles tokens; reshape to (N, h, d), then transpose": _mha_variant(
            *args, split="no transpose"
        )[1],
        "it takes each head's columns interleaved (i, i+h, ...); head i owns the block of "
        "columns i*d_k:(i+1)*d_k": _mha_variant(*args, split="interleaved")[1],
        "it averages the heads (the result is 1/h of the expected one); concatenate the "
        "heads and multiply by W_o, which sums their contributions": out / h,
        "it averages the attention weights over the heads, so every head uses one shared "
        "pattern; each head must apply its own weights to its own values": one_pattern,
        "it merges the heads with a reshape without transpose ((h, N, d_v) -> (N, h*d_v) "
        "directly), which scrambles tokens; transpose to (N, h, d_v) first": merged_badly,
        "its scores are transposed (K Qᵀ instead of Q Kᵀ, or W_q and W_k swapped)": _mha_variant(
            *args, transpose_scores=True
        )[1],
        "softmax over the wrong axis: each query's row of weights must sum to 1 "
        "(axis=-1)": _mha_variant(*args, axis=-2)[1],
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


# (seed, N, C, h, d_k, d_v): the first has h*d_v != C so a missing W_o shows in the shape,
# the second another number of heads so a hard-coded h fails.
_MHA_CASES = ((3, 5, 6, 2, 3, 2), (4, 4, 6, 3, 2, 2))


def check_multi_head_attention(fn) -> bool:
    """Check a learner's multi_head_attention(X, W_q, W_k, W_v, W_o, num_heads), X (N, C)."""
    name = "multi_head_attention"
    problem = None
    for case, (seed, N, C, h, d_k, d_v) in enumerate(_MHA_CASES):
        X, W_q, W_k, W_v, W_o = _mha_case(seed, N, C, h, d_k, d_v)
        expected = multi_head_attention(X, W_q, W_k, W_v, W_o, h)  # (N, C)
        args = [a.copy() for a in (X, W_q, W_k, W_v, W_o)]
        result, problem = run(fn, *args, h)
        if problem is None:
            shape = np.shape(result)
            if shape == (N, h * d_v) and shape != (N, C):
                problem = (
                    f"it returns shape (N, h*d_v) = {shape}, the concatenated heads: W_o is "
                    f"missing; multiply by W_o {W_o.shape} to get back to (N, C) = {(N, C)}"
                )
            elif shape == (h, N, d_v):
                problem = (
                    f"it returns one output per head, shape (h, N, d_v) = {shape}: "
                    "concatenate the heads along the features and multiply by W_o"
                )
            elif shape == (N, d_v):
                problem = (
                    f"it returns shape (N, d_v) = {shape}: the heads are summed or averaged; "
                    "concatenate them to (N, h*d_v) and multiply by W_o"
                )
        if problem is None:
            result, problem = as_array(result, expected.shape)
        if problem is None and not close(result, expected):
            problem = diagnose(result, _mha_mistakes(X, W_q, W_k, W_v, W_o, h)) or (
                "wrong values: expected Concat(head_1, ..., head_h) W_o with "
                "head_i = softmax(X W_Q^i (X W_K^i)ᵀ / √d_k) X W_V^i"
            )
            if case > 0 and problem.startswith("wrong values"):
                problem = (
                    f"correct for {_MHA_CASES[0][3]} heads but wrong for {h}: do not hard-code "
                    "the number of heads; use num_heads and d_k = W_q.shape[1] // num_heads"
                )
        if problem is not None:
            break
    return report(name, problem)
