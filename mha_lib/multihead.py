"""Multi-head attention in numpy: the per-head loop and the vectorised version.

Derived in notebook 03. Notation (the same in every notebook):
- X (N, C) or (B, N, C): N tokens with C features each, the queries' side;
- X_kv (M, C_kv) or (B, M, C_kv): the keys' and values' side in
  cross-attention (omitted in self-attention, where it is X);
- W_q (C, h*d_k), W_k (C_kv, h*d_k), W_v (C_kv, h*d_v): the h per-head
  projections W_Q^h, W_K^h, W_V^h side by side, head i owning columns
  i*d_k:(i+1)*d_k;
- W_o (h*d_v, C): the output projection applied to the concatenated heads.

Read it top to bottom: `multi_head_attention_loop` is the textbook algorithm
(split the weights, one head at a time, concatenate, multiply by W_o);
`multi_head_attention` computes the same thing for all heads at once and works
through blocks of query rows with one reused scratch buffer, so its memory stays
flat as N grows (see notebook 03). Then the helpers they share (`split_heads`,
`merge_heads`, the blocked softmax), and last the checks of the inputs.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import as_float_array, check_mask, check_ndim, check_num_heads
from .attention import scaled_dot_product_attention


def multi_head_attention_loop(
    X, W_q, W_k, W_v, W_o, num_heads, mask=None, return_weights=False, X_kv=None
):
    """Multi-head attention, one head at a time (the textbook version).

    Same arguments and result as `multi_head_attention`: split each weight
    matrix into h column blocks, run scaled dot-product attention per head,
    concatenate the h outputs along features and multiply by W_o.
    """
    X, X_kv, W_q, W_k, W_v, W_o, mask, batched = _check_inputs(
        X, W_q, W_k, W_v, W_o, num_heads, mask, X_kv
    )
    heads, weights = [], []
    for W_qh, W_kh, W_vh, i in zip(
        np.split(W_q, num_heads, axis=-1),  # each (C, d_k)
        np.split(W_k, num_heads, axis=-1),  # each (C_kv, d_k)
        np.split(W_v, num_heads, axis=-1),  # each (C_kv, d_v)
        range(num_heads),
    ):
        mask_h = None
        if mask is not None:
            full = np.broadcast_to(mask, (X.shape[0], num_heads, X.shape[1], X_kv.shape[1]))
            mask_h = full[:, i]  # (B, N, M)
        out_h, w_h = scaled_dot_product_attention(X @ W_qh, X_kv @ W_kh, X_kv @ W_vh, mask_h)
        heads.append(out_h)  # (B, N, d_v)
        if return_weights:
            weights.append(w_h)  # (B, N, M); dropped at once otherwise
    out = np.concatenate(heads, axis=-1) @ W_o  # (B, N, h*d_v) @ (h*d_v, C) -> (B, N, C)
    if not return_weights:
        return out if batched else out[0]
    w = np.stack(weights, axis=1)  # (B, h, N, M)
    return (out, w) if batched else (out[0], w[0])


def multi_head_attention(
    X, W_q, W_k, W_v, W_o, num_heads, mask=None, return_weights=False, X_kv=None
):
    """Multi-head attention, all heads at once: self-attention, or cross-attention with X_kv.

    X (N, C) or (B, N, C) gives the queries. X_kv (M, C_kv) or (B, M, C_kv)
    gives the keys and values (cross-attention); None means X itself
    (self-attention, M = N, C_kv = C).
    W_q (C, h*d_k); W_k (C_kv, h*d_k); W_v (C_kv, h*d_v); W_o (h*d_v, C).
    mask: boolean, True = may attend, broadcastable to (B, h, N, M) (or
    (h, N, M) for unbatched X); a row with nothing to attend to outputs zeros.
    Returns the output, shaped like X, and with return_weights=True also the
    per-head weights (..., h, N, M).
    """
    X, X_kv, W_q, W_k, W_v, W_o, mask, batched = _check_inputs(
        X, W_q, W_k, W_v, W_o, num_heads, mask, X_kv
    )
    B, N, _ = X.shape
    M = X_kv.shape[1]
    q = split_heads(X @ W_q, num_heads)  # (B, h, N, d_k)
    k = split_heads(X_kv @ W_k, num_heads)  # (B, h, M, d_k)
    v = split_heads(X_kv @ W_v, num_heads)  # (B, h, M, d_v)
    weights = np.empty((B, num_heads, N, M), dtype=X.dtype) if return_weights else None
    heads = _attend_blocked(q, k, v, mask, weights_out=weights)  # (B, h, N, d_v)
    out = merge_heads(heads) @ W_o  # (B, N, C)
    if not batched:
        out = out[0]
        weights = None if weights is None else weights[0]
    return (out, weights) if return_weights else out


# ---------------------------------------------------------------- the heads, split and merged


def split_heads(Y: np.ndarray, num_heads: int) -> np.ndarray:
    """(B, N, h*d) -> (B, h, N, d), a view: head i takes columns i*d:(i+1)*d.

    The transpose matters: reshaping (B, N, h*d) straight to (B, h, N, d)
    would mix tokens from different positions into one head (notebook 03).
    """
    B, N, hd = Y.shape
    Y = Y.reshape(B, N, num_heads, hd // num_heads)  # (B, N, h, d)
    return Y.transpose(0, 2, 1, 3)  # (B, h, N, d); rows of one head are h*d apart


def merge_heads(Y: np.ndarray) -> np.ndarray:
    """(B, h, N, d) -> (B, N, h*d): the concatenation of the heads along features."""
    B, h, N, d = Y.shape
    return Y.transpose(0, 2, 1, 3).reshape(B, N, h * d)  # (B, N, h*d)


# ------------------------------------------------ all heads at once, one block of rows at a time

# Budget for the (B, h, rows, M) score block of the vectorised version.
SCRATCH_BYTES = 16 * 2**20


def _attend_blocked(q, k, v, mask, weights_out=None):
    """softmax(q kᵀ/√d_k) v for all heads at once, one block of query rows at a time.

    q (B, h, N, d_k), k (B, h, M, d_k), v (B, h, M, d_v); mask broadcasts to
    (B, h, N, M) or is None. The scores of a block live in one scratch buffer
    that is reused for every block (or in `weights_out` (B, h, N, M), which
    then receives the attention weights). Returns (B, h, N, d_v).
    """
    B, h, N, d_k = q.shape
    M = k.shape[2]
    kT = np.swapaxes(k, -1, -2)  # (B, h, d_k, M), a view: BLAS reads it transposed
    q = q * q.dtype.type(1.0 / math.sqrt(d_k))  # scaled once, and now contiguous
    out = np.empty(q.shape[:3] + (v.shape[-1],), dtype=q.dtype)  # (B, h, N, d_v)
    if weights_out is None:
        rows = max(1, min(N, SCRATCH_BYTES // (B * h * M * q.itemsize)))
        scratch = np.empty((B, h, rows, M), dtype=q.dtype)
    else:
        rows = N
    for start in range(0, N, rows):
        stop = min(N, start + rows)
        if weights_out is None:
            s = scratch[:, :, : stop - start]  # (B, h, r, M)
        else:
            s = weights_out[:, :, start:stop]  # (B, h, r, M)
        np.matmul(q[:, :, start:stop], kT, out=s)  # raw scores
        if mask is not None:
            m = np.broadcast_to(mask, (B, h, N, M))[:, :, start:stop]
            np.copyto(s, -np.inf, where=~m)
        _softmax_inplace(s, masked=mask is not None)
        np.matmul(s, v, out=out[:, :, start:stop])  # (B, h, r, d_v)
    return out


def _softmax_inplace(s: np.ndarray, masked: bool = True) -> None:
    """Row softmax of `s` over its last axis, written into `s`.

    With masked=True, rows that are entirely -inf (nothing to attend to) become 0.
    """
    m = s.max(axis=-1, keepdims=True)  # (..., 1)
    if masked:
        m[~np.isfinite(m)] = 0
    np.subtract(s, m, out=s)
    np.exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)  # (..., 1)
    if masked:
        total[total == 0] = 1
    np.multiply(s, 1 / total, out=s)  # one division per row, not per entry


# ---------------------------------------------------------------------- checks of the inputs


def _check_inputs(X, W_q, W_k, W_v, W_o, num_heads, mask, X_kv=None):
    """Validate and convert the arguments shared by both implementations.

    X_kv is the sequence the keys and values come from (None: X itself).
    Returns (X, X_kv, W_q, W_k, W_v, W_o, mask, batched) with X (B, N, C)
    and X_kv (B, M, C_kv) always batched.
    """
    X = as_float_array(X, "X")
    check_ndim(X, "X", (2, 3), "(N, C) or (B, N, C)")
    batched = X.ndim == 3
    cross = X_kv is not None
    if cross:
        X_kv = as_float_array(X_kv, "X_kv")
        if batched and (X_kv.ndim != 3 or X_kv.shape[0] != X.shape[0]):
            raise ValueError(
                f"X_kv has shape {X_kv.shape}; expected (B, M, C_kv) with B = {X.shape[0]} "
                f"from X of shape {X.shape}"
            )
        if not batched and X_kv.ndim != 2:
            raise ValueError(
                f"X_kv has shape {X_kv.shape}; expected (M, C_kv), unbatched like X of "
                f"shape {X.shape}"
            )
    else:
        X_kv = X
    if cross:
        _blame_a_transposed_input(X, "X", {"W_q": W_q}, W_o)
        _blame_a_transposed_input(X_kv, "X_kv", {"W_k": W_k, "W_v": W_v}, W_o)
    else:
        _blame_a_transposed_input(X, "X", {"W_q": W_q, "W_k": W_k, "W_v": W_v}, W_o)
    C, C_kv = X.shape[-1], X_kv.shape[-1]
    Ws = []
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        W = as_float_array(W, name)
        what = "d_v" if name == "W_v" else "d_k"
        rows, src = ("C", "X") if name == "W_q" or not cross else ("C_kv", "X_kv")
        width = C if rows == "C" else C_kv
        if W.ndim != 2 or W.shape[0] != width:
            raise ValueError(
                f"{name} has shape {W.shape}; expected ({rows}, h*{what}) with "
                f"{rows} = {width} from {src}"
            )
        check_num_heads(num_heads, W.shape[1], name, what)
        Ws.append(W)
    W_q, W_k, W_v = Ws
    if W_k.shape[1] != W_q.shape[1]:
        expected = (C_kv, W_q.shape[1])
        why = (
            "the shape of W_q"
            if not cross
            else f"(C_kv, h*d_k) with h*d_k = {W_q.shape[1]} from W_q"
        )
        raise ValueError(
            f"W_k has shape {W_k.shape}; expected {expected}, {why} (queries and keys share d_k)"
        )
    W_o = as_float_array(W_o, "W_o")
    if W_o.ndim != 2 or W_o.shape[0] != W_v.shape[1]:
        raise ValueError(
            f"W_o has shape {W_o.shape}; expected (h*d_v, C) with h*d_v = {W_v.shape[1]} from W_v"
        )
    dtype = np.result_type(X, X_kv, W_q, W_k, W_v, W_o)
    X, X_kv, W_q, W_k, W_v, W_o = (
        a.astype(dtype, copy=False) for a in (X, X_kv, W_q, W_k, W_v, W_o)
    )
    if not batched:
        X, X_kv = X[None], X_kv[None]  # (1, N, C), (1, M, C_kv)
    B, N, _ = X.shape
    M = X_kv.shape[1]
    if mask is not None:
        target = (B, num_heads, N, M) if batched else (num_heads, N, M)
        expected = "(B, h, N, M)" if batched else "(h, N, M)"
        mask = check_mask(mask, target, expected)
    return X, X_kv, W_q, W_k, W_v, W_o, mask, batched


def _blame_a_transposed_input(X: np.ndarray, name: str, readers: dict, W_o) -> None:
    """Raise if X (..., N, C) looks transposed: every weight that reads it (`readers`, name ->
    matrix) has X.shape[-2] rows and, for the queries' X, W_o has X.shape[-2] columns, while
    X.shape[-1] is another number. Then X is the odd one out, not the weights."""

    def size(W, axis: int) -> int | None:  # W.shape[axis] of a matrix; None for anything else
        try:
            shape = np.shape(W)
        except Exception:  # ragged lists: as_float_array reports them below
            return None
        return shape[axis] if len(shape) == 2 else None

    n, c = X.shape[-2:]
    widths = [size(W, 0) for W in readers.values()] + ([size(W_o, 1)] if name == "X" else [])
    if n != c and all(w == n for w in widths):
        names = list(readers) + (["W_o"] if name == "X" else [])
        others = ", ".join(names[:-1]) + " and " + names[-1]
        what = "(N, C)" if name == "X" else "(M, C_kv)"
        what = what if X.ndim == 2 else f"(B, {what[1:]}"
        fix = f"{name}.T" if X.ndim == 2 else f"{name}.transpose(0, 2, 1)"
        raise ValueError(
            f"{name} has shape {X.shape}; expected {what}, one token per row: {others} are "
            f"for {n} features, and {name} has {n} rows, so {name} looks transposed (its "
            f"tokens are columns): pass {fix}"
        )
