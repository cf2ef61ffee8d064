"""Single-head attention in numpy: softmax, scaled dot-product attention,
unweighted self-attention and the mask helpers.

Derived in notebook 01 (self-attention without weights); notebook 02 feeds it
projected queries, keys and values.

Conventions used across the series:
- shapes: queries (..., N, d_k), keys (..., M, d_k), values (..., M, d_v);
- masks are boolean and True means "may attend" (as in
  `torch.nn.functional.scaled_dot_product_attention`);
- a query row whose mask blocks every key attends to nothing: its weights are
  all zero and its output is the zero vector (never NaN).
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import as_float_array, check_int, check_mask, check_min_ndim


def scaled_dot_product_attention(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q kᵀ / √d_k) v, with an optional boolean mask (True = may attend).

    q: (..., N, d_k), k: (..., M, d_k), v: (..., M, d_v); the leading axes of
    the three must be equal. mask broadcasts to (..., N, M).
    Returns (output (..., N, d_v), weights (..., N, M)).
    """
    q = as_float_array(q, "q")
    k = as_float_array(k, "k")
    v = as_float_array(v, "v")
    check_min_ndim(q, "q", 2, "(..., N, d_k)")
    check_min_ndim(k, "k", 2, "(..., M, d_k)")
    check_min_ndim(v, "v", 2, "(..., M, d_v)")
    if k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k has shape {k.shape}; expected (..., M, d_k) = {q.shape[:-2] + ('M', q.shape[-1])} "
            f"to match q of shape {q.shape}"
        )
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(
            f"v has shape {v.shape}; expected (..., M, d_v) = {k.shape[:-1] + ('d_v',)} "
            f"to match k of shape {k.shape}"
        )
    dtype = np.result_type(q, k, v)
    q, k, v = q.astype(dtype, copy=False), k.astype(dtype, copy=False), v.astype(dtype, copy=False)
    N, M = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = check_mask(mask, q.shape[:-2] + (N, M), "(..., N, M)")

    scale = 1.0 / math.sqrt(q.shape[-1])  # a Python float keeps float32 as float32
    scores = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., N, M)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)  # (..., N, M), rows sum to 1 (or 0 if fully masked)
    return weights @ v, weights  # (..., N, d_v), (..., N, M)


def softmax(x, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along `axis`.

    Subtracting the row maximum before `exp` keeps every exponent <= 0, so
    logits of 1e4 do not overflow, even in float32. A slice that is entirely
    -inf (fully masked) gives zeros rather than NaN. The dtype is preserved.
    """
    x = as_float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x has shape (); expected at least one axis to normalise over")
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype, copy=False)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return e / np.where(s == 0, 1, s).astype(x.dtype, copy=False)


def self_attention(X) -> tuple[np.ndarray, np.ndarray]:
    """Unweighted self-attention softmax(X Xᵀ / √C) X, i.e. Q = K = V = X.

    X: (..., N, C). Returns (output (..., N, C), weights (..., N, N)).
    """
    X = as_float_array(X, "X")
    check_min_ndim(X, "X", 2, "(N, C) or (..., N, C)")
    return scaled_dot_product_attention(X, X, X)


def causal_mask(N: int) -> np.ndarray:
    """(N, N) boolean mask, True on and below the diagonal: token i sees tokens 0..i."""
    N = check_int(N, "N", numpy=True)
    return np.tril(np.ones((N, N), dtype=bool))


def padding_mask(lengths, M: int) -> np.ndarray:
    """(B, 1, 1, M) boolean key mask: True for the first lengths[b] keys of sequence b.

    The two singleton axes let it broadcast over heads and query rows, i.e. to
    (B, h, N, M) in `multi_head_attention`.
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(
            f"lengths must be a 1-D array of ints (one per sequence); got shape "
            f"{lengths.shape} and dtype {lengths.dtype}"
        )
    if np.any(lengths < 0) or np.any(lengths > M):
        raise ValueError(f"lengths must lie in [0, M] with M = {M}; got {lengths.tolist()}")
    keep = np.arange(M)[None, :] < lengths[:, None]  # (B, M)
    return keep[:, None, None, :]  # (B, 1, 1, M)
