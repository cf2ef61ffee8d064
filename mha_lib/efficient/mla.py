"""Multi-head latent attention (MLA, DeepSeek-V2/V3), its latent cache and weight absorption.

Derived in notebook 11. Instead of h key and value heads per token, MLA caches one
normalised latent c (kv_lora_rank = r numbers) and one shared rotated key k_R
(qk_rope_head_dim = d_R numbers) per token; the per-head keys and values are low-rank
up-projections of c:

    c = RMSNorm(x W_DKV)                       (B, N, r)         cached
    k_R = RoPE(x W_KR)                         (B, N, d_R)       cached, shared by all heads
    k_i = [c W_UK,i ; k_R],  v_i = c W_UV,i    per head i: d_N + d_R and d_V numbers
    q_i = [q_N,i ; RoPE(q_R,i)]                from x W_Q (or the low-rank path
                                               RMSNorm(x W_DQ) W_UQ when q_lora_rank is set)

Weight absorption: q_N,i · (c_j W_UK,i) = (q_N,i W_UK,iᵀ) · c_j, so a decoding step turns
each query into the latent space once and scores it against the cached c directly; the
values likewise: Σ_j a_ij c_j W_UV,i = (Σ_j a_ij c_j) W_UV,i. Per-head keys and values are
never materialised. This works only because RoPE touches the separate d_R dimensions: a
rotation R_j applied to the full key would sit between W_UK,i and c_j and depend on the key's
position, so it could not be folded into the query (notebook 11 shows it numerically).

Conventions follow transformers' `DeepseekV3Attention` (checked in tests/efficient/test_mla.py):
nn.Linear layouts (out, in), no biases, both RMSNorms with eps = 1e-6, scale 1/√(d_N + d_R),
and `rope_interleaved=True` rotating the pairs (0, 1), (2, 3), ... (False: (i, i + d_R/2)).
transformers returns an interleaved rotation de-interleaved (evens first, then odds); this
module keeps the pairs in place. Both orders permute the query's and the key's rope
dimensions alike, so every score, and so every output, is the same.

The rotation itself is notebook 10's `mha_lib.positions.rope`, with float32 angles as in
transformers.

DeepSeek-V3's published configuration stretches its RoPE with YaRN (Peng et al. 2023): from a
pre-training context of 4096 tokens by a factor of 40. `yarn` computes what that changes, as
transformers does: per-pair frequencies (pairs that turn many times within the original
context keep theirs, slow ones are interpolated by the factor, a linear ramp between), a
factor on the rotated parts (1 for DeepSeek-V3), and a factor mscale² on the softmax scale
((0.1 · ln 40 + 1)² ≈ 1.87 for DeepSeek-V3). `rope_scaling=` (and `from_hf`) applies them.

What it holds:
- `MLACache`: per token only c and k_R; `len(cache)`, `cache.nbytes`;
- `MultiHeadLatentAttention`: the layer, `from_hf`, `forward(..., absorb=False)`;
- `yarn(...)`: YaRN's frequencies and factors from a `rope_scaling` dictionary;
- `decode_step_cost(...)`: FLOPs and bytes of one decoding step, plain or absorbed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_int
from ..nn.masks import bottom_right_causal_tensor
from ..positions import rope

__all__ = ["MLACache", "MultiHeadLatentAttention", "decode_step_cost", "yarn", "yarn_mscale"]

NORM_EPS = 1e-6  # transformers' DeepseekV3RMSNorm default, used for both latents


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude factor for a context stretched `factor` times: 0.1 · mscale · ln(factor)
    + 1 (1 when factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


YARN_KEYS = (
    "rope_type",
    "type",
    "rope_theta",
    "factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "truncate",
)


def yarn(d: int, base: float, scaling: dict) -> tuple[Tensor, float, float]:
    """YaRN for d rotated dimensions at `base`, from a configuration's `rope_scaling` (or
    transformers' `rope_parameters`) dictionary: factor, original_max_position_embeddings
    (the pre-training context), and optionally beta_fast (32), beta_slow (1), mscale,
    mscale_all_dim, attention_factor, truncate (True).

    Returns (frequencies (d/2,) float32, attention_factor, softmax_factor):
    - frequencies: pair i keeps base^(-2i/d) if it turns more than beta_fast times within the
      original context, is divided by factor if it turns fewer than beta_slow times, and is a
      linear blend of the two between (computed in float32, as transformers does);
    - attention_factor: multiplies the rotated query and key parts (transformers multiplies
      cos and sin by it): yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
      when both are given, else yarn_mscale(factor);
    - softmax_factor: multiplies the softmax scale 1/√(d_N + d_R): yarn_mscale(factor,
      mscale_all_dim)² when mscale_all_dim is given (DeepSeek's attention), else 1.
    """
    unknown = set(scaling) - set(YARN_KEYS)
    if unknown:
        raise ValueError(f"rope_scaling has keys {sorted(unknown)} that YaRN does not use")
    kind = scaling.get("rope_type", scaling.get("type", "yarn"))
    if kind != "yarn":
        raise ValueError(f"rope_scaling type {kind!r} is not supported; only 'yarn'")
    for key in ("factor", "original_max_position_embeddings"):
        if not isinstance(scaling.get(key), (int, float)) or not scaling[key] > 0:
            raise ValueError(f"rope_scaling[{key!r}] = {scaling.get(key)!r}; expected a number > 0")
    factor, original = float(scaling["factor"]), scaling["original_max_position_embeddings"]
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")

    def dim_of(turns: float) -> float:  # the pair index that turns `turns` times in `original`
        return d * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # (d/2,): 1 = the original frequency, 0 = interpolated by factor
    wavelength = base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,) / 2π
    frequencies = 1.0 / (factor * wavelength) * (1 - keep) + 1.0 / wavelength * keep
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
    softmax_factor = yarn_mscale(factor, mscale_all_dim) ** 2 if mscale_all_dim else 1.0
    return frequencies, float(attention_factor), float(softmax_factor)


class MLACache:
    """The latents c (B, T, r) and the rotated shared keys k_R (B, T, d_R) of T tokens.

    Nothing else is kept: r + d_R numbers per token and sequence, whatever the number of heads.
    """

    def __init__(self) -> None:
        self.c: Tensor | None = None  # (B, T, r)
        self.k_rope: Tensor | None = None  # (B, T, d_R)

    def __len__(self) -> int:
        return 0 if self.c is None else self.c.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes held: B · T · (r + d_R) · bytes per number."""
        if self.c is None:
            return 0
        return self.c.untyped_storage().nbytes() + self.k_rope.untyped_storage().nbytes()

    def append(self, c: Tensor, k_rope: Tensor) -> tuple[Tensor, Tensor]:
        """Store c (B, n, r) and k_rope (B, n, d_R) after the cached tokens; return all of them."""
        if self.c is None:
            self.c, self.k_rope = c.detach().clone(), k_rope.detach().clone()
        else:
            if c.shape[0] != self.c.shape[0] or c.shape[2] != self.c.shape[2]:
                raise ValueError(
                    f"c has shape {tuple(c.shape)}; expected (B, n, r) with "
                    f"B = {self.c.shape[0]}, r = {self.c.shape[2]} (the cache's)"
                )
            self.c = torch.cat((self.c, c.detach()), dim=1)  # (B, T + n, r)
            self.k_rope = torch.cat((self.k_rope, k_rope.detach()), dim=1)  # (B, T + n, d_R)
        return self.c, self.k_rope


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention, the attention layer of DeepSeek-V2 and V3.

    d_model C, num_heads h, kv_lora_rank r, qk_nope_head_dim d_N, qk_rope_head_dim d_R,
    v_head_dim d_V, q_lora_rank r_q (None: a full-rank query projection), rope_scaling (None,
    or a YaRN dictionary as in DeepSeek-V3's config.json: see `yarn`).
    Parameters (nn.Linear, no bias): q_proj (C -> h(d_N + d_R)) or q_a_proj (C -> r_q),
    q_a_norm, q_b_proj (r_q -> h(d_N + d_R)); kv_a_proj (C -> r + d_R), kv_a_norm,
    kv_b_proj (r -> h(d_N + d_V)), out_proj (h d_V -> C).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        q_lora_rank: int | None = None,
        rope_base: float = 10000.0,
        rope_interleaved: bool = True,
        rope_scaling: dict | None = None,
    ) -> None:
        super().__init__()
        C = check_int(d_model, "d_model", 1)
        h = check_int(num_heads, "num_heads", 1)
        r = check_int(kv_lora_rank, "kv_lora_rank", 1)
        d_N = check_int(qk_nope_head_dim, "qk_nope_head_dim", 0)
        d_R = check_int(qk_rope_head_dim, "qk_rope_head_dim", 0)
        d_V = check_int(v_head_dim, "v_head_dim", 1)
        if d_R % 2:
            raise ValueError(f"qk_rope_head_dim = {d_R} must be even (RoPE rotates pairs)")
        if d_N + d_R == 0:
            raise ValueError("qk_nope_head_dim + qk_rope_head_dim must be at least 1")
        if q_lora_rank is not None:
            check_int(q_lora_rank, "q_lora_rank", 1)
        if not (isinstance(rope_base, (int, float)) and rope_base > 1):
            raise ValueError(f"rope_base must be a number > 1; got {rope_base!r}")
        self.d_model, self.num_heads, self.kv_lora_rank = C, h, r
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = d_N, d_R, d_V
        self.q_lora_rank, self.rope_base = q_lora_rank, float(rope_base)
        self.rope_interleaved = bool(rope_interleaved)
        self.scale = (d_N + d_R) ** -0.5
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.rope_frequencies, self.rope_factor = None, 1.0  # (d_R/2,) float32 when stretched
        if rope_scaling is not None and d_R > 0:
            self.rope_frequencies, self.rope_factor, softmax_factor = yarn(
                d_R, self.rope_base, rope_scaling
            )
            self.scale = self.scale * softmax_factor
        d_qk = d_N + d_R
        if q_lora_rank is None:
            self.q_proj = nn.Linear(C, h * d_qk, bias=False)  # W_Q
        else:
            self.q_a_proj = nn.Linear(C, q_lora_rank, bias=False)  # W_DQ
            self.q_a_norm = nn.RMSNorm(q_lora_rank, eps=NORM_EPS)
            self.q_b_proj = nn.Linear(q_lora_rank, h * d_qk, bias=False)  # W_UQ
        self.kv_a_proj = nn.Linear(C, r + d_R, bias=False)  # [W_DKV, W_KR]
        self.kv_a_norm = nn.RMSNorm(r, eps=NORM_EPS)
        self.kv_b_proj = nn.Linear(r, h * (d_N + d_V), bias=False)  # [W_UK,i ; W_UV,i] per head
        self.out_proj = nn.Linear(h * d_V, C, bias=False)  # W_O

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_hf(cls, hf_attention) -> MultiHeadLatentAttention:
        """The same layer as a transformers `DeepseekV3Attention`, with a copy of its weights."""
        cfg = getattr(hf_attention, "config", None)
        if cfg is None or not hasattr(hf_attention, "kv_b_proj"):
            raise TypeError("hf_attention must be a transformers DeepseekV3Attention")
        if getattr(cfg, "attention_bias", False):
            raise ValueError("attention_bias = True is not supported (DeepSeek-V3 has none)")
        rope_params = dict(getattr(cfg, "rope_parameters", None) or {})
        rope_type = rope_params.get("rope_type", "default")
        if rope_type not in ("default", "yarn"):
            raise ValueError(f"rope_type {rope_type!r} is not supported; only 'default' or 'yarn'")
        scaling = None
        if rope_type == "yarn":
            scaling = {k: v for k, v in rope_params.items() if k != "rope_theta"}
            if scaling.get("factor") is None:  # transformers' fallback for DeepSeek-V3
                scaling["factor"] = (
                    cfg.max_position_embeddings / scaling["original_max_position_embeddings"]
                )
        if cfg.num_key_value_heads != cfg.num_attention_heads:
            raise ValueError("num_key_value_heads must equal num_attention_heads, as in DeepSeek")
        base = rope_params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        new = cls(
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.kv_lora_rank,
            cfg.qk_nope_head_dim,
            cfg.qk_rope_head_dim,
            cfg.v_head_dim,
            q_lora_rank=cfg.q_lora_rank,
            rope_base=base,
            rope_interleaved=bool(getattr(cfg, "rope_interleave", True)),
            rope_scaling=scaling,
        )
        w = hf_attention.kv_b_proj.weight
        new = new.to(device=w.device, dtype=w.dtype)
        pairs = [
            (new.kv_a_proj, hf_attention.kv_a_proj_with_mqa),
            (new.kv_a_norm, hf_attention.kv_a_layernorm),
            (new.kv_b_proj, hf_attention.kv_b_proj),
            (new.out_proj, hf_attention.o_proj),
        ]
        if cfg.q_lora_rank is None:
            pairs.append((new.q_proj, hf_attention.q_proj))
        else:
            pairs += [
                (new.q_a_proj, hf_attention.q_a_proj),
                (new.q_a_norm, hf_attention.q_a_layernorm),
                (new.q_b_proj, hf_attention.q_b_proj),
            ]
        with torch.no_grad():
            for ours, theirs in pairs:
                ours.weight.copy_(theirs.weight)
        return new

    # ------------------------------------------------------------------ pieces
    def queries(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """q_N (B, h, n, d_N) and the rotated q_R (B, h, n, d_R) of x (B, n, C)."""
        B, n, _ = x.shape
        if self.q_lora_rank is None:
            q = self.q_proj(x)  # (B, n, h(d_N + d_R))
        else:
            q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))
        q = q.view(B, n, self.num_heads, -1).transpose(1, 2)  # (B, h, n, d_N + d_R)
        q_nope, q_rope = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        return q_nope, self._rope(q_rope, positions)

    def latents(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """What is cached for x (B, n, C): c (B, n, r) normalised, k_R (B, n, d_R) rotated."""
        c, k_rope = self.kv_a_proj(x).split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        return self.kv_a_norm(c), self._rope(k_rope, positions)

    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        """x (B, ..., n, d_R) rotated at positions (n,) or (B, n), float32 angles (d_R = 0:
        no rope dimensions, nothing to rotate)."""
        if self.qk_rope_head_dim == 0:
            return x
        out = rope(
            x,
            positions,
            self.rope_base,
            self.rope_interleaved,
            angle_dtype=torch.float32,
            frequencies=self.rope_frequencies,
        )
        return out if self.rope_factor == 1.0 else out * self.rope_factor

    def up_weights(self) -> tuple[Tensor, Tensor]:
        """W_UK (h, d_N, r) and W_UV (h, d_V, r): the key and value up-projections per head."""
        w = self.kv_b_proj.weight.view(self.num_heads, -1, self.kv_lora_rank)  # (h, d_N+d_V, r)
        return w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim :]

    def _positions(self, x: Tensor, positions, start: int) -> Tensor:
        B, n, _ = x.shape
        if positions is None:
            return torch.arange(start, start + n, device=x.device)
        positions = torch.as_tensor(positions, device=x.device)
        if positions.shape not in ((n,), (B, n)):
            raise ValueError(
                f"positions has shape {tuple(positions.shape)}; expected (n,) or (B, n) with "
                f"B = {B}, n = {n}"
            )
        return positions

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        is_causal: bool = True,
        cache: MLACache | None = None,
        absorb: bool = False,
        mask: Tensor | None = None,
    ) -> Tensor:
        """x (B, n, C) -> (B, n, C).

        positions: (n,) or (B, n), default len(cache) .. len(cache) + n - 1. With a cache, this
        chunk's c and k_R are appended and the n queries attend over all m cached tokens, the
        causal mask aligned to the bottom right (query i sees keys 0 .. m - n + i).
        mask: optional bool, broadcastable to (B, h, n, m), True = may attend (and-ed with
        the causal mask). absorb: score and mix in the latent space (the same result).
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x has shape {got}; expected (B, n, C) with C = {self.d_model}")
        if cache is not None and not isinstance(cache, MLACache):
            raise TypeError(f"cache must be an MLACache; got {type(cache).__name__}")
        B, n, _ = x.shape
        pos = self._positions(x, positions, len(cache) if cache is not None else 0)
        q_nope, q_rope = self.queries(x, pos)  # (B, h, n, d_N), (B, h, n, d_R)
        c, k_rope = self.latents(x, pos)  # (B, n, r), (B, n, d_R)
        if cache is not None:
            c, k_rope = cache.append(c, k_rope)  # (B, m, r), (B, m, d_R)
        m = c.shape[1]
        allowed = None
        if is_causal:
            allowed = bottom_right_causal_tensor(n, m, x.device)  # (n, m)
        if mask is not None:
            allowed = mask if allowed is None else allowed & mask
        heads = self.attend(q_nope, q_rope, c, k_rope, allowed, absorb)  # (B, h, n, d_V)
        return self.out_proj(heads.transpose(1, 2).reshape(B, n, -1))  # (B, n, C)

    def attend(
        self,
        q_nope: Tensor,
        q_rope: Tensor,
        c: Tensor,
        k_rope: Tensor,
        allowed: Tensor | None = None,
        absorb: bool = False,
    ) -> Tensor:
        """The heads' outputs (B, h, n, d_V) from queries (B, h, n, d_N), (B, h, n, d_R) and the
        cached c (B, m, r), k_R (B, m, d_R); allowed: bool, True = may attend, or None.

        plain: up-project c to per-head keys and values, then attention;
        absorbed: q_N·W_UK into the latent space, scores against c and k_R, mix c, then W_UV.
        """
        B, m = c.shape[0], c.shape[1]
        W_UK, W_UV = self.up_weights()  # (h, d_N, r), (h, d_V, r)
        if absorb:
            q_lat = torch.einsum("bhnd,hdr->bhnr", q_nope, W_UK)  # (B, h, n, r)
            scores = q_lat @ c.transpose(1, 2)[:, None]  # (B, h, n, m)
            scores = scores + q_rope @ k_rope.transpose(1, 2)[:, None]
            scores = scores * self.scale
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (B, h, n, m)
            o_lat = weights @ c[:, None]  # (B, h, n, r): mixed latents
            return torch.einsum("bhnr,hvr->bhnv", o_lat, W_UV)  # (B, h, n, d_V)
        k_nope = torch.einsum("bmr,hdr->bhmd", c, W_UK)  # (B, h, m, d_N)
        v = torch.einsum("bmr,hvr->bhmv", c, W_UV)  # (B, h, m, d_V)
        k_r = k_rope[:, None].expand(B, self.num_heads, m, self.qk_rope_head_dim)
        k = torch.cat((k_nope, k_r), dim=-1)  # (B, h, m, d_N + d_R)
        q = torch.cat((q_nope, q_rope), dim=-1)  # (B, h, n, d_N + d_R)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale)

    def cache_numbers_per_token(self) -> int:
        """r + d_R: the numbers one token adds to the cache of this layer."""
        return self.kv_lora_rank + self.qk_rope_head_dim


def decode_step_cost(
    m: int,
    num_heads: int,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    qk_rope_head_dim: int,
    v_head_dim: int,
    absorb: bool,
    bytes_per_number: int = 4,
) -> dict[str, float]:
    """FLOPs and bytes read by the attention of ONE new query over m cached tokens (B = 1).

    A multiply-add counts 2 FLOPs; bytes count every number read from memory once.
    plain: the per-head keys (d_N + d_R) and values (d_V) of the m tokens, h of each, read by
    attention, as a per-head cache (or an up-projection of the latents) would hand them over;
    recomputing them from the latents every step would add 2·m·r·h·(d_N + d_V) FLOPs
    (`upproject_flops`).
    absorbed: the latents and rope keys, m·(r + d_R) numbers, and the up-projections W_UK,
    W_UV (h·(d_N + d_V)·r numbers, shared by a whole batch); q·W_UK once, the scores against
    c and k_R, the mix of c, then W_UV once.
    The projections of the new token itself, the same in both forms, are left out.
    """
    h, r, d_N, d_R, d_V = num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    if absorb:
        flops = 2 * h * d_N * r + 2 * h * m * (r + d_R) + 2 * h * m * r + 2 * h * r * d_V
        numbers = m * (r + d_R) + h * (d_N + d_V) * r
    else:
        flops = 2 * h * m * (d_N + d_R) + 2 * h * m * d_V
        numbers = h * m * (d_N + d_R + d_V)
    nbytes = numbers * bytes_per_number
    return {
        "flops": float(flops),
        "bytes": float(nbytes),
        "flops_per_byte": flops / nbytes,
        "upproject_flops": float(2 * m * r * h * (d_N + d_V)),
    }
