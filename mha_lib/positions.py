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

A model trained on short texts is stretched to longer ones by slowing RoPE's pairs down: each
scaling gives (d/2,) factors that divide the frequencies base^(-2i/d) (pass
`rope_frequencies(d, base) / factors` as `rope(..., frequencies=)`), as transformers' configs
(`rope_type`) and llama.cpp's GGUF files (`rope.scaling.type`) name them:
- `linear_frequency_factors`: every pair by the same factor (position interpolation, Chen et al.
  2023; Gemma 3's global layers);
- `llama3_frequency_factors`: Llama 3.1's, the fast pairs kept, the slow ones divided, a smooth
  blend between;
- `yarn_frequency_factors`: YaRN's (Peng et al. 2023; Qwen2.5, Qwen3, DeepSeek-V3), a linear
  ramp between kept and divided pairs, and a factor on the scores.
Notebook 10 (§6) derives the linear one (position interpolation), notebook 11 YaRN
(DeepSeek-V3's), notebook 15 reads the scalings a GGUF file holds. Each equals transformers'
`ROPE_INIT_FUNCTIONS` (tests/test_positions.py).

Notation (notebook 00's table): X (N, C), one head's queries and keys (N, d_k), values (N, d_v),
h heads; `rope` takes any (..., N, d) with d = d_k even, e.g. (B, h, N, d_k). Imports torch (the
three scalings are plain Python).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ._checks import check_int

__all__ = [
    "linear_frequency_factors",
    "llama3_frequency_factors",
    "rope",
    "rope_frequencies",
    "rope_permutation",
    "sinusoidal_positions",
    "t5_relative_buckets",
    "yarn_frequency_factors",
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


def linear_frequency_factors(dim: int, factor: float) -> tuple[float, ...]:
    """(dim/2,) factors dividing RoPE's frequencies for a linear scaling (transformers'
    `rope_type` "linear", a GGUF file's `rope.scaling.type` "linear"): every pair turns `factor`
    times more slowly, as if each position were divided by factor (position interpolation,
    Chen et al. 2023, the same rotation as `rope(..., scale=1 / factor)`). Gemma 3 4B to 27B
    stretch their global layers by 8. dim: the rotated dimensions of a head (d_k, or RoPE's part
    of it)."""
    dim, factor = _check_d(dim, "dim"), _check_positive(factor, "factor")
    return (factor,) * (dim // 2)


def llama3_frequency_factors(
    dim: int,
    base: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_context_length: int,
) -> tuple[float, ...]:
    """(dim/2,) factors dividing RoPE's frequencies ω_i = base^(-2i/dim) for Llama 3.1's scaling
    (transformers' `rope_type` "llama3"; a GGUF file stores them as the tensor
    `rope_freqs.weight`). Llama 3.1 and 3.2: base 500,000, factor 8 (32 for 3.2), low_freq_factor
    1, high_freq_factor 4, original_context_length 8192.

    Pair i makes r_i = original_context_length · ω_i / 2π turns within the original context:
    - r_i > high_freq_factor: kept (factor 1): training showed it every angle, several times;
    - r_i < low_freq_factor: divided by `factor` (interpolated, as `linear_frequency_factors`);
    - between, a blend of the two frequencies, s = (r_i - low_freq_factor) / (high_freq_factor -
      low_freq_factor) of the kept one: ω_i' = ω_i ((1 - s) / factor + s), factor 1 / ((1 - s) /
      factor + s).
    """
    dim, base = _check_d(dim, "dim"), _check_base(base)
    factor = _check_positive(factor, "factor")
    low = _check_positive(low_freq_factor, "low_freq_factor")
    high = _check_positive(high_freq_factor, "high_freq_factor")
    if not low < high:
        raise ValueError(
            f"low_freq_factor = {low_freq_factor!r}, high_freq_factor = {high_freq_factor!r}; "
            "expected low_freq_factor < high_freq_factor (turns within the original context "
            "below which a pair is divided, above which it is kept)"
        )
    original = check_int(original_context_length, "original_context_length")
    factors = []  # (dim/2,)
    for i in range(dim // 2):
        omega = 1.0 / base ** (2 * i / dim)
        turns = original * omega / (2 * math.pi)  # r_i: turns within the original context
        s = min(max((turns - low) / (high - low), 0.0), 1.0)  # 0: divided, 1: kept
        factors.append(1.0 / ((1 - s) / factor + s))
    return tuple(factors)


def yarn_frequency_factors(
    dim: int,
    base: float,
    factor: float,
    original_context_length: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
    *,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
) -> tuple[tuple[float, ...], float]:
    """YaRN (Peng et al. 2023), as transformers computes it (`rope_type` "yarn"): (dim/2,)
    factors dividing RoPE's frequencies ω_i = base^(-2i/dim), and the attention factor.
    Qwen2.5 and Qwen3 stretch 32,768 tokens by factor 4 (base 10^6); DeepSeek-V3 4096 by 40.

    Pair i turns r_i = original_context_length · ω_i / 2π times within the original context.
    The pairs that turn more than beta_fast times are kept, those that turn fewer than
    beta_slow times are divided by `factor`, with a linear ramp in the pair index between:
    - the correction range: the (fractional) pair index at which r = beta, dim · ln(original /
      (2π beta)) / (2 ln base), for beta_fast (low) and beta_slow (high); rounded outwards
      (floor, ceil) when `truncate`; then clipped to [0, dim - 1] (dim - 1 though the last pair
      is dim/2 - 1, as transformers and llama.cpp clip), and high = low + 0.001 when they meet;
    - ramp_i = (i - low) / (high - low) clipped to [0, 1] (0: kept, 1: divided), the frequency
      ω_i (1 - ramp_i + ramp_i / factor), so the factor 1 / (1 - ramp_i + ramp_i / factor).

    attention_factor, returned: the one given, else (DeepSeek's form, when both mscale and
    mscale_all_dim are given) m(mscale) / m(mscale_all_dim) with m(s) = 0.1 · s · ln(factor) + 1,
    else 0.1 · ln(factor) + 1 (1 when factor <= 1). transformers multiplies RoPE's cos and sin by
    it, so the rotated query and key are both scaled: every score q·k is multiplied by
    attention_factor² (when RoPE turns all of d_k; with partial RoPE only the rotated part's
    share of the score). DeepSeek's attention also multiplies its softmax scale by
    m(mscale_all_dim)², which is not RoPE's (`mha_lib.efficient.mla.yarn`).
    """
    dim, base = _check_d(dim, "dim"), _check_base(base)
    factor = _check_positive(factor, "factor")
    original = check_int(original_context_length, "original_context_length")
    fast, slow = _check_positive(beta_fast, "beta_fast"), _check_positive(beta_slow, "beta_slow")
    if not fast > slow:
        raise ValueError(
            f"beta_fast = {beta_fast!r}, beta_slow = {beta_slow!r}; expected beta_fast > "
            "beta_slow (turns within the original context above which a pair is kept, below "
            "which it is divided)"
        )
    if not isinstance(truncate, bool):
        raise TypeError(f"truncate is a {type(truncate).__name__}; expected True or False")
    if attention_factor is not None:
        attention_factor = _check_positive(attention_factor, "attention_factor")
    if mscale is not None:
        mscale = _check_positive(mscale, "mscale")
    if mscale_all_dim is not None:
        mscale_all_dim = _check_positive(mscale_all_dim, "mscale_all_dim")

    def index_of(turns: float) -> float:  # the pair index that turns `turns` times in original
        return dim * math.log(original / (2 * math.pi * turns)) / (2 * math.log(base))

    low, high = index_of(fast), index_of(slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    factors = []  # (dim/2,)
    for i in range(dim // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)  # 0: kept, 1: divided by factor
        factors.append(1.0 / (1 - ramp + ramp / factor))
    if attention_factor is None:
        if mscale is not None and mscale_all_dim is not None:
            attention_factor = _yarn_m(factor, mscale) / _yarn_m(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_m(factor, 1.0)
    return tuple(factors), float(attention_factor)


def _yarn_m(factor: float, mscale: float) -> float:
    """YaRN's magnitude 0.1 · mscale · ln(factor) + 1 (1 when factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _check_d(d, name: str = "d") -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2 or d % 2:
        raise ValueError(f"{name} = {d!r}; expected an even integer >= 2 (coordinates in pairs)")
    return int(d)


def _check_positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} is a {type(value).__name__}; expected a number > 0")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} = {value!r}; expected a finite number > 0")
    return float(value)


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
