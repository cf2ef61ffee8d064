"""Where is each token? Position encodings: sinusoidal, rotary (RoPE), relative biases.

Derived in notebook 10. Attention alone is permutation-equivariant (notebooks 02 §3, 03 §4):
it sees a set of tokens, not a sequence. A position scheme breaks the symmetry, in one of
three places:
- added to the input X (N, C) before the first layer: `sinusoidal_positions` (Vaswani et al.)
  or a learned table (notebook 05's MiniLM);
- added to the scores q_m · k_n as a function of m - n: T5's bucketed bias
  (`t5_relative_buckets`) and ALiBi (`mha_lib.nn.masks.alibi_bias`, notebook 08);
- applied to the queries and keys inside every attention layer: `rope` rotates each pair of
  coordinates of q and k (d_k of them per head) by an angle proportional to the position, so
  that q_m · k_n depends on the positions only through m - n.

Notation (notebook 00's table): X (N, C), one head's queries and keys (N, d_k), values (N, d_v),
h heads; `rope` takes any (..., N, d) with d = d_k even, e.g. (B, h, N, d_k). Imports torch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "rope",
    "rope_frequencies",
    "rope_permutation",
    "sinusoidal_positions",
    "t5_relative_buckets",
]


def rope(
    x: Tensor,
    positions: Tensor,
    base: float = 10000.0,
    interleaved: bool = False,
    *,
    scale: float = 1.0,
    angle_dtype: torch.dtype | None = None,
    frequencies: Tensor | None = None,
) -> Tensor:
    """Rotary position embedding: rotate each pair of x's last dimension by position · ω_i.

    x (..., N, d), d even (a head's queries or keys: (B, h, N, d_k)); positions (N,) integer
    absolute positions (any non-negative integers, not necessarily from 0 nor contiguous), or
    (B, N), one row per sequence of x (B, ..., N, d), as a batch decoded at different offsets, or
    (1, N), one row for every sequence of the batch (as (N,)).
    Pair i (ω_i = base^(-2i/d), `rope_frequencies`) is turned by the angle
    scale · position · ω_i:
    - interleaved=False: pairs (i, i + d/2), as Hugging Face's Llama
      (`LlamaRotaryEmbedding` + `apply_rotary_pos_emb` with rope_theta = base);
    - interleaved=True: pairs (2i, 2i + 1), as RoFormer, Meta's original complex-number code and
      DeepSeek's MLA (notebook 11); the result stays in that interleaved layout.
    scale < 1 is position interpolation (Chen et al., 2023): positions are squeezed by scale.

    angle_dtype: the precision of the angles and of the rotation. By default x's (float32 at
    least; float16 and bfloat16 inputs are rotated in float32): in float64 the result is the
    exact rotation to 1e-10 at positions up to a few 10^5 (an angle p·ω is rounded to about
    1e-16 · p radians), where float32 angles, as transformers computes them, are off by about
    1e-2 there. Pass torch.float32 to compute as transformers does. Returns a new tensor of x's
    dtype; x is not modified.

    frequencies: (d/2,) ω_i to use instead of base^(-2i/d) (base is then ignored): a stretched
    RoPE such as YaRN's (notebook 11's DeepSeek-V3, `mha_lib.efficient.mla.yarn`).
    """
    _check_rope(x, positions, scale, angle_dtype)
    d = x.shape[-1]
    if angle_dtype is None:
        angle_dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    if frequencies is None:
        omega = rope_frequencies(d, base, dtype=angle_dtype).to(x.device)  # (d/2,)
    elif not isinstance(frequencies, Tensor) or frequencies.shape != (d // 2,):
        got = tuple(frequencies.shape) if isinstance(frequencies, Tensor) else type(frequencies)
        raise ValueError(f"frequencies has shape {got}; expected (d/2,) = ({d // 2},)")
    else:
        omega = frequencies.to(device=x.device, dtype=angle_dtype)  # (d/2,)
    p = positions.to(device=x.device, dtype=angle_dtype)  # (N,) or (B, N)
    if scale != 1:
        p = p * scale
    angle = p[..., None] * omega  # (N, d/2) or (B, N, d/2)
    if positions.dim() == 2:  # (B, N, d/2) -> (B, 1, ..., 1, N, d/2), against x (B, ..., N, d)
        angle = angle.view(angle.shape[0], *([1] * (x.dim() - 3)), *angle.shape[1:])
    cos, sin = angle.cos(), angle.sin()
    xw = x.to(angle_dtype)
    if interleaved:
        x1, x2 = xw[..., 0::2], xw[..., 1::2]  # (..., N, d/2): the pairs (2i, 2i + 1)
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    else:
        x1, x2 = xw[..., : d // 2], xw[..., d // 2 :]  # (..., N, d/2): the pairs (i, i + d/2)
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return out.to(x.dtype)  # (..., N, d)


def rope_frequencies(d: int, base: float = 10000.0, dtype=torch.float64) -> Tensor:
    """(d/2,) angular frequencies base^(-2i/d), i = 0 .. d/2 - 1: pair i turns by
    position · base^(-2i/d) radians. Pair 0 turns by one radian per token, the last pair
    by about 1/base: wavelengths from 2π to about 2π · base tokens."""
    d, base = _check_d(d), _check_base(base)
    i = torch.arange(d // 2, dtype=dtype)  # (d/2,)
    return base ** (-2.0 * i / d)  # (d/2,)


def sinusoidal_positions(N: int, d: int, base: float = 10000.0) -> Tensor:
    """(N, d) float64 sinusoidal encodings of positions 0 .. N-1 (Vaswani et al., 2017):
    column 2i holds sin(p · ω_i), column 2i + 1 holds cos(p · ω_i), ω_i = base^(-2i/d)
    (the frequencies of `rope_frequencies`). Added to X (N, C = d) before the first layer."""
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
        raise ValueError(f"N = {N!r}; expected a positive integer")
    omega = rope_frequencies(d, base)  # (d/2,)
    angle = torch.arange(int(N), dtype=torch.float64)[:, None] * omega[None, :]  # (N, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)  # (N, d)


def rope_permutation(d: int) -> Tensor:
    """(d,) index permutation from the half-split layout to the interleaved one:
    `x[..., rope_permutation(d)]` puts coordinate i at 2i and coordinate i + d/2 at 2i + 1, so
    `rope(x, p)[..., perm] == rope(x[..., perm], p, interleaved=True)`. Applied to the output
    columns of W_Q and W_K, it turns one layout's weights into the other's with equal scores."""
    d = _check_d(d)
    half = torch.arange(d // 2)  # (d/2,)
    return torch.stack([half, half + d // 2], dim=-1).flatten()  # (d,)


def t5_relative_buckets(
    relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each key - query offset (unidirectional, as in a decoder): offsets
    n - m <= 0 only; exact buckets for the first num_buckets/2 distances, then logarithmic
    buckets up to max_distance, and every larger distance shares the last bucket. A learned
    scalar per (bucket, head) is added to the scores: a relative bias that stops growing."""
    if relative_position.is_floating_point():
        raise TypeError(f"relative_position has dtype {relative_position.dtype}; expected integers")
    dist = (-relative_position).clamp(min=0)  # distance back to the key, >= 0
    exact = num_buckets // 2
    log_part = (
        exact
        + (
            torch.log(dist.double().clamp(min=1) / exact)
            / math.log(max_distance / exact)
            * (num_buckets - exact)
        ).long()
    )
    log_part = log_part.clamp(max=num_buckets - 1)
    return torch.where(dist < exact, dist, log_part)


