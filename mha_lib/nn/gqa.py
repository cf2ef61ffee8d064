"""Grouped-query attention (GQA) and multi-query attention (MQA): the attention layer every later
model of the series runs.

Derived in notebook 08. The h query heads keep their own projections, but
only h_kv key/value heads are computed, h_kv dividing h: query head i uses
key/value head i // g, with g = h / h_kv query heads per group.
h_kv = h is multi-head attention, h_kv = 1 multi-query attention. The KV
cache shrinks by the factor g: 2·B·h_kv·N·d numbers per layer.

What it holds:
- `repeat_kv(x, groups)`: (B, h_kv, M, d) -> (B, h_kv·g, M, d), each
  key/value head repeated for its g query heads (what
  `F.scaled_dot_product_attention(..., enable_gqa=True)` does implicitly);
- `grouped_scores(q, k)`: the scores q kᵀ / √d_k (B, h, N, M) of every query head against
  its group's keys, where every explicit form of attention in the library starts;
- `grouped_query_attention(q, k, v, mask, is_causal)`: the plain definition,
  the weights written out; with a `score_mod` (a change of every score: Gemma 2's soft-capping)
  and learned `sink_logits` (an extra logit per head that takes weight and adds no value:
  gpt-oss), both derived in notebook 15;
- `sdpa_attention(q, k, v)`: torch's fused attention for n new queries that are the last n of
  the m keys (the causal mask aligned to the bottom right), the layer's default; a `window`
  (a sliding-window layer) adds its band to the mask;
- `GroupedQueryAttention`: the layer (projections W_q (C, h·d), W_k, W_v (C, h_kv·d), W_o
  (h·d, C), d = head_dim, C / h unless given). Its forward is the one every attention layer
  of the library runs: project and split the heads (`project`), rotate the queries and keys
  (`rotate`, nothing here; RoPE in `mha_lib.nn.decoder.DecoderAttention`), let a cache store
  the keys and values and say what the queries see (`KVCache.update`), attend with a pluggable
  function (`mha_lib.nn.backends`) told what the layer adds to causal attention
  (`attention_options`: nothing here; a window, a score_mod or sink logits in a decoder's
  layer), scale the heads (`head_mask`), merge them, and W_O.
  `qkv(x, positions)` gives the rotated q, k, v of a layer, for the measures.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..pytorch import MultiHeadAttention, merge_heads, split_heads
from .kv_cache import KVCache, SinkKVCache
from .masks import bottom_right_causal_tensor, bottom_right_window_tensor

__all__ = [
    "GroupedQueryAttention",
    "grouped_query_attention",
    "grouped_scores",
    "grouped_weights",
    "repeat_kv",
    "sdpa_attention",
]


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """(B, h_kv, M, d) -> (B, h_kv·groups, M, d): head j becomes heads j·g .. j·g + g - 1."""
    check_int(groups, "groups", 1)
    if not isinstance(x, Tensor) or x.dim() != 4:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x has shape {got}; expected (B, h_kv, M, d)")
    return x.repeat_interleave(groups, dim=1)  # (B, h_kv*g, M, d)


def grouped_scores(q: Tensor, k: Tensor) -> Tensor:
    """q kᵀ / √d_k with each key/value head shared by its group: q (B, h, N, d_k), k (B, h_kv,
    M, d_k) -> (B, h, N, M), unmasked."""
    g = q.shape[1] // k.shape[1]
    return q @ repeat_kv(k, g).transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, N, M)


def grouped_query_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    *,
    score_mod=None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """softmax(q kᵀ / √d_k) v with key/value heads shared by groups of query heads.

    q (B, h, N, d_k), k (B, h_kv, M, d_k), v (B, h_kv, M, d_v), h_kv dividing
    h; mask None or bool broadcastable to (B, h, N, M), True = may attend;
    is_causal: query i sees keys 0 .. i (top-left, as SDPA). A query with no
    key to attend to gets a zero output. Returns (B, h, N, d_v).
    score_mod: a FlexAttention score_mod(score, b, h, q_idx, kv_idx) applied to every score
    before the mask (q_idx the row of q, kv_idx the row of k), such as
    `masks.softcap_score_mod`. sink_logits (h,): one more logit per head in every row's
    softmax, whose weight is dropped (it has no value): the row's weights then sum to less than 1.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or x.dim() != 4:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} has shape {got}; expected 4 dims (B, heads, tokens, d)")
    B, h, _, d_k = q.shape
    h_kv = k.shape[1]
    if h % h_kv != 0:
        raise ValueError(f"k has h_kv = {h_kv} heads; expected a divisor of q's h = {h}")
    if k.shape[0] != B or k.shape[3] != d_k:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; expected (B, h_kv, M, d_k) with B = {B}, d_k = {d_k}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v has shape {tuple(v.shape)}; expected (B, h_kv, M, d_v) like k")
    weights = grouped_weights(
        q, k, mask, is_causal, score_mod=score_mod, sink_logits=sink_logits
    )  # (B, h, N, M)
    return weights @ repeat_kv(v, h // h_kv)  # (B, h, N, d_v)


def grouped_weights(
    q: Tensor,
    k: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    *,
    score_mod=None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """The weights (B, h, N, M) `grouped_query_attention` uses (its arguments, without v)."""
    B, h, N, _ = q.shape
    M = k.shape[2]
    scores = grouped_scores(q, k)  # (B, h, N, M)
    if score_mod is not None:  # evaluated on the whole grid, each index broadcast on its axis
        b_idx, h_idx, q_idx, kv_idx = (
            torch.arange(n, device=q.device).view(shape)
            for n, shape in (
                (B, (-1, 1, 1, 1)),
                (h, (1, -1, 1, 1)),
                (N, (1, 1, -1, 1)),
                (M, (1, 1, 1, -1)),
            )
        )
        scores = score_mod(scores, b_idx, h_idx, q_idx, kv_idx)
    allowed = torch.ones(N, M, dtype=torch.bool, device=q.device)  # (N, M)
    if is_causal:
        allowed = allowed.tril()  # (N, M), top-left aligned
    if mask is not None:
        allowed = allowed & mask  # broadcast to (B|1, h|1, N, M)
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sink_logits is not None:  # one more column per head: the sink, with no value
        if not isinstance(sink_logits, Tensor) or tuple(sink_logits.shape) != (h,):
            got = tuple(sink_logits.shape) if isinstance(sink_logits, Tensor) else sink_logits
            raise ValueError(f"sink_logits has shape {got}; expected (h,) = ({h},)")
        sink = sink_logits.to(scores.dtype).view(1, h, 1, 1).expand(scores.shape[0], h, N, 1)
        return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :M]  # (B, h, N, M)
    fully = ~allowed.any(dim=-1, keepdim=True)  # (..., N, 1): nothing to attend to
    weights = torch.softmax(scores.masked_fill(fully, 0.0), dim=-1)  # (B, h, N, M)
    return weights.masked_fill(fully, 0.0)


def sdpa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None = None,
    score_mod=None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """torch's fused attention for n new queries, the last n of the m keys (query i sees keys
    0 .. m - n + i), the query heads grouped over the key/value heads: q (B, h, n, d), k, v
    (B, h_kv, m, d) -> (B, h, n, d).

    window: query i sees only its last `window` keys (a sliding-window layer); score_mod and
    sink_logits as `grouped_query_attention`'s, which computes them (torch's fused kernel has
    neither)."""
    n, m = q.shape[2], k.shape[2]
    if score_mod is not None or sink_logits is not None:  # written out: SDPA cannot
        mask = _causal_mask(n, m, window, q.device)
        return grouped_query_attention(q, k, v, mask, score_mod=score_mod, sink_logits=sink_logits)
    gqa = q.shape[1] != k.shape[1]
    if window is not None and m > window:  # some query has keys out of its window
        mask = bottom_right_window_tensor(n, m, window, q.device)  # (n, m)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    if n == 1:  # one new token, the last: it sees every key
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    if n == m:  # a whole prompt: the plain causal mask
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    mask = bottom_right_causal_tensor(n, m, q.device)  # (n, m)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def _causal_mask(n: int, m: int, window: int | None, device) -> Tensor:
    """(n, m): bottom-right causal, within the window when there is one."""
    if window is None:
        return bottom_right_causal_tensor(n, m, device)
    return bottom_right_window_tensor(n, m, window, device)


class GroupedQueryAttention(nn.Module):
    """Self-attention with h query heads and h_kv = num_kv_heads key/value heads.

    embed_dim C, num_heads h, num_kv_heads h_kv (divides h), head_dim d (C / h unless given: a
    model may give its heads another width, and one rank of notebook 14 holds h / P heads of
    the model's d). Parameters: q_proj (C -> h·d), k_proj and v_proj (C -> h_kv·d), out_proj
    (h·d -> C), nn.Linear's (out, in) layout. `causal`: whether the n tokens of a call without a
    cache attend causally by default (False here; True in a decoder's layer).
    """

    causal = False

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int,
        bias: bool = False,
        *,
        head_dim: int | None = None,
    ):
        super().__init__()
        C = check_int(embed_dim, "embed_dim", 1)
        h = check_int(num_heads, "num_heads", 1)
        h_kv = check_int(num_kv_heads, "num_kv_heads", 1)
        if head_dim is None and C % h != 0:
            raise ValueError(f"embed_dim = {C} is not divisible by num_heads = {h}")
        if h % h_kv != 0:
            raise ValueError(
                f"num_kv_heads = {h_kv} does not divide num_heads = {h}; expected "
                "num_heads = groups * num_kv_heads"
            )
        self.embed_dim, self.num_heads, self.num_kv_heads = C, h, h_kv
        self.head_dim = C // h if head_dim is None else check_int(head_dim, "head_dim", 1)
        d = self.head_dim  # d = d_k = d_v
        self.q_proj = nn.Linear(C, h * d, bias=bias)  # W_q (C, h*d), stored (h*d, C)
        self.k_proj = nn.Linear(C, h_kv * d, bias=bias)  # W_k (C, h_kv*d)
        self.v_proj = nn.Linear(C, h_kv * d, bias=bias)  # W_v (C, h_kv*d)
        self.out_proj = nn.Linear(h * d, C, bias=bias)  # W_o (h*d, C)

    @classmethod
    def from_mha(cls, m: MultiHeadAttention) -> GroupedQueryAttention:
        """The same layer as m (num_kv_heads = num_heads), with a copy of m's weights.

        This layer always takes batches first, (B, n, C), whatever m.batch_first is (it is
        False by default, as in nn.MultiheadAttention)."""
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

    # ------------------------------------------------------------------ what a step keeps

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        """An empty KVCache for this layer: (B, h_kv, max_len, d) keys and values."""
        w = self.k_proj.weight
        return KVCache(
            batch_size, self.num_kv_heads, max_len, self.head_dim, dtype=w.dtype, device=w.device
        )

    def new_sink_cache(
        self, batch_size: int, window: int, num_sinks: int = 4, rope_positions: str = "cache"
    ) -> SinkKVCache:
        """An empty SinkKVCache for this layer: num_sinks sinks and the last `window` tokens."""
        w = self.k_proj.weight
        return SinkKVCache(
            batch_size,
            self.num_kv_heads,
            self.head_dim,
            window,
            num_sinks,
            rope_positions=rope_positions,
            dtype=w.dtype,
            device=w.device,
        )

    # ------------------------------------------------------------------ the forward pass

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, n, C) -> q (B, h, n, d), k, v (B, h_kv, n, d): the projections, heads split."""
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.embed_dim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; expected (B, n, C) with C = {self.embed_dim}")
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, h, n, d)
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # (B, h_kv, n, d)
        v = split_heads(self.v_proj(x), self.num_kv_heads)  # (B, h_kv, n, d)
        return q, k, v

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """The queries or keys x (B, heads, n, d) at `positions` (n,), as this layer sees them:
        unchanged here (a position scheme of its own, such as RoPE, is a subclass's)."""
        return x

    def attention_options(self, m: int) -> dict:
        """What the attention function is told besides q, k and v when the queries see m keys:
        nothing here (plain causal attention); a subclass's layer may add a `window`, a
        `score_mod` or `sink_logits` (`mha_lib.nn.backends` lists them)."""
        return {}

    def qkv(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, n, C) at `positions` (n,) -> q (B, h, n, d), k, v (B, h_kv, n, d): what the
        layer attends with, q and k rotated. For the measures (notebook 13)."""
        q, k, v = self.project(x)
        return self.rotate(q, positions), self.rotate(k, positions), v

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        cache=None,
        attention=None,
        head_mask: Tensor | None = None,
        *,
        is_causal: bool | None = None,
    ) -> Tensor:
        """x (B, n, C) -> (B, n, C).

        x holds n new tokens at `positions` (n,) (default: after the tokens the cache has seen,
        or 0 .. n - 1). With a cache (a `KVCache`, a `SinkKVCache`, or any object with their
        `update`), the new keys and values are stored, the cache decides where queries and keys
        are rotated and which keys the queries see, and they attend causally to them. Without
        one, the n tokens attend among themselves: causally if is_causal (default: the layer's
        `causal`). attention: a function attention(q, k, v) -> o (`mha_lib.nn.backends`) for
        causal attention, the n queries the last n of the m keys (default: `sdpa_attention`).
        head_mask (h,): multiplies each head's output (1 keeps it, 0 removes it).
        """
        q, k, v = self.project(x)  # (B, h, n, d), (B, h_kv, n, d), (B, h_kv, n, d)
        if positions is None:
            start = 0 if cache is None else cache.seen
            positions = torch.arange(start, start + x.shape[1], device=x.device)  # (n,)
        if cache is not None:
            q, k, v = cache.update(q, k, v, positions, self.rotate)  # k, v (B, h_kv, m, d)
        else:
            q, k = self.rotate(q, positions), self.rotate(k, positions)
        causal = self.causal if is_causal is None else is_causal
        options = self.attention_options(k.shape[2])  # {} here; a decoder layer's window, ...
        if attention is not None:
            heads = attention(q, k, v, **options)  # (B, h, n, d)
        elif cache is None and not causal:  # every token sees every token
            heads = F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])
        else:  # the n queries are the last n of the m keys
            heads = sdpa_attention(q, k, v, **options)  # (B, h, n, d)
        if head_mask is not None:
            heads = heads * head_mask.view(1, -1, 1, 1).to(heads.dtype)  # 0 removes a head
        return self.output(heads, x)  # (B, n, C)

    def output(self, heads: Tensor, x: Tensor) -> Tensor:
        """heads (B, h, n, d) -> (B, n, C): the heads merged side by side, then W_O. x, the
        layer's input (B, n, C), is for a subclass that gates the heads with it."""
        return self.out_proj(merge_heads(heads))  # (B, n, C)
