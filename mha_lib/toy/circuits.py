"""What a head does, measured: head scores and the QK / OV circuits (notebook 06).

Head scores read attention weights A (..., h, N, N) (rows = queries, columns = keys):
- `previous_token_score`: the mean weight on key i - 1 from query i (i >= 1), per head;
- `induction_score`: on a block of T tokens repeated once, the mean weight from query i of
  the second copy (T <= i < 2T) on key i - T + 1, the token *after* the previous occurrence of
  the current token, per head;
- `duplicate_token_score`: on the same repeated block, the mean weight from query i of the
  second copy on key i - T, the earlier occurrence of the current token itself, per head;
- `relation_scores`: for given key positions per relation, the mean weight each head puts
  where each relation points (heads × relations).

Circuits read the weights of one head of a `MultiHeadAttention` without biases, in the
row-vector convention of the series (x W, x a row of the residual stream, C = embed_dim):
- `head_weights`: W_Q^h, W_K^h, W_V^h (C, d) and W_O^h (d, C);
- `qk_circuit`: W_QK^h = W_Q^h W_K^hᵀ (C, C); query row x_i and key row x_j score x_i W_QK x_jᵀ;
- `ov_circuit`: W_OV^h = W_V^h W_O^h (C, C); a key row x_j writes x_j W_OV into the stream;
- `composition_score`: ‖A Bᵀ‖_F / (‖A‖_F ‖B‖_F) for two (C, C) matrices;
- `k_composition`, `q_composition`, `v_composition`: how much of what an earlier head writes
  (x W_OV^0) a later head reads through its keys, its queries or its values (Elhage et al.
  2021), in this row convention:
  K: x_i W_QK^1 (x W_OV^0)ᵀ, the matrix W_QK^1 W_OV^0ᵀ;
  Q: (x W_OV^0) W_QK^1 x_jᵀ, the matrix W_OV^0 W_QK^1;
  V: (x W_OV^0) W_OV^1, the matrix W_OV^0 W_OV^1;
  each scored ‖M‖_F / (‖W^1‖_F ‖W_OV^0‖_F);
- `random_composition`: the same score for random pairs of rank-d matrices, the null level.
Both circuits have rank at most d = C / h.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..pytorch import MultiHeadAttention

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


def _per_head(stripe: Tensor) -> Tensor:
    """Average a stripe (..., h, n) of weights over n and over any batch axes: (h,)."""
    score = stripe.mean(dim=-1)  # (..., h), or a scalar for one matrix
    return score.reshape(-1, score.shape[-1]).mean(dim=0) if score.dim() > 1 else score


def previous_token_score(A) -> Tensor:
    """Mean of A[..., i, i - 1] over i >= 1 (and over any batch axes): one number per head.

    A (h, N, N) or (B, h, N, N) -> (h,); A (N, N) -> a scalar.
    """
    A = _check_weights(A)
    return _per_head(torch.diagonal(A, offset=-1, dim1=-2, dim2=-1))  # A[i, i - 1], i >= 1


def _second_copy_stripe(A, T, offset: int) -> Tensor:
    """A[..., i, i - T + offset] for the queries of the second copy, T <= i < 2T: (..., T)."""
    A = _check_weights(A)
    N = A.shape[-1]
    if isinstance(T, bool) or not isinstance(T, int) or T < 2 or 2 * T > N:
        raise ValueError(f"T = {T!r}; expected an int with 2 <= T and 2T <= N = {N}")
    stripe = torch.diagonal(A, offset=offset - T, dim1=-2, dim2=-1)  # from query T - offset on
    return stripe[..., offset : T + offset]  # queries i = T .. 2T-1


def induction_score(A, T: int) -> Tensor:
    """Mean of A[..., i, i - T + 1] over T <= i < 2T: one number per head.

    A (h, N, N) or (B, h, N, N) with N >= 2T, computed on a block of T tokens followed by the
    same block (every sequence with the same T) -> (h,); A (N, N) -> a scalar.
    """
    return _per_head(_second_copy_stripe(A, T, 1))


def duplicate_token_score(A, T: int) -> Tensor:
    """Mean of A[..., i, i - T] over T <= i < 2T: the weight on the earlier occurrence of the
    current token itself. Shapes as `induction_score`."""
    return _per_head(_second_copy_stripe(A, T, 0))


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


def head_weights(attention: MultiHeadAttention, head: int) -> tuple[Tensor, ...]:
    """W_Q^h, W_K^h, W_V^h (C, d) and W_O^h (d, C) of one head, as x W matrices."""
    if not isinstance(attention, MultiHeadAttention) or attention.in_proj_weight is None:
        raise TypeError("attention must be a MultiHeadAttention with a packed in_proj_weight")
    h, d, C = attention.num_heads, attention.head_dim, attention.embed_dim
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < h:
        raise ValueError(f"head = {head!r}; expected an int in [0, {h})")
    W = attention.in_proj_weight.detach()  # (3C, C) = [W_q; W_k; W_v] stored (out, in)
    cols = slice(head * d, (head + 1) * d)
    W_q, W_k, W_v = (W[i * C : (i + 1) * C].T for i in range(3))  # (C, C) each, as x W
    W_o = attention.out_proj.weight.detach().T  # (C, C): rows h*d:(h+1)*d face head h
    return W_q[:, cols], W_k[:, cols], W_v[:, cols], W_o[cols, :]


def qk_circuit(attention: MultiHeadAttention, head: int) -> Tensor:
    """W_QK^h = W_Q^h W_K^hᵀ (C, C), rank <= d: the score of query x_i and key x_j is
    x_i W_QK x_jᵀ / √d."""
    W_q, W_k, _, _ = head_weights(attention, head)
    return W_q @ W_k.T  # (C, C)


def ov_circuit(attention: MultiHeadAttention, head: int) -> Tensor:
    """W_OV^h = W_V^h W_O^h (C, C), rank <= d: what attending to x_j adds to the stream."""
    _, _, W_v, W_o = head_weights(attention, head)
    return W_v @ W_o  # (C, C)


def composition_score(A: Tensor, B: Tensor) -> float:
    """‖A Bᵀ‖_F / (‖A‖_F ‖B‖_F) for two (C, C) matrices, between 0 and 1.

    K-composition of a later head's W_QK with an earlier head's W_OV: how much of what the
    earlier head writes, x W_OV, the later head's keys can read (x_i W_QK (x W_OV)ᵀ).
    """
    A, B = torch.as_tensor(A), torch.as_tensor(B)
    if A.dim() != 2 or A.shape != B.shape:
        raise ValueError(
            f"A has shape {tuple(A.shape)} and B {tuple(B.shape)}; expected two (C, C) matrices"
        )
    return float(torch.linalg.norm(A @ B.T) / (torch.linalg.norm(A) * torch.linalg.norm(B)))


def k_composition(W_QK: Tensor, W_OV: Tensor) -> float:
    """K-composition of a later head (W_QK (C, C)) with an earlier head (W_OV (C, C)):
    ‖W_QK W_OVᵀ‖_F / (‖W_QK‖_F ‖W_OV‖_F). Its keys read what the earlier head wrote."""
    return composition_score(W_QK, W_OV)


def q_composition(W_QK: Tensor, W_OV: Tensor) -> float:
    """Q-composition of a later head (W_QK (C, C)) with an earlier head (W_OV (C, C)):
    ‖W_OV W_QK‖_F / (‖W_QK‖_F ‖W_OV‖_F). Its queries read what the earlier head wrote."""
    return composition_score(torch.as_tensor(W_QK).T, W_OV)  # ‖W_QKᵀ W_OVᵀ‖ = ‖W_OV W_QK‖


def v_composition(W_OV_later: Tensor, W_OV: Tensor) -> float:
    """V-composition of a later head (W_OV_later (C, C)) with an earlier head (W_OV (C, C)):
    ‖W_OV W_OV_later‖_F / (‖W_OV_later‖_F ‖W_OV‖_F). Its values read what the earlier wrote."""
    return composition_score(torch.as_tensor(W_OV_later).T, W_OV)


def random_composition(C: int, d: int, count: int = 100, seed: int = 0) -> Tensor:
    """K-composition scores of `count` pairs of random rank-d (C, C) matrices: the null level.

    Each matrix is (C, d) @ (d, C) with standard normal entries, drawn on the CPU from a seeded
    generator. Q- and K-composition of random pairs have the same distribution (a transpose).
    """
    gen = torch.Generator().manual_seed(seed)

    def rank_d() -> Tensor:
        return torch.randn(C, d, generator=gen) @ torch.randn(d, C, generator=gen)  # (C, C)

    return torch.tensor([composition_score(rank_d(), rank_d()) for _ in range(count)])
