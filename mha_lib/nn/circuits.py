"""What a head does, read from its attention weights (stripe scores) and from its weights (the
QK and OV circuits, and how one head composes with another): for any attention of the series.

Derived in notebook 06 on a toy model (`mha_lib.toy.circuits` holds its head scores) and used
again in notebook 13 on SmolLM2 (`mha_lib.llm.induction` folds RMSNorm and RoPE into the
circuits). Weights A (..., N, N) have rows = queries and columns = keys.
- `stripe_score(weights, offset, start)`: (L, h), the mean weight from each query t >= start to
  key t + offset: the previous token (offset -1), an induction head on a block of P tokens
  repeated (offset 1 - P, from t = P), the earlier copy of the token itself (offset -P);
  `previous_token_score(weights, start)`, the first of them, defined once here;
- `head_weights(attention, head)`: W_Q^h, W_K^h, W_V^h (C, d) and W_O^h (d, C) of one head, in
  the row-vector convention of the series (x W, x a row of the residual stream, C = embed_dim),
  from a `mha_lib.pytorch.MultiHeadAttention` (its packed in_proj_weight) or a
  `mha_lib.nn.gqa.GroupedQueryAttention` (the key and value of the head's group);
- `qk_circuit`: W_QK^h = W_Q^h W_K^hᵀ (C, C); query row x_i and key row x_j score x_i W_QK x_jᵀ
  (a decoder layer's query scale folded in; RoPE's rotation cancels for a query and a key at
  the same position, and `mha_lib.llm.induction.qk_circuit` gives it at any distance);
- `ov_circuit`: W_OV^h = W_V^h W_O^h (C, C); a key row x_j writes x_j W_OV into the stream;
- what is not linear in x is refused by name, never folded into another matrix: biases on q, k
  and v (`attention_bias`, or a packed `in_proj_bias`), QK-norm (`qk_norm`: q and k divided by
  their own rms), the output gate (`attn_output_gate`: a sigmoid of x);
- `composition_score`: ‖A Bᵀ‖_F / (‖A‖_F ‖B‖_F) for two (C, C) matrices;
- `k_composition`, `q_composition`, `v_composition`: how much of what an earlier head writes
  (x W_OV^0) a later head reads through its keys, its queries or its values (Elhage et al.
  2021), in this row convention:
  K: x_i W_QK^1 (x W_OV^0)ᵀ, the matrix W_QK^1 W_OV^0ᵀ;
  Q: (x W_OV^0) W_QK^1 x_jᵀ, the matrix W_OV^0 W_QK^1;
  V: (x W_OV^0) W_OV^1, the matrix W_OV^0 W_OV^1;
  each scored ‖M‖_F / (‖W^1‖_F ‖W_OV^0‖_F);
- `random_composition`: the same score for random pairs of rank-d matrices, the null level.
Both circuits have rank at most d.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "composition_score",
    "head_weights",
    "k_composition",
    "ov_circuit",
    "previous_token_score",
    "q_composition",
    "qk_circuit",
    "random_composition",
    "refuse_nonlinear",
    "stripe_score",
    "v_composition",
]


def stripe_score(
    weights, offset: int, start: int, per_sequence: bool = False, valid: Tensor | None = None
) -> Tensor:
    """The mean weight from each query t >= start to key t + offset: (L, h), or (B, L, h) with
    per_sequence. weights (L, B, h, N, N) or a list of L tensors (B, h, N, N).

    An offset is the key's position minus the query's, the series' one convention for an
    offset (numpy's and torch's `diagonal`, `mha_lib.pretrained.roles.offset_score`, the
    causal `offset` of `mha_lib.nn.flash`): -1 is the token just before the query, +1 the one
    after, 0 the query itself.

    valid (B, N) bool, optional: the tokens that count (an encoder's words, without [CLS],
    [SEP] or padding); a query counts when it and its key are both valid, and the mean is over
    those pairs, pooled over the batch (or per sequence)."""
    A = torch.stack(list(weights)) if isinstance(weights, list | tuple) else weights
    N = A.shape[-1]
    if A.dim() != 5 or A.shape[-2] != N:
        raise ValueError(f"weights has shape {tuple(A.shape)}; expected (L, B, h, N, N)")
    end = N - max(offset, 0)  # the queries t < end have a key t + offset
    if not 0 <= max(-offset, 0) <= start < end:
        raise ValueError(
            f"offset = {offset}, start = {start}; expected max(-offset, 0) <= start < N - "
            f"max(offset, 0) with N = {N}: every query t >= start has its key t + offset"
        )
    stripe = torch.diagonal(A, offset=offset, dim1=-2, dim2=-1)  # (L, B, h, n): t + offset
    stripe = stripe[..., start - max(-offset, 0) :]  # the queries t = start .. end - 1
    if valid is None:
        return stripe.mean(-1).permute(1, 0, 2) if per_sequence else stripe.mean(dim=(1, 3))
    if tuple(valid.shape) != (A.shape[1], N):
        raise ValueError(
            f"valid has shape {tuple(valid.shape)}; expected (B, N) = ({A.shape[1]}, {N})"
        )
    t = torch.arange(start, end, device=A.device)  # the queries
    pairs = (valid[:, t] & valid[:, t + offset]).to(A.dtype)[None, :, None]  # (1, B, 1, n)
    total = stripe * pairs  # (L, B, h, n)
    if per_sequence:
        return (total.sum(-1) / pairs.sum(-1)).permute(1, 0, 2)  # (B, L, h)
    return total.sum(dim=(1, 3)) / pairs.sum(dim=(1, 3))  # (L, h)


def previous_token_score(
    weights, start: int = 1, per_sequence: bool = False, valid: Tensor | None = None
) -> Tensor:
    """The previous-token score: `stripe_score` on the key just before each query, the mean
    weight from each query t >= start to key t - 1 (offset -1); (L, h), or (B, L, h) with
    per_sequence.
    The one definition behind notebook 05's (an encoder's words, `valid`), notebook 06's toy
    and notebook 13's model."""
    return stripe_score(weights, -1, max(start, 1), per_sequence, valid)


