"""A k×k convolution computed as multi-head self-attention over the pixels.

Derived in notebook 07, after the construction of Cordonnier, Loukas and
Jaggi ("On the Relationship between Self-Attention and Convolutional
Layers", ICLR 2020). This module imports torch, so it is imported explicitly
(`from mha_lib.conv import attention_conv2d`); `import mha_lib` stays
numpy-only.

The construction, in the series' notation (pixels are the tokens):
- the H·W pixels of an image x (B, C_in, H, W) become N tokens X (B, N, C_in),
  row by row; pixel n sits at position p_n = (row, column);
- one head per kernel tap: h = k² heads, head i·k + j for tap (i, j), i the
  row of the tap; its shift is Δ_h = (i − k//2, j − k//2) (`kernel_shifts`);
- the content part of every score is switched off (W_Q^h = W_K^h = 0) and
  head h scores key pixel p from query pixel q with the relative positional
  score −κ‖(p − q) − Δ_h‖² (`relative_position_scores`), added as a float
  mask. Its softmax over p puts almost all the weight on p = q + Δ_h: every
  other pixel is at least 1 unit² further away, so it gets at most e^{−κ}
  of the peak's weight;
- values and output projection carry the kernel: W_V^h = weight[:, :, i, j]ᵀ
  (C_in, d_v) with d_v = C_out, and W_O (h·d_v, C_out) stacks h identity
  blocks, so head h contributes x[q + Δ_h] · weight[:, :, i, j]ᵀ to pixel q
  (`conv_weight_to_attention`); the bias of the convolution is W_O's bias;
- zero padding: the keys are the image padded with k//2 zero pixels on every
  side, so a shift that points outside the image finds a zero pixel there.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
import torch.nn.functional as F
from torch import Tensor

from .pytorch import _check_float_tensor, merge_heads, split_heads

__all__ = [
    "KAPPA",
    "attention_conv2d",
    "conv_weight_to_attention",
    "grid_positions",
    "kernel_shifts",
    "macs_attention",
    "macs_construction",
    "macs_conv",
    "relative_position_scores",
]

# Why 40. A query's attention leaks a weight of about 4e^{−κ} to the four
# pixels next to its target (then 4e^{−2κ} to the diagonal ones, ...), so the
# output is off by about 4e^{−κ} times the spread of the values: the relative
# error (max |error| / max |conv output|) falls like e^{−κ} and reaches the
# rounding error of float32 (~1e-7) near κ ≈ 18 and of float64 (~1e-16) near
# κ ≈ 37 (notebook 07 measures it). At κ = 40 the leak, 4e^{−40} ≈ 2e-17, is
# below float64's unit roundoff, so the error is rounding alone, far inside
# the promised 1e-8 (float64) and 1e-4 (float32). Nothing overflows at any
# κ: the peak score is exactly 0 and every other score is negative, so exp
# only underflows, towards exact zeros, which is harmless. Larger κ buys
# nothing but makes the scores of far pixels larger in magnitude.
KAPPA = 40.0


def attention_conv2d(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, kappa: float = KAPPA, pad: bool = True
) -> Tensor:
    """`F.conv2d(x, weight, bias, padding=k // 2)`, computed as multi-head self-attention.

    x (B, C_in, H, W); weight (C_out, C_in, k, k) with k odd; bias None or
    (C_out,). Each of the H·W pixels is a query; the keys and values are the
    pixels of x padded with k//2 zero pixels on every side (pad=True) or of x
    itself (pad=False: a head whose shift points outside the image then puts
    its weight on the nearest pixel inside, which is NOT a convolution's
    zero padding). h = k² heads, one per kernel tap, with the relative
    positional scores of `relative_position_scores` as a float mask and the
    projections of `conv_weight_to_attention`. Returns (B, C_out, H, W).

    Accuracy: with pad=True and the default kappa = KAPPA = 40 (justified
    beside KAPPA), the relative error max |out − conv| / max |conv| is at most
    1e-8 in float64 and 1e-4 in float32 (measured: about 1e-16 and 1e-7).
    A smaller kappa gives an error that falls like e^{−kappa} (about
    5e^{−kappa} on random data: the four pixels next to each target leak a
    weight of about 4e^{−kappa}; notebook 07 measures it).

    Memory: the scores hold k²·(H·W)·(H+2r)(W+2r) numbers (r = k//2), so keep
    images small: this shows a theorem, it is not a fast convolution.
    """
    _check_inputs(x, weight, bias, kappa, pad)
    B, _, H, W = x.shape  # (B, C_in, H, W)
    C_out, _, k, _ = weight.shape
    h, r = k * k, (k // 2 if pad else 0)
    keys = F.pad(x, (r, r, r, r)) if r else x  # (B, C_in, H+2r, W+2r): zero pixels around
    Hk, Wk = keys.shape[2], keys.shape[3]
    X_keys = keys.flatten(2).transpose(1, 2)  # (B, M, C_in), M = (H+2r)(W+2r) pixels
    N, M = H * W, Hk * Wk

    scores = relative_position_scores(
        grid_positions(H, W), grid_positions(Hk, Wk, offset=r), kernel_shifts(k), kappa, x.dtype
    ).to(x.device)  # (h, N, M)
    W_v, W_o = conv_weight_to_attention(weight)  # (C_in, h·d_v), (h·d_v, C_out)
    q = x.new_zeros(B, h, N, 1)  # (B, h, N, d_k): W_Q^h = 0, no content in the scores
    key = x.new_zeros(B, h, M, 1)  # (B, h, M, d_k): W_K^h = 0
    v = split_heads(X_keys @ W_v, h)  # (B, h, M, d_v)
    heads = F.scaled_dot_product_attention(q, key, v, attn_mask=scores[None])  # (B, h, N, d_v)
    out = merge_heads(heads) @ W_o  # (B, N, C_out): Concat(head_1..head_h) W_O
    if bias is not None:
        out = out + bias  # (B, N, C_out)
    return out.transpose(1, 2).reshape(B, C_out, H, W)  # (B, C_out, H, W)


def kernel_shifts(k: int) -> Tensor:
    """(k², 2) int64: the shift Δ_h = (i − k//2, j − k//2) of head h = i·k + j.

    Tap (i, j) of a k×k kernel (i the row) reads the input pixel i − k//2
    rows and j − k//2 columns away from the output pixel, as in
    `torch.nn.functional.conv2d` (a cross-correlation: no kernel flip).
    """
    r = k // 2
    offsets = torch.arange(k) - r  # (k,)
    rows, cols = torch.meshgrid(offsets, offsets, indexing="ij")  # (k, k) each
    return torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=1)  # (k², 2)


def grid_positions(height: int, width: int, offset: int = 0) -> Tensor:
    """(height·width, 2) int64: the (row, column) of each pixel, row by row, minus `offset`.

    With offset = k//2 these are the positions of the padded grid in the
    coordinates of the unpadded image (the first padded row is row −k//2).
    """
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=1) - offset  # (H·W, 2)


def relative_position_scores(
    query_pos: Tensor, key_pos: Tensor, shifts: Tensor, kappa: float, dtype=torch.float64
) -> Tensor:
    """(h, N, M): the score −κ‖(p − q) − Δ_h‖² of key p for query q in head h.

    query_pos (N, 2), key_pos (M, 2), shifts (h, 2), all integer positions.
    The peak score, at p = q + Δ_h, is exactly 0; every other score is ≤ −κ.
    """
    delta = (key_pos[None, :, :] - query_pos[:, None, :]).to(dtype)  # (N, M, 2): p − q
    s = shifts.to(dtype)  # (h, 2)
    dy = delta[None, :, :, 0] - s[:, None, None, 0]  # (h, N, M)
    dx = delta[None, :, :, 1] - s[:, None, None, 1]  # (h, N, M)
    return -kappa * (dy * dy + dx * dx)  # (h, N, M)


def conv_weight_to_attention(weight: Tensor) -> tuple[Tensor, Tensor]:
    """The value and output projections that carry a kernel weight (C_out, C_in, k, k).

    Returns W_v (C_in, h·d_v) and W_o (h·d_v, C_out) with h = k² and
    d_v = C_out: head h = i·k + j owns columns h·d_v:(h+1)·d_v of W_v, which
    hold W_V^h = weight[:, :, i, j]ᵀ (C_in, C_out), and the rows of W_o that
    face it are the identity, so W_V^h W_O^h = weight[:, :, i, j]ᵀ.
    """
    C_out, C_in, k, _ = weight.shape
    h = k * k
    W_v = weight.permute(1, 2, 3, 0).reshape(C_in, h * C_out)  # (C_in, h·d_v), d_v = C_out
    eye = torch.eye(C_out, dtype=weight.dtype, device=weight.device)  # (d_v, C_out)
    W_o = eye.repeat(h, 1)  # (h·d_v, C_out): the identity once per head
    return W_v, W_o


# ---------------------------------------------------------------------------- what each costs


def macs_conv(side: int, C: int, k: int) -> int:
    """Multiply-adds of a k×k convolution, C channels in and out, on a side×side image
    (padded to keep its size): HW·k²C²."""
    return side * side * k * k * C * C


def macs_attention(side: int, C: int, heads: int) -> int:
    """Multiply-adds of content attention over the side×side pixels, `heads` heads of
    d_k = d_v = C/heads, no bias: 4·HW·C² (W_Q, W_K, W_V, W_O) + h·(HW)²·(d_k + d_v)."""
    N = side * side
    return 4 * N * C * C + heads * N * N * 2 * (C // heads)


def macs_construction(side: int, C: int, k: int) -> int:
    """Multiply-adds of `attention_conv2d` (k² heads of d_k = 1, d_v = C) on a side×side image,
    M = (side + 2r)² padded pixels: M·C·k²C (values) + k²·HW·M·(1 + C) (scores and weighted sums)
    + HW·k²C² (W_O). tests/test_conv.py checks all three against torch's FlopCounterMode."""
    N, M, h = side * side, (side + 2 * (k // 2)) ** 2, k * k
    return M * C * h * C + h * N * M * (1 + C) + N * h * C * C


def _check_like(t: Tensor, name: str, x: Tensor) -> None:
    """Raise TypeError unless `t` has the dtype and device of `x`."""
    if t.dtype != x.dtype or t.device != x.device:
        raise TypeError(
            f"{name} has dtype {t.dtype} on {t.device} but x has dtype {x.dtype} on "
            f"{x.device}; expected the same dtype and device"
        )


def _check_inputs(x, weight, bias, kappa, pad) -> None:
    """Validate the arguments of `attention_conv2d`; raise TypeError/ValueError."""
    _check_float_tensor(x, "x")
    if x.dim() != 4 or min(x.shape) < 1:
        raise ValueError(
            f"x has shape {tuple(x.shape)}; expected (B, C_in, H, W) with every size at least 1"
        )
    _check_float_tensor(weight, "weight")
    shape = tuple(weight.shape)
    if weight.dim() != 4 or shape[2] != shape[3] or min(shape) < 1:
        raise ValueError(f"weight has shape {shape}; expected (C_out, C_in, k, k), a square kernel")
    if shape[2] % 2 == 0:
        raise ValueError(
            f"weight has shape {shape}; expected an odd kernel size k, got k = {shape[2]}: an "
            "even kernel has no centre pixel, so padding k//2 would not keep the image size"
        )
    if shape[1] != x.shape[1]:
        raise ValueError(
            f"weight has shape {shape}; expected (C_out, C_in, k, k) with C_in = {x.shape[1]} "
            f"from x of shape {tuple(x.shape)}"
        )
    _check_like(weight, "weight", x)
    if bias is not None:
        _check_float_tensor(bias, "bias")
        if tuple(bias.shape) != (shape[0],):
            raise ValueError(
                f"bias has shape {tuple(bias.shape)}; expected (C_out,) = ({shape[0]},) from "
                f"weight of shape {shape}"
            )
        _check_like(bias, "bias", x)
    if isinstance(kappa, bool) or not isinstance(kappa, Real):
        raise TypeError(f"kappa must be a real number; got {type(kappa).__name__}")
    if not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa must be positive and finite; got {kappa}")
    if not isinstance(pad, bool):
        raise TypeError(f"pad must be True or False; got {type(pad).__name__}")
