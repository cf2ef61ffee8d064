"""Grouped-query attention (GQA) and multi-query attention (MQA).

Derived in notebook 08. The h query heads keep their own projections, but
only h_kv key/value heads are computed, h_kv dividing h: query head i uses
key/value head i // g, with g = h / h_kv query heads per group.
h_kv = h is multi-head attention, h_kv = 1 multi-query attention. The KV
cache shrinks by the factor g: 2·B·h_kv·N·d numbers per layer.

What it holds:
- `repeat_kv(x, groups)`: (B, h_kv, M, d) -> (B, h_kv·g, M, d), each
  key/value head repeated for its g query heads (what
  `F.scaled_dot_product_attention(..., enable_gqa=True)` does implicitly);
- `grouped_query_attention(q, k, v, mask, is_causal)`: the plain definition,
  the weights written out;
- `GroupedQueryAttention`: the layer (projections W_q (C, h·d), W_k, W_v
  (C, h_kv·d), W_o (h·d, C)), with an optional `KVCache` for decoding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..pytorch import MultiHeadAttention, merge_heads, split_heads
from .kv_cache import KVCache, cached_attention

__all__ = ["GroupedQueryAttention", "grouped_query_attention", "repeat_kv"]


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """(B, h_kv, M, d) -> (B, h_kv·groups, M, d): head j becomes heads j·g .. j·g + g - 1."""
    check_int(groups, "groups", 1)
    if not isinstance(x, Tensor) or x.dim() != 4:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x has shape {got}; expected (B, h_kv, M, d)")
    return x.repeat_interleave(groups, dim=1)  # (B, h_kv*g, M, d)


def grouped_query_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False
) -> Tensor:
    """softmax(q kᵀ / √d_k) v with key/value heads shared by groups of query heads.

    q (B, h, N, d_k), k (B, h_kv, M, d_k), v (B, h_kv, M, d_v), h_kv dividing
    h; mask None or bool broadcastable to (B, h, N, M), True = may attend;
    is_causal: query i sees keys 0 .. i (top-left, as SDPA). A query with no
    key to attend to gets a zero output. Returns (B, h, N, d_v).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or x.dim() != 4:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} has shape {got}; expected 4 dims (B, heads, tokens, d)")
    B, h, N, d_k = q.shape
    h_kv, M = k.shape[1], k.shape[2]
    if h % h_kv != 0:
        raise ValueError(f"k has h_kv = {h_kv} heads; expected a divisor of q's h = {h}")
    if k.shape[0] != B or k.shape[3] != d_k:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; expected (B, h_kv, M, d_k) with B = {B}, d_k = {d_k}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v has shape {tuple(v.shape)}; expected (B, h_kv, M, d_v) like k")
    g = h // h_kv
    scores = q @ repeat_kv(k, g).transpose(-2, -1) / math.sqrt(d_k)  # (B, h, N, M)
    allowed = torch.ones(N, M, dtype=torch.bool, device=q.device)  # (N, M)
    if is_causal:
        allowed = allowed.tril()  # (N, M), top-left aligned
    if mask is not None:
        allowed = allowed & mask  # broadcast to (B|1, h|1, N, M)
    scores = scores.masked_fill(~allowed, float("-inf"))
    fully = ~allowed.any(dim=-1, keepdim=True)  # (..., N, 1): nothing to attend to
    weights = torch.softmax(scores.masked_fill(fully, 0.0), dim=-1)  # (B, h, N, M)
    weights = weights.masked_fill(fully, 0.0)
    return weights @ repeat_kv(v, g)  # (B, h, N, d_v)


class GroupedQueryAttention(nn.Module):
    """Self-attention with h query heads and h_kv = num_kv_heads key/value heads.

    embed_dim C, num_heads h (h divides C, d = C / h), num_kv_heads h_kv
    (divides h). Parameters: q_proj (C -> h·d), k_proj and v_proj
    (C -> h_kv·d), out_proj (h·d -> C), nn.Linear's (out, in) layout.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, bias: bool = False):
        super().__init__()
        C = check_int(embed_dim, "embed_dim", 1)
        h = check_int(num_heads, "num_heads", 1)
        h_kv = check_int(num_kv_heads, "num_kv_heads", 1)
        if C % h != 0:
            raise ValueError(f"embed_dim = {C} is not divisible by num_heads = {h}")
        if h % h_kv != 0:
            raise ValueError(
                f"num_kv_heads = {h_kv} does not divide num_heads = {h}; expected "
                "num_heads = groups * num_kv_heads"
            )
        self.embed_dim, self.num_heads, self.num_kv_heads = C, h, h_kv
        self.head_dim = C // h  # d = d_k = d_v
        d = self.head_dim
        self.q_proj = nn.Linear(C, h * d, bias=bias)  # W_q (C, h*d), stored (h*d, C)
        self.k_proj = nn.Linear(C, h_kv * d, bias=bias)  # W_k (C, h_kv*d)
        self.v_proj = nn.Linear(C, h_kv * d, bias=bias)  # W_v (C, h_kv*d)
        self.out_proj = nn.Linear(h * d, C, bias=bias)  # W_o (h*d, C)

    @classmethod
    def from_mha(cls, m: MultiHeadAttention) -> GroupedQueryAttention:
        """The same layer as m (num_kv_heads = num_heads), with a copy of m's weights."""
        if not isinstance(m, MultiHeadAttention) or not m._qkv_same_embed_dim:
            raise TypeError("m must be a mha_lib.pytorch.MultiHeadAttention with kdim = vdim = E")
        new = cls(m.embed_dim, m.num_heads, m.num_heads, bias=m.in_proj_bias is not None)
        new = new.to(device=m.out_proj.weight.device, dtype=m.out_proj.weight.dtype)
        with torch.no_grad():
            for proj, w in zip((new.q_proj, new.k_proj, new.v_proj), m.in_proj_weight.chunk(3)):
                proj.weight.copy_(w)  # (E, E) each
            if m.in_proj_bias is not None:
                for proj, b in zip((new.q_proj, new.k_proj, new.v_proj), m.in_proj_bias.chunk(3)):
                    proj.bias.copy_(b)
                new.out_proj.bias.copy_(m.out_proj.bias)
            new.out_proj.weight.copy_(m.out_proj.weight)
        return new

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        """An empty KVCache for this layer: (B, h_kv, max_len, d) keys and values."""
        w = self.k_proj.weight
        return KVCache(
            batch_size, self.num_kv_heads, max_len, self.head_dim, dtype=w.dtype, device=w.device
        )

    def forward(self, x: Tensor, cache: KVCache | None = None, is_causal: bool = False) -> Tensor:
        """x (B, n, C) -> (B, n, C).

        Without a cache: attention among the n tokens (causal if is_causal).
        With a cache: x holds the NEXT n tokens; their keys and values are
        appended and they attend causally to everything cached (is_causal is
        then implied).
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.embed_dim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; expected (B, n, C) with C = {self.embed_dim}")
        h, h_kv = self.num_heads, self.num_kv_heads
        q = split_heads(self.q_proj(x), h)  # (B, h, n, d)
        k = split_heads(self.k_proj(x), h_kv)  # (B, h_kv, n, d)
        v = split_heads(self.v_proj(x), h_kv)  # (B, h_kv, n, d)
        if cache is not None:
            heads = cached_attention(q, k, v, cache)  # (B, h, n, d)
        else:
            heads = F.scaled_dot_product_attention(
                q, k, v, is_causal=is_causal, enable_gqa=h != h_kv
            )  # (B, h, n, d)
        return self.out_proj(merge_heads(heads))  # (B, n, C)
