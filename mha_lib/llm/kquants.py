"""K-quants: llama.cpp's super-blocks of 256 weights with nested scales, one block by hand.

Derived in notebook 15 (notebook 12 reads the 32-weight formats: Q8_0, Q4_1, Q5_0). A K-quant
cuts each row into super-blocks of 256 weights, and each super-block into sub-blocks that share
a small integer scale; the sub-block scales are themselves scaled by one float16 per
super-block. The scales cost 6 or 8 bits instead of 16, so there can be more of them.

Q4_K, 144 bytes for 256 weights (4.5 bits a weight):
    bytes 0-1    d     float16, the scale of the sub-block scales
    bytes 2-3    dmin  float16, the scale of the sub-block minimums
    bytes 4-15   8 scales sc_j and 8 minimums m_j of 6 bits each, packed in 12 bytes:
                 bytes 0-3 (of the 12): sc_0..sc_3 in their low 6 bits
                 bytes 4-7:             m_0..m_3 in their low 6 bits
                 bytes 8-11:            sc_4..sc_7 in their low nibbles, m_4..m_7 in their high
                                        nibbles; the top 2 bits of each come from the top 2
                                        bits of bytes 0-3 (scales) and 4-7 (minimums)
    bytes 16-143 256 codes q of 4 bits: each group of 32 bytes holds two sub-blocks, the
                 first in its low nibbles, the second in its high nibbles
    w = d · sc_j · q - dmin · m_j          (sub-block j = weight // 32, q in 0..15)

Q6_K, 210 bytes for 256 weights (6.5625 bits a weight): the low 4 bits of each code (128 bytes,
ql), their top 2 bits (64 bytes, qh), 16 signed 8-bit scales (one per 16 weights), and a
float16 d: w = d · scale_i · (q - 32). In each half of 128 weights, ql's 64 bytes give weights
0-63 in their low nibbles and 64-127 in their high nibbles; qh's 32 bytes give, in bit pairs
(0-1, 2-3, 4-5, 6-7), the top bits of weights 0-31, 32-63, 64-95, 96-127.

The plain functions below do one block with numpy, in float32 in the same order as gguf's
`dequantize` (so the results are equal, not close). The rest measures what the sub-block
scales buy: `quantize_q4_k` (a min-max Q4_K quantizer: each sub-block's range, then the 16
scales rounded to 6 bits) against `quantize_one_scale` (the same 4-bit codes with one float16
scale and minimum for all 256 weights), both rounding the same way.

What it holds: `QK_K`, `FORMATS`, `bytes_per_weight(qtype)`; `q4_k_scales(packed)`,
`dequantize_q4_k_block(block)`, `dequantize_q6_k_block(block)`; `quantize_q4_k(w)`,
`quantize_one_scale(w)`, `requantization_errors(w, ways)` and its `WAYS`. Imports numpy and gguf.
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

__all__ = [
    "FORMATS",
    "QK_K",
    "WAYS",
    "bytes_per_weight",
    "dequantize_q4_k_block",
    "dequantize_q6_k_block",
    "q4_k_scales",
    "quantize_one_scale",
    "quantize_q4_k",
    "requantization_errors",
]

QK_K = 256  # weights in a super-block

# (weights per block, bytes per block) of the formats notebooks 12 and 15 meet, from gguf's table
FORMATS: dict[str, tuple[int, int]] = {
    name: tuple(GGML_QUANT_SIZES[GGMLQuantizationType[name]])
    for name in ("F32", "F16", "Q8_0", "Q6_K", "Q5_0", "Q4_K", "Q4_1", "Q4_0")
}


def bytes_per_weight(qtype: str) -> float:
    """Bytes one weight costs in format qtype: bytes per block / weights per block."""
    if qtype not in FORMATS:
        raise ValueError(f"qtype = {qtype!r}; expected one of {', '.join(FORMATS)}")
    weights, nbytes = FORMATS[qtype]
    return nbytes / weights


def _float16(two_bytes: np.ndarray) -> np.float32:
    """A little-endian float16 stored in two bytes, as a float32."""
    return np.frombuffer(two_bytes.tobytes(), dtype="<f2")[0].astype(np.float32)


def _block(block, nbytes: int, name: str) -> np.ndarray:
    block = np.asarray(block)
    if block.dtype != np.uint8 or block.shape != (nbytes,):
        raise ValueError(
            f"block has dtype {block.dtype} and shape {tuple(block.shape)}; expected the "
            f"({nbytes},) uint8 bytes of one {name} super-block"
        )
    return block


def q4_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 sub-block scales and 8 minimums (integers 0..63) packed in Q4_K's 12 bytes."""
    p = np.asarray(packed).astype(np.int64)  # (12,)
    sc, m = np.empty(8, np.int64), np.empty(8, np.int64)
    sc[:4] = p[0:4] & 63  # sub-blocks 0-3: the low 6 bits of bytes 0-3 and 4-7
    m[:4] = p[4:8] & 63
    sc[4:] = (p[8:12] & 15) | ((p[0:4] >> 6) << 4)  # 4-7: a nibble, and 2 bits from above
    m[4:] = (p[8:12] >> 4) | ((p[4:8] >> 6) << 4)
    return sc, m


