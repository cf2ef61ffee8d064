"""What a head does, measured: head scores and the QK / OV circuits (notebook 06).

Head scores read attention weights A (..., h, N, N) (rows = queries, columns = keys), each a
stripe of them (`mha_lib.nn.circuits.stripe_score`) averaged per head:
- `previous_token_score`: the mean weight on key i - 1 from query i (i >= 1), per head
  (`mha_lib.nn.circuits.previous_token_score`, averaged over any batch axes);
- `induction_score`: on a block of T tokens repeated once, the mean weight from query i of
  the second copy (T <= i < 2T) on key i - T + 1, the token *after* the previous occurrence of
  the current token, per head;
- `duplicate_token_score`: on the same repeated block, the mean weight from query i of the
  second copy on key i - T, the earlier occurrence of the current token itself, per head;
- `relation_scores`: for given key positions per relation, the mean weight each head puts
  where each relation points (heads × relations).

The circuits of one head (`head_weights`, `qk_circuit`, `ov_circuit`) and the composition
scores (`composition_score`, `k_composition`, `q_composition`, `v_composition`,
`random_composition`) are `mha_lib.nn.circuits`'s, for any attention of the series; notebook 06
reads them from a `MultiHeadAttention` without biases, in the row-vector convention of the
series (x W, x a row of the residual stream, C = embed_dim): W_QK^h = W_Q^h W_K^hᵀ and
W_OV^h = W_V^h W_O^h (C, C), both of rank at most d = C / h.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import check_int
from ..nn.circuits import (
    composition_score,
    head_weights,
    k_composition,
    ov_circuit,
    q_composition,
    qk_circuit,
    random_composition,
    stripe_score,
    v_composition,
)
from ..nn.circuits import previous_token_score as _previous_token_score

__all__ = [
    "composition_score",
    "duplicate_token_score",
    "head_weights",
    "induction_score",
    "k_composition",
    "ov_circuit",
    "previous_token_score",
    "q_composition",
    "qk_circuit",
    "random_composition",
    "relation_scores",
    "v_composition",
]


def _check_weights(A, name: str = "A") -> Tensor:
    A = torch.as_tensor(A)
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{name} has shape {tuple(A.shape)}; expected (..., N, N)")
    return A


def _per_head(A: Tensor, stripe) -> Tensor:
    """A stripe score of `mha_lib.nn.circuits` (stripe(weights (1, B, h, N, N), per_sequence)
    -> (B, 1, h)), averaged over the queries and then over any batch axes: (h,) for A (..., h,
    N, N), a scalar for one matrix A (N, N)."""
    h = A.shape[-3] if A.dim() > 2 else 1
    per_sequence = stripe(A.reshape(1, -1, h, *A.shape[-2:]), per_sequence=True)  # (B, 1, h)
    score = per_sequence.reshape(-1, h).mean(dim=0)  # (h,): the batch's mean
    return score if A.dim() > 2 else score[0]


def previous_token_score(A) -> Tensor:
    """Mean of A[..., i, i - 1] over i >= 1 (and over any batch axes): one number per head.

    A (h, N, N) or (B, h, N, N) -> (h,); A (N, N) -> a scalar.
    """
    return _per_head(_check_weights(A), _previous_token_score)  # A[i, i - 1], i >= 1


def _second_copy(A, T) -> Tensor:
    """A restricted to the block and its copy, (..., 2T, 2T): the queries T <= i < 2T of the
    second copy see nothing after it."""
    A = _check_weights(A)
    N = A.shape[-1]
    check_int(T, "T", 2)
    if 2 * T > N:
        raise ValueError(f"T = {T}; expected 2T <= N = {N} (the block and its copy)")
    return A[..., : 2 * T, : 2 * T]


def induction_score(A, T: int) -> Tensor:
    """Mean of A[..., i, i - T + 1] over T <= i < 2T: one number per head.

    A (h, N, N) or (B, h, N, N) with N >= 2T, computed on a block of T tokens followed by the
    same block (every sequence with the same T) -> (h,); A (N, N) -> a scalar.
    """
    return _per_head(_second_copy(A, T), lambda w, **kw: stripe_score(w, 1 - T, T, **kw))


def duplicate_token_score(A, T: int) -> Tensor:
    """Mean of A[..., i, i - T] over T <= i < 2T: the weight on the earlier occurrence of the
    current token itself. Shapes as `induction_score`."""
    return _per_head(_second_copy(A, T), lambda w, **kw: stripe_score(w, -T, T, **kw))


def relation_scores(A, where) -> Tensor:
    """Mean weight each head puts where each relation points: (h, R).

    A (B, h, N, N) attention weights; where (B, R, N) key positions, -1 where relation r
    points nowhere from query i (those queries are left out of r's mean).
    """
    A = _check_weights(A)
    where = torch.as_tensor(where)
    if A.dim() != 4 or where.dim() != 3 or where.shape[0] != A.shape[0]:
        raise ValueError(
            f"A has shape {tuple(A.shape)} and where {tuple(where.shape)}; expected "
            "(B, h, N, N) and (B, R, N) with the same B and N"
        )
    if where.shape[2] != A.shape[2]:
        raise ValueError(f"where has shape {tuple(where.shape)}; expected N = {A.shape[2]}")
    B, h, N, _ = A.shape
    index = where.clamp(min=0)[:, None, :, :, None].expand(B, h, -1, N, 1)  # (B, h, R, N, 1)
    picked = A[:, :, None].expand(B, h, where.shape[1], N, N).gather(-1, index)[..., 0]
    valid = (where >= 0)[:, None].to(A.dtype)  # (B, 1, R, N)
    total = (picked * valid).sum(dim=(0, 3))  # (h, R)
    return total / valid.sum(dim=(0, 3))  # (h, R)