def head_weights(attention, head: int) -> tuple[Tensor, ...]:
    """W_Q^h, W_K^h, W_V^h (C, d) and W_O^h (d, C) of query head `head`, as x W matrices.

    attention: a `MultiHeadAttention` with a packed in_proj_weight (kdim = vdim = E), or a
    `GroupedQueryAttention` (a decoder's layer too), whose key and value heads are shared by
    groups of query heads: W_K^h and W_V^h are those of head h's group."""
    packed = getattr(attention, "in_proj_weight", None) is not None
    if not packed and not hasattr(attention, "q_proj"):
        raise TypeError(
            "attention must be a MultiHeadAttention with a packed in_proj_weight, or a "
            f"GroupedQueryAttention; got {type(attention).__name__}"
        )
    h, d = attention.num_heads, attention.head_dim
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < h:
        raise ValueError(f"head = {head!r}; expected an int in [0, {h})")
    cols = slice(head * d, (head + 1) * d)
    W_o = attention.out_proj.weight.detach().T  # (h*d, C): rows h*d:(h+1)*d face head h
    if packed:
        C = attention.embed_dim
        W = attention.in_proj_weight.detach()  # (3C, C) = [W_q; W_k; W_v] stored (out, in)
        W_q, W_k, W_v = (W[i * C : (i + 1) * C].T for i in range(3))  # (C, C) each, as x W
        return W_q[:, cols], W_k[:, cols], W_v[:, cols], W_o[cols, :]
    g = h // attention.num_kv_heads
    kv = slice((head // g) * d, (head // g + 1) * d)  # the group's key/value head
    W_q = attention.q_proj.weight.detach()[cols].T  # (C, d)
    W_k = attention.k_proj.weight.detach()[kv].T  # (C, d)
    W_v = attention.v_proj.weight.detach()[kv].T  # (C, d)
    return W_q, W_k, W_v, W_o[cols, :]


def refuse_nonlinear(attention, side: str) -> None:
    """Raise ValueError, naming the option, if the layer's scores (side "qk") or what it writes
    (side "ov") are not the bilinear or linear map of x its circuit is: biases on q, k and v
    (`attention_bias`; a packed `in_proj_bias`), QK-norm (`qk_norm`, "qk" only), an output gate
    (`attn_output_gate`, "ov" only)."""
    biased = getattr(attention, "in_proj_bias", None) is not None or any(
        getattr(getattr(attention, name, None), "bias", None) is not None
        for name in (("q_proj", "k_proj") if side == "qk" else ("v_proj",))
    )
    if biased:
        raise ValueError(
            "attention_bias: q, k and v have biases, so x W + b is affine, not the linear map "
            "a circuit is; the circuits are not computed for such a layer"
        )
    if side == "qk" and getattr(attention, "q_norm", None) is not None:
        raise ValueError(
            "qk_norm: the layer divides each head's q and k by their own rms (QK-norm), which "
            "is not linear in x; its QK circuit is not computed"
        )
    if side == "ov" and getattr(attention, "gate_proj", None) is not None:
        raise ValueError(
            "attn_output_gate: each head's output is multiplied by sigmoid(x W_G), which is not "
            "linear in x; its OV circuit is not computed"
        )


def qk_circuit(attention, head: int) -> Tensor:
    """W_QK^h = W_Q^h W_K^hᵀ (C, C), rank <= d: the score of query x_i and key x_j is
    x_i W_QK x_jᵀ / √d (a decoder layer's `query_factor`, its query scale, folded in; with RoPE,
    for a query and key at the same position). A layer whose scores are not bilinear in x is
    refused by name (`refuse_nonlinear`)."""
    refuse_nonlinear(attention, "qk")
    W_q, W_k, _, _ = head_weights(attention, head)
    return W_q @ W_k.T * getattr(attention, "query_factor", 1.0)  # (C, C)


def ov_circuit(attention, head: int) -> Tensor:
    """W_OV^h = W_V^h W_O^h (C, C), rank <= d: what attending to x_j adds to the stream. A layer
    whose output is not linear in its values is refused by name (`refuse_nonlinear`)."""
    refuse_nonlinear(attention, "ov")
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