def dequantize_q4_k_block(block: np.ndarray) -> np.ndarray:
    """The 256 weights (float32) of one Q4_K super-block, its 144 bytes (uint8)."""
    block = _block(block, 144, "Q4_K")
    d, dmin = _float16(block[0:2]), _float16(block[2:4])
    sc, m = q4_k_scales(block[4:16])
    codes = block[16:144]  # (128,) two 4-bit codes a byte
    q = np.empty((8, 32), np.float32)  # (sub-block, weight)
    for g in range(4):  # 32 bytes hold sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles)
        group = codes[32 * g : 32 * (g + 1)]
        q[2 * g] = group & 0x0F
        q[2 * g + 1] = group >> 4
    scale = (d * sc.astype(np.float32))[:, None]  # (8, 1)
    offset = (dmin * m.astype(np.float32))[:, None]  # (8, 1)
    return (scale * q - offset).reshape(256)


def dequantize_q6_k_block(block: np.ndarray) -> np.ndarray:
    """The 256 weights (float32) of one Q6_K super-block, its 210 bytes (uint8)."""
    block = _block(block, 210, "Q6_K")
    ql, qh = block[0:128], block[128:192]  # low 4 bits, top 2 bits of the codes
    scales = block[192:208].view(np.int8).astype(np.float32)  # (16,) one per 16 weights
    d = _float16(block[208:210])
    q = np.empty((2, 4, 32), np.int64)  # (half, quarter, weight)
    for h in range(2):
        lo, hi = ql[64 * h : 64 * (h + 1)], qh[32 * h : 32 * (h + 1)]
        q[h, 0] = (lo[:32] & 15) | (((hi >> 0) & 3) << 4)
        q[h, 1] = (lo[32:] & 15) | (((hi >> 2) & 3) << 4)
        q[h, 2] = (lo[:32] >> 4) | (((hi >> 4) & 3) << 4)
        q[h, 3] = (lo[32:] >> 4) | (((hi >> 6) & 3) << 4)
    q = (q.reshape(16, 16) - 32).astype(np.float32)  # (scale group, weight), centred
    return ((d * scales)[:, None] * q).reshape(256)


# ------------------------------------------------------------------ what the sub-block scales buy


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """Q4_K bytes (n, 144) of weights w (n, 256), by min-max: each sub-block's range sets its
    scale and minimum, which are rounded to 6 bits against d and dmin (float16), and each weight
    to the nearest code of its rounded grid. (llama.cpp searches for better scales; this is the
    simplest Q4_K, and `quantize_one_scale` rounds the same way.)"""
    w = np.asarray(w, dtype=np.float32)
    n = w.shape[0]
    x = w.reshape(n, 8, 32)  # (block, sub-block, weight)
    lo = np.minimum(x.min(-1), 0)  # (n, 8): the minimum is never above 0
    scale, minimum = (x.max(-1) - lo) / 15, -lo  # (n, 8) each, >= 0
    d = (scale.max(-1) / 63).astype(np.float16)  # (n,)
    dmin = (minimum.max(-1) / 63).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.round(scale / d32), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dmin32 > 0, np.round(minimum / dmin32), 0).clip(0, 63).astype(np.uint8)
        step = (d32 * sc)[..., None]  # (n, 8, 1): the grids as dequantization will see them
        q = np.where(step > 0, np.round((x + (dmin32 * m)[..., None]) / step), 0)
    q = q.clip(0, 15).astype(np.uint8)  # (n, 8, 32)
    packed = np.empty((n, 12), np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    codes = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, 128)  # sub-blocks 2g, 2g + 1 share bytes
    return np.concatenate(
        [d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), packed, codes], axis=1
    )


def quantize_one_scale(w: np.ndarray) -> np.ndarray:
    """w (n, 256) rounded to 4-bit codes with ONE float16 scale and minimum per 256 weights
    (4.125 bits a weight), min-max as `quantize_q4_k`; returns the dequantized weights."""
    w = np.asarray(w, dtype=np.float32)
    lo = np.minimum(w.min(-1, keepdims=True), 0)  # (n, 1)
    d = ((w.max(-1, keepdims=True) - lo) / 15).astype(np.float16).astype(np.float32)
    lo = lo.astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.round((w - lo) / d), 0).clip(0, 15)
    return d * q + lo


WAYS = ("one scale per 256", "Q4_K", "Q4_1")  # the ways `requantization_errors` measures


def requantization_errors(w: np.ndarray, ways=WAYS) -> dict[str, float]:
    """RMS error of w re-quantized three ways, each divided by the RMS of w: one scale per 256
    weights, Q4_K (8 six-bit scales and minimums per 256), and Q4_1 (a float16 scale and
    minimum per 32, gguf's quantizer); `ways` picks some of them (`WAYS`). w is cut into blocks
    of 256 consecutive weights (row by row; a block crosses rows when a row's length is not a
    multiple of 256, which a K-quant's never is)."""
    w = np.asarray(w, dtype=np.float32)
    if w.size == 0 or w.size % QK_K:
        raise ValueError(f"w has shape {w.shape}; expected a number of weights divisible by 256")
    bad = [way for way in ways if way not in WAYS]
    if bad:
        raise ValueError(f"ways holds {bad[0]!r}; expected some of {WAYS}")
    blocks = w.reshape(-1, QK_K)  # (n, 256)
    rms = float(np.sqrt(np.mean(blocks.astype(np.float64) ** 2)))
    requantize = {
        "one scale per 256": lambda: quantize_one_scale(blocks),
        "Q4_K": lambda: dequantize(quantize_q4_k(blocks), GGMLQuantizationType.Q4_K).reshape(
            -1, QK_K
        ),
        "Q4_1": lambda: dequantize(
            quantize(blocks, GGMLQuantizationType.Q4_1), GGMLQuantizationType.Q4_1
        ),
    }
    out = {}
    for way in ways:
        a = requantize[way]()
        out[way] = float(np.sqrt(np.mean((a.astype(np.float64) - blocks) ** 2))) / rms
    return out