def _check_d(d, name: str = "d") -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2 or d % 2:
        raise ValueError(f"{name} = {d!r}; expected an even integer >= 2 (coordinates in pairs)")
    return int(d)


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"base = {base!r}; expected a number > 1")
    return float(base)


def _check_rope(x, positions, scale, angle_dtype) -> None:
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 2:
        got = (
            f"{x.dtype} tensor of shape {tuple(x.shape)}"
            if isinstance(x, Tensor)
            else type(x).__name__
        )
        raise TypeError(f"x is a {got}; expected a floating-point tensor (..., N, d)")
    _check_d(x.shape[-1], f"x's last dimension d (x has shape {tuple(x.shape)}) d")
    if not isinstance(positions, Tensor):
        raise TypeError(
            f"positions is a {type(positions).__name__}; expected an integer tensor of shape (N,)"
        )
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(
            f"positions has dtype {positions.dtype}; expected an integer dtype (absolute "
            "positions are whole numbers; for position interpolation pass scale=)"
        )
    N = x.shape[-2]
    rows = (x.shape[0], 1) if x.dim() >= 3 else ()  # (B, N) or (1, N) need x (B, ..., N, d)
    batched = positions.dim() == 2 and positions.shape[0] in rows and positions.shape[1] == N
    if positions.shape != (N,) and not batched:
        raise ValueError(
            f"positions has shape {tuple(positions.shape)}; expected (N,) = ({N},), (1, N) or "
            f"(B, N) = ({x.shape[0] if x.dim() >= 3 else 'B'}, {N}) from x's shape "
            f"{tuple(x.shape)}"
        )
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions has a negative entry {int(positions.min())}; expected >= 0")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale = {scale!r}; expected a number > 0")
    if angle_dtype is not None and angle_dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"angle_dtype = {angle_dtype}; expected torch.float32, torch.float64 or None"
        )
