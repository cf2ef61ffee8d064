"""The indexer's precision: a Hadamard rotation that changes no score, FP8 that changes a few.

Derived in notebook 18 (section 2). DeepSeek's indexer kernel multiplies the index queries and
keys by a Hadamard matrix, then scores them in FP8 (float8 e4m3: 4 exponent bits, 3 mantissa
bits, largest number 448). transformers' `DeepseekV32Indexer` does neither, in bf16: the
rotation because it is orthogonal, FP8 because it is a precision choice. This module holds what
notebook 18 needs to check both: `hadamard(D)`, Sylvester's construction scaled to be
orthogonal; `e4m3(x)`, x rounded through float8 e4m3 with one scale per row (its largest |x|
goes to 448); `topk_changes(reference, other, k)`, how many queries' top-k sets differ.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_int

__all__ = ["E4M3_MAX", "e4m3", "hadamard", "topk_changes"]

E4M3_MAX = 448.0  # the largest finite float8 e4m3 number


def hadamard(D: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """The D × D Hadamard matrix of Sylvester's construction over √D (D a power of 2): entries
    ±1/√D, orthogonal (H Hᵀ = I), so (q H)·(k H) = q·k for every q and k."""
    check_int(D, "D", 1)
    if D & (D - 1):
        raise ValueError(f"D = {D}; Sylvester's construction needs a power of 2")
    H = torch.ones(1, 1, dtype=dtype)
    while H.shape[0] < D:
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)  # doubles the size
    return H / D**0.5  # (D, D)


def e4m3(x: Tensor) -> Tensor:
    """x (..., D) rounded through float8 e4m3 and back, each row scaled so that its largest
    |x| becomes 448 first (a row of zeros stays zero); returned in x's dtype. The scale is a
    power of two, so that undoing it adds no rounding of its own."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 1:
        got = f"a {x.dtype} tensor" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x is {got}; expected a float tensor (..., D)")
    if not torch.isfinite(x).all():
        raise ValueError("x holds inf or NaN; FP8 scaling needs finite numbers")
    top = x.abs().amax(-1, keepdim=True).to(torch.float64)  # (..., 1)
    # the largest power of two s with top · s <= 448 (1 for a row of zeros)
    exponent = torch.floor(torch.log2(E4M3_MAX / top.clamp_min(torch.finfo(torch.float64).tiny)))
    s = torch.where(top > 0, torch.exp2(exponent), torch.ones_like(top))  # (..., 1)
    rounded = (x.to(torch.float64) * s).to(torch.float8_e4m3fn).to(torch.float64) / s
    return rounded.to(x.dtype)


def topk_changes(reference: Tensor, other: Tensor, k: int) -> dict:
    """Compare the keys two score tensors (..., n, m) choose per query (top k; -inf: a key the
    query may not see), judged by `reference`, over the queries that see more than k keys (the
    others take all they see in both). A key `other` chooses is a *swap* when its reference
    score is below the query's k-th best reference score (ties at the k-th score are no swap:
    either choice is a top-k set). Returns {"queries": how many were compared, "changed": how
    many chose at least one swap, "overlap": the mean share of the k choices that are no swap,
    "worst rank": the largest number of keys that beat (under `reference`) a key `other`
    chose, k - 1 or less when nothing changed}."""
    if not isinstance(reference, Tensor) or not isinstance(other, Tensor):
        raise ValueError("reference and other must be tensors of scores (..., n, m)")
    if reference.shape != other.shape or reference.dim() < 2:
        raise ValueError(
            f"reference has shape {tuple(reference.shape)} and other {tuple(other.shape)}; "
            "expected the same shape (..., n, m)"
        )
    check_int(k, "k", 1)
    visible = torch.isfinite(reference)  # (..., n, m)
    if not torch.equal(visible, torch.isfinite(other)):
        raise ValueError("reference and other must mask (-inf) the same keys")
    rows = visible.sum(-1) > k  # (..., n): queries with a choice to make
    ref, oth = reference[rows], other[rows]  # (q, m)
    kth = ref.topk(k, -1).values[:, -1:]  # (q, 1): each query's k-th best reference score
    picked = ref.gather(-1, oth.topk(k, -1).indices)  # (q, k): reference scores of other's picks
    swaps = (picked < kth).sum(-1)  # (q,)
    ascending = ref.sort(-1).values  # (q, m)
    beaten_by = ref.shape[-1] - torch.searchsorted(ascending, picked, right=True)  # (q, k)
    return {
        "queries": int(rows.sum()),
        "changed": int((swaps > 0).sum()),
        "overlap": float(1 - swaps.double().mean() / k) if len(swaps) else 1.0,
        "worst rank": int(beaten_by.max()) if len(swaps) else 0,
    }
