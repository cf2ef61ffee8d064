"""DeepSeek's lightning indexer: a small second attention that chooses, for each query, the k
keys its latent attention may see; its own key cache; the causal top-k choice as a mask.

Derived in notebook 18. DeepSeek-V3.2 keeps notebook 11's multi-head latent attention (MLA) and
adds, in every layer, an indexer that scores every earlier key with a few cheap heads and keeps
the index_topk best: sparse attention as a learned mask. For n new tokens x (B, n, C) at
`positions`, with the query's low-rank latent c_Q = RMSNorm(x W_DQ) (B, n, r_q) that MLA computes
anyway, H index heads of dimension D (index_n_heads, index_head_dim) and m keys in all:

    q_h = c_Q W_Q^I,h                       (B, n, H, D)   one query per index head
    k   = LayerNorm(x W_K^I)                (B, m, D)      ONE key per token, shared by the heads
    w_h = x W_w / √H                        (B, n, H)      a weight per query and head
    (the first d_R numbers of q_h and k turned by RoPE, half-split pairs (i, i + d_R/2), unlike
    MLA's interleaved pairs; the same frequencies, YaRN's included)
    I(t, s) = Σ_h w_h(t) · ReLU(q_h(t) · k(s) / √D)            (B, n, m)   the index scores

Query t may then attend to the index_topk keys s ≤ t of largest I(t, s) (all of them while
there are fewer): `causal_topk` returns their indices (B, n, k) and the boolean mask (B, n, m),
True = may attend, that MLA's scores are masked with. With index_topk ≥ the number of keys every
causal key is chosen and the layer is MLA unchanged. The weights w_h may be negative: a head can
vote against a key.

This is transformers' `DeepseekV32Indexer` (checked in tests/sparse_attention/test_indexer.py),
the bf16 equivalent of DeepSeek's kernel: their code turns q and k by a Hadamard rotation before
scoring, which changes no dot product (it is orthogonal: Hq · Hk = q · k), and scores in FP8, a
precision choice; both are left out. The scores are computed in float32 at least, as
transformers computes them (float64 stays float64).

Decoding keeps the index keys of every token seen (`IndexerCache`): D numbers per token and
layer beside MLA's r + d_R, whose bytes `indexer_numbers_per_token` and
`mha_lib.efficient.cache_cost` (`CacheConfig.index_head_dim`) count.

What it holds:
- `LightningIndexer`: the layer (q_proj W_Q^I, k_proj W_K^I, k_norm, weights_proj W_w) whose
  forward gives the index scores (B, n, m), -inf where causality blocks a key;
- `IndexerCache`: the index keys of the tokens seen, (B, T, D);
- `causal_topk(scores, k)`: the chosen keys' indices (B, n, k), -1 where a query has fewer than
  k keys, and the "may attend" mask (B, n, m);
- `indexer_numbers_per_token(index_head_dim)`: D, what one token adds to one layer's cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..efficient.mla import yarn
from ..nn.masks import bottom_right_causal_tensor
from ..positions import rope

__all__ = ["IndexerCache", "LightningIndexer", "causal_topk", "indexer_numbers_per_token"]

NORM_EPS = 1e-6  # transformers' DeepseekV32Indexer: nn.LayerNorm(index_head_dim, eps=1e-6)


class LightningIndexer(nn.Module):
    """The index scores of n queries against m keys: Σ_h w_h · ReLU(q_h · k / √D).

    d_model C, q_lora_rank r_q (the queries are read from MLA's latent c_Q), index_n_heads H,
    index_head_dim D, qk_rope_head_dim d_R (the first d_R numbers of q_h and k turned by RoPE,
    half-split, at rope_base or with a YaRN `rope_scaling` as in `mha_lib.efficient.mla.yarn`).
    Parameters: q_proj (r_q -> H·D), k_proj (C -> D), k_norm (a LayerNorm over D, with a bias),
    weights_proj (C -> H); nn.Linear layouts (out, in), no biases.
    """

    def __init__(
        self,
        d_model: int,
        q_lora_rank: int,
        index_n_heads: int,
        index_head_dim: int,
        qk_rope_head_dim: int,
        rope_base: float = 10000.0,
        rope_scaling: dict | None = None,
    ) -> None:
        super().__init__()
        C = check_int(d_model, "d_model", 1)
        r_q = check_int(q_lora_rank, "q_lora_rank", 1)
        H = check_int(index_n_heads, "index_n_heads", 1)
        D = check_int(index_head_dim, "index_head_dim", 1)
        d_R = check_int(qk_rope_head_dim, "qk_rope_head_dim", 0)
        if d_R % 2 or d_R > D:
            raise ValueError(
                f"qk_rope_head_dim = {d_R}; expected an even number at most index_head_dim = {D} "
                "(RoPE turns pairs among the first d_R numbers of each index head)"
            )
        if not (isinstance(rope_base, (int, float)) and rope_base > 1):
            raise ValueError(f"rope_base must be a number > 1; got {rope_base!r}")
        self.d_model, self.q_lora_rank, self.index_n_heads = C, r_q, H
        self.index_head_dim, self.qk_rope_head_dim, self.rope_base = D, d_R, float(rope_base)
        self.scale = D**-0.5  # 1/√D, inside the ReLU
        self.rope_frequencies, self.rope_factor = None, 1.0  # (d_R/2,) when stretched
        if rope_scaling is not None and d_R > 0:
            self.rope_frequencies, self.rope_factor, _ = yarn(d_R, self.rope_base, rope_scaling)
        self.q_proj = nn.Linear(r_q, H * D, bias=False)  # W_Q^I
        self.k_proj = nn.Linear(C, D, bias=False)  # W_K^I
        self.k_norm = nn.LayerNorm(D, eps=NORM_EPS)
        self.weights_proj = nn.Linear(C, H, bias=False)  # W_w

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """x (..., n, D) with its first d_R numbers turned at positions (n,), half-split pairs
        (i, i + d_R/2), float32 angles, times YaRN's attention factor when stretched."""
        d_R = self.qk_rope_head_dim
        if d_R == 0:
            return x
        turned = rope(
            x[..., :d_R],
            positions,
            self.rope_base,
            interleaved=False,
            angle_dtype=torch.float32,
            frequencies=self.rope_frequencies,
        )
        if self.rope_factor != 1.0:
            turned = turned * self.rope_factor
        return torch.cat([turned, x[..., d_R:]], dim=-1)  # (..., n, D)

    def keys(self, x: Tensor, positions: Tensor) -> Tensor:
        """The index keys of x (B, n, C): LayerNorm(x W_K^I), turned: (B, n, D)."""
        k = self.k_norm(self.k_proj(x))  # (B, n, D)
        return self.rotate(k[:, None], positions)[:, 0]  # (B, n, D)

    def queries(self, q_latent: Tensor, positions: Tensor) -> Tensor:
        """The index queries of c_Q (B, n, r_q): (B, n, H, D), turned."""
        B, n, _ = q_latent.shape
        q = self.q_proj(q_latent).view(B, n, self.index_n_heads, self.index_head_dim)
        return self.rotate(q.transpose(1, 2), positions).transpose(1, 2)  # (B, n, H, D)

    def forward(
        self,
        x: Tensor,
        q_latent: Tensor,
        positions: Tensor | None = None,
        cache: IndexerCache | None = None,
    ) -> Tensor:
        """The index scores (B, n, m) of n new tokens x (B, n, C), whose query latents are
        q_latent (B, n, r_q), against every key: the m cached ones (the n new keys appended to
        the cache first) or, without a cache, the n new ones. positions: (n,), default
        len(cache) .. len(cache) + n - 1. A key after its query (the causal mask aligned to the
        bottom right: query i is token m - n + i) scores -inf."""
        self._check(x, q_latent, cache)
        n = x.shape[1]
        start = 0 if cache is None else len(cache)
        if positions is None:
            positions = torch.arange(start, start + n, device=x.device)
        k = self.keys(x, positions)  # (B, n, D)
        if cache is not None:
            k = cache.append(k)  # (B, m, D)
        q = self.queries(q_latent, positions)  # (B, n, H, D)
        dtype = torch.promote_types(q.dtype, torch.float32)
        dots = q.to(dtype) @ k.to(dtype).transpose(1, 2)[:, None]  # (B, n, H, m)
        relu = F.relu(dots * self.scale)  # (B, n, H, m)
        w = self.weights_proj(x).to(dtype) * self.index_n_heads**-0.5  # (B, n, H)
        scores = (w[:, :, None] @ relu)[:, :, 0]  # (B, n, m): Σ_h w_h · ReLU(...)
        causal = bottom_right_causal_tensor(n, k.shape[1], x.device)  # (n, m)
        return scores.masked_fill(~causal, float("-inf"))  # (B, n, m)

    def _check(self, x, q_latent, cache) -> None:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; expected (B, n, C) with C = {self.d_model}")
        want = (*x.shape[:2], self.q_lora_rank)
        if not isinstance(q_latent, Tensor) or tuple(q_latent.shape) != want:
            got = tuple(q_latent.shape) if isinstance(q_latent, Tensor) else type(q_latent).__name__
            raise ValueError(
                f"q_latent has shape {got}; expected (B, n, r_q) = {want}, MLA's query latent of x"
            )
        if cache is not None and not isinstance(cache, IndexerCache):
            raise TypeError(f"cache must be an IndexerCache; got {type(cache).__name__}")


class IndexerCache:
    """The index keys (B, T, D) of T tokens: D numbers per token and sequence, one key shared by
    the H index heads (MLA's own cache keeps r + d_R numbers beside it)."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None  # (B, T, D)

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes held: B · T · D · bytes per number."""
        return 0 if self.keys is None else self.keys.untyped_storage().nbytes()

    def append(self, k: Tensor) -> Tensor:
        """Store k (B, n, D) after the cached keys; return all of them (B, T + n, D)."""
        if self.keys is None:
            self.keys = k.detach().clone()
        else:
            if k.dim() != 3 or k.shape[0] != self.keys.shape[0] or k.shape[2] != self.keys.shape[2]:
                raise ValueError(
                    f"k has shape {tuple(k.shape)}; expected (B, n, D) with B = "
                    f"{self.keys.shape[0]}, D = {self.keys.shape[2]} (the cache's)"
                )
            self.keys = torch.cat((self.keys, k.detach()), dim=1)  # (B, T + n, D)
        return self.keys

    def truncate(self, length: int) -> None:
        """Forget every key after the first `length`."""
        check_int(length, "length", 0)
        if length > len(self):
            raise ValueError(f"length = {length}; the cache holds {len(self)} keys")
        if self.keys is not None:
            self.keys = self.keys[:, :length].clone()


def causal_topk(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The keys each query chooses from its index scores (B, n, m) (-inf: a key it may not see).

    Returns (indices (B, n, k'), allowed (B, n, m)) with k' = min(k, m): each query's k' keys of
    largest score, best first, -1 in the places beyond the keys it may see (a query with fewer
    visible keys takes them all), and the bool mask, True = may attend: the chosen keys. Ties
    are broken as torch.topk breaks them.
    """
    if not isinstance(scores, Tensor) or scores.dim() != 3 or not scores.is_floating_point():
        got = (
            f"a {scores.dtype} tensor of shape {tuple(scores.shape)}"
            if isinstance(scores, Tensor)
            else type(scores).__name__
        )
        raise ValueError(f"scores is {got}; expected float index scores (B, n, m)")
    check_int(k, "k", 1)
    kk = min(k, scores.shape[-1])
    top = scores.topk(kk, dim=-1)  # values, indices (B, n, k')
    visible = top.values > float("-inf")  # (B, n, k'): a key the query may see
    indices = top.indices.masked_fill(~visible, -1)  # (B, n, k')
    allowed = torch.zeros_like(scores, dtype=torch.bool)  # (B, n, m)
    allowed.scatter_(-1, top.indices, visible)
    return indices, allowed


def indexer_numbers_per_token(index_head_dim: int) -> int:
    """D: the numbers one token adds to ONE layer's indexer cache (one key shared by the H index
    heads; DeepSeek-V3.2: 128, beside MLA's 512 + 64)."""
    return check_int(index_head_dim, "index_head_dim", 1)
