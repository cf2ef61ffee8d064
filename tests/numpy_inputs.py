"""Random weights and the plain formula, shared by the numpy core's tests (not a test)."""

import numpy as np


def weights(rng, C, h, d_k, d_v, dtype=np.float64):
    """Random W_q, W_k (C, h*d_k), W_v (C, h*d_v), W_o (h*d_v, C)."""
    return (
        rng.standard_normal((C, h * d_k)).astype(dtype),
        rng.standard_normal((C, h * d_k)).astype(dtype),
        rng.standard_normal((C, h * d_v)).astype(dtype),
        rng.standard_normal((h * d_v, C)).astype(dtype),
    )


def naive_attention(q, k, v):
    """The formula, written out with no tricks: softmax(q kᵀ / √d_k) v."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v
