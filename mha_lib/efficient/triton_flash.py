"""FlashAttention as a Triton kernel: forward, backward, and two warm-up kernels.

Derived in notebook 09, from notebook 08's plain-torch loop (`mha_lib.nn.flash`).
This module imports torch and triton, so it is imported explicitly
(`from mha_lib.efficient.triton_flash import ...`); `import mha_lib` stays numpy-only.
Triton ships wheels for Linux x86_64 only; elsewhere importing this module raises
ImportError.

Where the kernels run. A Triton kernel is compiled for a GPU. With the
environment variable `TRITON_INTERPRET=1` set *before* the kernels are decorated,
Triton instead runs each program instance one after the other on CPU tensors,
with numpy: slow, but every learner can run and test the kernels. The variable
must be set before triton itself is imported (triton's own helpers such as `tl.max`
are kernels too). This module decides once, as it is imported, before it imports
triton (and refuses, with an ImportError saying why, if triton was imported
already without the variable on a machine that needs the interpreter):
- `TRITON_INTERPRET` already set in the environment: that choice is kept;
- otherwise, if `MHA_LIB_DEVICE=cpu` is set or no CUDA device is present, it
  sets `TRITON_INTERPRET=1` (the interpreter);
- otherwise the kernels are compiled for the GPU.
`INTERPRETED` says which; `DEVICE` is where the tensors must live ("cpu" under
the interpreter, "cuda" otherwise). The interpreter has no bfloat16 arithmetic:
under it only float32 and float16 are accepted.

What it holds:
- `vector_add(x, y)` and `row_softmax(x)`: the programming model in two kernels;
- `triton_attention_forward(q, k, v, causal=None, ...)` -> (o, lse);
- `triton_attention_backward(do, q, k, v, o, lse, causal=None, ...)` -> (dq, dk, dv),
  the split of the Triton tutorial's fused attention, as three launches (`_backward`): a
  pre-pass for D = rowsum(dO ∘ O), one kernel that owns a block of keys (dk, dv), one
  that owns a block of queries (dq), which computes each tile's weights a second time.
  FlashAttention-2's own kernels instead run one key-parallel kernel that adds dq into
  a float32 buffer with atomic adds; notebook 09 writes that kernel out and compares;
- `backward_cost(N, M, d, causal, block_q, block_k, design)`: the matrix-product FLOPs,
  exponentials and HBM bytes of a backward pass of either design ("split", "atomic"),
  counted tile by tile;
- `triton_attention(q, k, v, causal=None, ...)` -> (o, lse), differentiable in q, k, v
  (a `torch.autograd.Function`);
- `causal_key_end(start_q, block_q, N, M, causal)`: where a causal query block's
  loop over keys stops (one past the last key it may see), the bound of the forward
  and dq kernels (defined in `flash`, which notebook 08 imports without triton);
  `causal_query_start(start_k, block_q, N, M, causal)`: where a key block's loop over
  queries starts, the bound of the dkdv kernel;
- `tiles_per_program`, `tiles_visited` and `tiles_loaded(N, M, causal, block_q,
  block_k, kernel)`: the tiles each kernel ("forward", "dkdv", "dq") visits, counted by
  the kernel itself: per program, in all, and as a (query block, key block) grid
  holding the step of the owner's loop at which each tile is loaded;
- `default_blocks(d, kernel, interpreted)`: the block sizes the kernels use when none
  are given (16 × 16 under the interpreter; on a GPU 128 × 64 forward at d <= 64).

Shapes: q (B, h, N, d), k and v (B, h, M, d), d in {16, 32, 64, 128}; o (B, h, N, d),
lse (B, h, N). `causal`: None (no mask), "top_left" (query i sees keys 0 .. i, what
`F.scaled_dot_product_attention(is_causal=True)` does) or "bottom_right" (query i
sees keys 0 .. i + M - N: the N queries are the last N of the M tokens, a chunk
against a KV cache, notebook 08). A query that may see no key at all (bottom_right
with N > M) gets a zero output, lse = -inf and zero gradients.
"""

from __future__ import annotations

import math
import os
import sys


def _want_interpreter() -> bool:
    """True when the kernels must run in Triton's interpreter (see the docstring)."""
    if "TRITON_INTERPRET" in os.environ:
        return os.environ["TRITON_INTERPRET"] not in ("", "0")
    if os.environ.get("MHA_LIB_DEVICE", "").lower() == "cpu":
        return True
    import torch

    return not torch.cuda.is_available()


if _want_interpreter() and os.environ.get("TRITON_INTERPRET", "") in ("", "0"):
    if "triton" in sys.modules:  # its own helpers (tl.max, ...) were built for a GPU
        raise ImportError(
            "triton was imported before mha_lib.efficient.triton_flash, without "
            "TRITON_INTERPRET=1, on a machine that needs the interpreter: import "
            "mha_lib.efficient.triton_flash first, "
            "or set TRITON_INTERPRET=1 in the environment"
        )
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from torch import Tensor  # noqa: E402

from .._checks import check_int  # noqa: E402
from ..nn.flash import causal_key_end  # noqa: E402  (pure Python, shared with notebook 08)

INTERPRETED = os.environ.get("TRITON_INTERPRET", "") not in ("", "0")
DEVICE = "cpu" if INTERPRETED else "cuda"
HEAD_DIMS = (16, 32, 64, 128)
CAUSAL = (None, "top_left", "bottom_right")
LOG2E = 1.4426950408889634  # exp(x) = exp2(x · log2 e): exp2 is the GPU's native instruction

__all__ = [
    "BACKWARD_DESIGNS",
    "CAUSAL",
    "DEVICE",
    "HEAD_DIMS",
    "INTERPRETED",
    "KERNELS",
    "backward_cost",
    "causal_key_end",
    "causal_query_start",
    "default_blocks",
    "row_softmax",
    "tiles_loaded",
    "tiles_per_program",
    "tiles_visited",
    "triton_attention",
    "triton_attention_backward",
    "triton_attention_forward",
    "vector_add",
]


# ----------------------------------------------------------------------------
# the programming model: a vector add and a row softmax


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # which block of BLOCK elements this program instance owns
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) element indices
    inside = offs < n  # the last block may run past the end
    x = tl.load(x_ptr + offs, mask=inside)
    y = tl.load(y_ptr + offs, mask=inside)
    tl.store(out_ptr + offs, x + y, mask=inside)


def vector_add(x: Tensor, y: Tensor, block: int = 64) -> Tensor:
    """x + y for two contiguous 1-d tensors of one size, one program per block."""
    _check_tensor(x, "x", 1)
    if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device:
        raise ValueError(
            f"y is {tuple(y.shape)} {y.dtype}; expected x's {tuple(x.shape)} {x.dtype}"
        )
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # one program instance per row
    cols = tl.arange(0, BLOCK)  # (BLOCK,) BLOCK is a power of two >= n_cols
    inside = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=inside, other=-float("inf"))
    x = x - tl.max(x, axis=0)  # the padding stays -inf and adds exp(-inf) = 0 below
    e = tl.exp(x)
    tl.store(out_ptr + row * stride_row + cols, e / tl.sum(e, axis=0), mask=inside)


def row_softmax(x: Tensor) -> Tensor:
    """softmax over the last axis of a 2-d tensor (R, C), one program per row."""
    _check_tensor(x, "x", 2)
    x = x.contiguous()
    out = torch.empty_like(x)
    R, C = x.shape
    _softmax_kernel[(R,)](x, out, C, x.stride(0), BLOCK=triton.next_power_of_2(C))
    return out


# ----------------------------------------------------------------------------
# which tiles the kernels visit, counted by the kernels themselves


def _offset(N: int, M: int, causal: str | None) -> int:
    """Query i may see keys j <= i + offset (causal); 0 top-left, M - N bottom-right."""
    return M - N if causal == "bottom_right" else 0


def causal_query_start(start_k: int, block_q: int, N: int, M: int, causal: str | None) -> int:
    """Where the dK/dV kernel's loop over query blocks starts for the key block that begins
    at start_k: the start of the first query block with a row that may see key start_k (0
    when not causal; N or more when no query sees it, and the loop visits nothing)."""
    if causal is None:
        return 0
    return max(0, start_k - _offset(N, M, causal)) // block_q * block_q


KERNELS = ("forward", "dkdv", "dq")


def tiles_per_program(
    N: int,
    M: int,
    causal: str | None = None,
    block_q: int = 16,
    block_k: int = 16,
    kernel: str = "forward",
) -> list[int]:
    """How many tiles each program instance of a kernel visits, counted by the kernel itself
    under its own loop bounds (B = h = 1, d = 16, zeros as input).

    kernel: "forward" and "dq" have one program per query block (a list of cdiv(N,
    block_q)), walking along the key blocks; "dkdv" has one per key block (cdiv(M,
    block_k)), walking down the query blocks.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got {kernel!r}")
    if causal not in CAUSAL:
        raise ValueError(f"causal must be one of {CAUSAL}; got {causal!r}")
    q = torch.zeros(1, 1, N, 16, device=DEVICE)
    k = torch.zeros(1, 1, M, 16, device=DEVICE)
    n_q, n_k = triton.cdiv(N, block_q), triton.cdiv(M, block_k)
    counts = {
        "forward": torch.zeros(n_q, dtype=torch.int32, device=DEVICE),
        "dq": torch.zeros(n_q, dtype=torch.int32, device=DEVICE),
        "dkdv": torch.zeros(n_k, dtype=torch.int32, device=DEVICE),
    }
    if kernel == "forward":
        _forward(q, k, k, causal, block_q, block_k, counts=counts["forward"])
    else:
        lse = torch.zeros(1, 1, N, device=DEVICE)
        _backward(q, q, k, k, q, lse, causal, block_q, block_k, counts=counts)
    return [int(c) for c in counts[kernel]]


def tiles_visited(
    N: int,
    M: int,
    causal: str | None = None,
    block_q: int = 16,
    block_k: int = 16,
    kernel: str = "forward",
) -> int:
    """How many (query block, key block) tiles a kernel visits, counted by the kernel
    itself under its own loop bounds (the sum of `tiles_per_program`)."""
    return sum(tiles_per_program(N, M, causal, block_q, block_k, kernel))


def tiles_loaded(
    N: int,
    M: int,
    causal: str | None = None,
    block_q: int = 16,
    block_k: int = 16,
    kernel: str = "forward",
) -> np.ndarray:
    """(query blocks, key blocks) ints: 0 for a tile the kernel never loads, else the step
    of its owner's loop at which it is loaded (1, 2, ...).

    From the kernel's own counts and the shape of its loop: a "forward" or "dq" program
    (a row of tiles) walks the key blocks from the first; a "dkdv" program (a column)
    walks the query blocks down to the last.
    """
    counts = tiles_per_program(N, M, causal, block_q, block_k, kernel)
    grid = np.zeros((triton.cdiv(N, block_q), triton.cdiv(M, block_k)), dtype=int)
    for program, n in enumerate(counts):
        if kernel == "dkdv":  # column `program`, its last n query blocks, top to bottom
            grid[grid.shape[0] - n :, program] = np.arange(1, n + 1)
        else:  # row `program`, its first n key blocks, left to right
            grid[program, :n] = np.arange(1, n + 1)
    return grid


BACKWARD_DESIGNS = ("split", "atomic")


def backward_cost(
    N: int,
    M: int,
    d: int,
    causal: str | None = None,
    block_q: int = 16,
    block_k: int = 16,
    design: str = "split",
    bytes_per_number: int = 2,
) -> dict[str, int]:
    """What one backward pass does, for one (batch, head), counted tile by tile over the
    tiles the kernels visit (the loop bounds `causal_key_end` and `causal_query_start`):
    "flops", the matrix products' floating-point operations (2 per multiply-add); "exps",
    the weights P = exp(S - L) computed; "bytes" read from and written to HBM; "launches".

    design="split": this module's kernels, the split of the Triton tutorial's fused
    attention. The pre-pass reads O and dO and writes D. The dK/dV kernel loads K_j and
    V_j once per key block, then Q_i, dO_i, L_i, D_i for every query block its loop
    visits, and stores dK_j, dV_j; 4 products per tile (S, dV, dP, dK). The dQ kernel loads
    Q_i, dO_i, L_i, D_i once per query block, then K_j and V_j for every key block it
    visits, and stores dQ_i; 3 products per tile (S, dP, dQ): S, P, dP and dS are computed
    a second time.
    design="atomic": FlashAttention-2's (the flash-attention repository's CUDA kernels).
    The pre-pass also zeroes a float32 dQ buffer (N·d·4 bytes); one key-parallel kernel
    loads and stores what the dK/dV kernel does and, for every tile, adds its (rows, d)
    share of dQ into the buffer with atomic adds, a float32 read and write of each number
    (8 bytes); a last kernel reads the buffer and writes dQ in the inputs' type. 5 products
    per tile, each weight computed once.

    L and D are float32 (4 bytes each) whatever the inputs' type; bytes_per_number is that
    type's size (2 for float16 and bfloat16, 4 for float32). Only the live rows and keys of
    a tile count, for bytes and FLOPs alike. Caches between HBM and the chip (a GPU's L2,
    where atomics are resolved) are not modelled: this is what the kernels ask for.
    """
    for name, value in (
        ("N", N),
        ("M", M),
        ("d", d),
        ("block_q", block_q),
        ("block_k", block_k),
        ("bytes_per_number", bytes_per_number),
    ):
        check_int(value, name)
    if design not in BACKWARD_DESIGNS:
        raise ValueError(f"design must be one of {BACKWARD_DESIGNS}; got {design!r}")
    if causal not in CAUSAL:
        raise ValueError(f"causal must be one of {CAUSAL}; got {causal!r}")
    e, f32 = bytes_per_number, 4
    pairs = 0  # (query, key) pairs of the tiles the key-owning loop visits, live ones only
    key_side = 0  # bytes of the key-owning loop: K, V in and dK, dV out, Q, dO, L, D per tile
    for start_k in range(0, M, block_k):
        keys = min(block_k, M - start_k)
        key_side += 4 * keys * d * e
        for start_q in range(causal_query_start(start_k, block_q, N, M, causal), N, block_q):
            rows = min(block_q, N - start_q)
            pairs += rows * keys
            key_side += 2 * rows * d * e + 2 * rows * f32
            if design == "atomic":  # dQ_i += dS K_j into the float32 buffer: read and write
                key_side += 2 * rows * d * f32
    prepass = 2 * N * d * e + N * f32  # O and dO in, D out
    if design == "atomic":
        extra = N * d * f32 + (N * d * f32 + N * d * e)  # zero the buffer; convert it to dQ
        return dict(
            flops=5 * 2 * pairs * d, exps=pairs, bytes=prepass + key_side + extra, launches=3
        )
    query_side, pairs_q = 0, 0  # the dQ kernel: Q, dO, L, D in, dQ out once; K, V per tile
    for start_q in range(0, N, block_q):
        rows = min(block_q, N - start_q)
        query_side += 3 * rows * d * e + 2 * rows * f32
        for start_k in range(0, causal_key_end(start_q, block_q, N, M, causal), block_k):
            keys = min(block_k, M - start_k)
            pairs_q += rows * keys
            query_side += 2 * keys * d * e
    return dict(
        flops=2 * (4 * pairs + 3 * pairs_q) * d,
        exps=pairs + pairs_q,
        bytes=prepass + key_side + query_side,
        launches=3,
    )


def default_blocks(d: int, kernel: str = "forward", interpreted: bool | None = None) -> tuple:
    """(block_q, block_k) the kernels use when none are given: 16 × 16 under the
    interpreter (fast on small inputs); on a GPU chosen from d, larger for the forward
    pass, whose program keeps only one Q tile and its accumulator on chip.

    interpreted: None for this machine's choice (`INTERPRETED`).
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got {kernel!r}")
    if INTERPRETED if interpreted is None else interpreted:
        return (16, 16)
    if kernel == "forward":
        return (128, 64) if d <= 64 else (128, 32)
    return (64, 64) if d <= 64 else (32, 64)


# ----------------------------------------------------------------------------
# forward kernel


@triton.jit
def _fwd_kernel(
    Q, K, V, O, L, TILES,  # pointers; TILES: tiles visited per query block (if COUNT)
    stride_qb, stride_qh, stride_qn,  # the last stride of q, k, v, o is 1 (contiguous)
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    h, N, M, offset, qk_scale,  # qk_scale = log2(e) / sqrt(d)
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    IS_CAUSAL: tl.constexpr, COUNT: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip  # a row of arguments per tensor
    pid_q = tl.program_id(0)  # which block of queries
    pid_bh = tl.program_id(1)  # which (batch, head)
    b, hh = pid_bh // h, pid_bh % h
    rows = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,) query indices
    cols = tl.arange(0, D)  # (D,) features
    Q = Q + b * stride_qb + hh * stride_qh
    K = K + b * stride_kb + hh * stride_kh
    V = V + b * stride_vb + hh * stride_vh
    q = tl.load(Q + rows[:, None] * stride_qn + cols[None, :], mask=rows[:, None] < N, other=0.0)
    m_i = tl.full((BLOCK_Q,), -float("inf"), tl.float32)  # running max (log2 units)
    l_i = tl.zeros((BLOCK_Q,), tl.float32)  # running sum of exp2(score - m)
    acc = tl.zeros((BLOCK_Q, D), tl.float32)  # running sum of exp2(score - m) v
    k_end = M
    if IS_CAUSAL:  # keys after the block's last row + offset are every row's future
        k_end = tl.maximum(0, tl.minimum(M, tl.minimum((pid_q + 1) * BLOCK_Q, N) + offset))
    n_tiles = 0
    for start_k in range(0, k_end, BLOCK_K):
        keys = start_k + tl.arange(0, BLOCK_K)  # (BLOCK_K,) key indices
        k = tl.load(
            K + keys[:, None] * stride_kn + cols[None, :], mask=keys[:, None] < M, other=0.0
        )
        v = tl.load(
            V + keys[:, None] * stride_vn + cols[None, :], mask=keys[:, None] < M, other=0.0
        )
        s = (
            tl.dot(q, tl.trans(k), input_precision=PREC) * qk_scale
        )  # (BLOCK_Q, BLOCK_K) one tile of scores
        seen = keys[None, :] < M  # (1, BLOCK_K): keys past the end do not exist
        if IS_CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + offset)  # (BLOCK_Q, BLOCK_K)
        s = tl.where(seen, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # (BLOCK_Q,)
        m_use = tl.where(m_new == -float("inf"), 0.0, m_new)  # a row that saw nothing yet
        alpha = tl.exp2(m_i - m_use)  # what was summed so far used the old max
        p = tl.exp2(s - m_use[:, None])  # (BLOCK_Q, BLOCK_K)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)  # (BLOCK_Q, D)
        m_i = m_new
        n_tiles += 1
    empty = l_i == 0.0  # a row that may see no key at all: output 0, lse -inf
    o = acc / tl.where(empty, 1.0, l_i)[:, None]  # (BLOCK_Q, D)
    lse = tl.where(
        empty, -float("inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) / 1.4426950408889634
    )
    O = O + b * stride_ob + hh * stride_oh
    tl.store(
        O + rows[:, None] * stride_on + cols[None, :],
        o.to(O.dtype.element_ty),
        mask=rows[:, None] < N,
    )
    tl.store(L + pid_bh * N + rows, lse, mask=rows < N)  # L is (B·h, N) contiguous
    if COUNT:
        tl.store(TILES + pid_q, n_tiles)


def _forward(q, k, v, causal, block_q, block_k, counts=None):
    B, h, N, d = q.shape
    M = k.shape[2]
    o = torch.empty_like(q)  # (B, h, N, d)
    lse = torch.empty(B, h, N, device=q.device, dtype=torch.float32)  # (B, h, N)
    grid = (triton.cdiv(N, block_q), B * h)
    _fwd_kernel[grid](
        q, k, v, o, lse, counts if counts is not None else lse,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        h, N, M, _offset(N, M, causal), LOG2E / math.sqrt(d),
        D=d, BLOCK_Q=block_q, BLOCK_K=block_k,
        IS_CAUSAL=causal is not None, COUNT=counts is not None, PREC=_precision(q),
        **_launch_options(d, block_q),
    )  # fmt: skip  # the kernel signature's rows
    return o, lse


def triton_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: str | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / √d) v by the Triton kernel; returns (o (B, h, N, d), lse (B, h, N)).

    The default blocks are 16 × 16 under the interpreter (fast on small inputs) and
    chosen from d on a GPU.
    """
    q, k, v = _check_inputs(q, k, v, causal)
    block_q, block_k = _blocks(q.shape[-1], block_q, block_k, "fwd")
    return _forward(q, k, v, causal, block_q, block_k)


# ----------------------------------------------------------------------------
# backward kernels, the Triton tutorial's split: D = rowsum(dO ∘ O), then dk and dv per
# key block, then dq per query block; each tile's weights rebuilt from q, k and lse (twice:
# once per gradient kernel; FlashAttention-2 rebuilds them once and adds dq atomically)


@triton.jit
def _bwd_preprocess(O, DO, Delta, n_rows, D: tl.constexpr, BLOCK: tl.constexpr):
    # O and dO seen as (B·h·N, D) rows: one program per BLOCK rows, one number out per row
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    cols = tl.arange(0, D)  # (D,)
    inside = rows[:, None] < n_rows  # the last block may run past the last row
    o = tl.load(O + rows[:, None] * D + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    do = tl.load(DO + rows[:, None] * D + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    tl.store(Delta + rows, tl.sum(o * do, axis=1), mask=rows < n_rows)  # D_i = dO_i · O_i


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, DO, L, Delta, DK, DV, TILES,  # contiguous (B·h, N or M, D), (B·h, N); TILES: counts
    N, M, offset, sm_scale,  # causal: query i sees key j when j <= i + offset; 1/sqrt(d)
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, IS_CAUSAL: tl.constexpr,
    COUNT: tl.constexpr,  # count the query tiles visited (for ta.tiles_loaded), else nothing
    PREC: tl.constexpr,  # "ieee": float32 products in full float32, not TF32
):  # fmt: skip  # a row of arguments per kind
    pid_k = tl.program_id(0)  # (1) this program owns one block of keys ...
    pid_bh = tl.program_id(1)  # ... of one (batch, head)
    keys = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)  # (BLOCK_K,)
    cols = tl.arange(0, D)
    Q, DO = Q + pid_bh * N * D, DO + pid_bh * N * D
    K, V = K + pid_bh * M * D, V + pid_bh * M * D
    L, Delta = L + pid_bh * N, Delta + pid_bh * N
    kv_mask = keys[:, None] < M
    k = tl.load(K + keys[:, None] * D + cols[None, :], mask=kv_mask, other=0.0)  # loaded once
    v = tl.load(V + keys[:, None] * D + cols[None, :], mask=kv_mask, other=0.0)  # loaded once
    dk = tl.zeros((BLOCK_K, D), tl.float32)  # (2) its dK and dV stay on chip until the end
    dv = tl.zeros((BLOCK_K, D), tl.float32)
    q_start = 0
    if IS_CAUSAL:  # (3) the first query that sees key pid_k·BLOCK_K is that key - offset
        q_start = tl.maximum(0, pid_k * BLOCK_K - offset) // BLOCK_Q * BLOCK_Q
    n_tiles = 0
    for start_q in range(q_start, N, BLOCK_Q):  # (4) walk down the query tiles
        rows = start_q + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,)
        q_mask = rows[:, None] < N
        q = tl.load(Q + rows[:, None] * D + cols[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + rows[:, None] * D + cols[None, :], mask=q_mask, other=0.0)
        lse = tl.load(L + rows, mask=rows < N, other=float("inf"))
        lse = tl.where(lse == -float("inf"), float("inf"), lse)  # rows that see nothing: p = 0
        delta = tl.load(Delta + rows, mask=rows < N, other=0.0)  # D of these rows, precomputed
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * sm_scale  # (BLOCK_Q, BLOCK_K)
        seen = (rows[:, None] < N) & (keys[None, :] < M)
        if IS_CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + offset)
        p = tl.where(seen, tl.exp(s - lse[:, None]), 0.0)  # (5) the weights, rebuilt from L
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PREC)  # (6) dV += Pᵀ dO
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)  # (7) dP = dO Vᵀ (BLOCK_Q, BLOCK_K)
        ds = p * (dp - delta[:, None])  # (8) dS = P ∘ (dP - D): through the softmax
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PREC)  # (9) dK += dSᵀ Q
        n_tiles += 1
    tl.store(  # (10) the scores were q kᵀ · sm_scale, so dK carries sm_scale once
        DK + pid_bh * M * D + keys[:, None] * D + cols[None, :],
        (dk * sm_scale).to(DK.dtype.element_ty),
        mask=kv_mask,
    )
    tl.store(
        DV + pid_bh * M * D + keys[:, None] * D + cols[None, :],
        dv.to(DV.dtype.element_ty),
        mask=kv_mask,
    )
    if COUNT:
        tl.store(TILES + pid_k, n_tiles)


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, DO, L, Delta, DQ, TILES,
    N, M, offset, sm_scale,
    D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, IS_CAUSAL: tl.constexpr,
    COUNT: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip  # the rows of _bwd_dkdv_kernel
    pid_q = tl.program_id(0)  # (1) this program owns one block of queries
    pid_bh = tl.program_id(1)
    rows = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,)
    cols = tl.arange(0, D)
    Q, DO = Q + pid_bh * N * D, DO + pid_bh * N * D
    K, V = K + pid_bh * M * D, V + pid_bh * M * D
    q_mask = rows[:, None] < N
    q = tl.load(Q + rows[:, None] * D + cols[None, :], mask=q_mask, other=0.0)  # loaded once,
    do = tl.load(DO + rows[:, None] * D + cols[None, :], mask=q_mask, other=0.0)  # as are dO,
    lse = tl.load(L + pid_bh * N + rows, mask=rows < N, other=float("inf"))  # L
    lse = tl.where(lse == -float("inf"), float("inf"), lse)
    delta = tl.load(Delta + pid_bh * N + rows, mask=rows < N, other=0.0)  # and D
    dq = tl.zeros((BLOCK_Q, D), tl.float32)  # (2) its dQ stays on chip until the end
    k_end = M
    if IS_CAUSAL:  # (3) as the forward kernel: no row of the block sees a key past k_end
        k_end = tl.maximum(0, tl.minimum(M, tl.minimum((pid_q + 1) * BLOCK_Q, N) + offset))
    n_tiles = 0
    for start_k in range(0, k_end, BLOCK_K):  # (4) walk along the key tiles
        keys = start_k + tl.arange(0, BLOCK_K)
        kv_mask = keys[:, None] < M
        k = tl.load(K + keys[:, None] * D + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + keys[:, None] * D + cols[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PREC) * sm_scale
        seen = keys[None, :] < M
        if IS_CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + offset)
        p = tl.where(seen, tl.exp(s - lse[:, None]), 0.0)  # (5) the weights, rebuilt from L
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)  # (6) dP = dO Vᵀ
        ds = p * (dp - delta[:, None])  # (7) dS = P ∘ (dP - D), the same tile as above
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)  # (8) dQ += dS K (BLOCK_Q, D)
        n_tiles += 1
    tl.store(  # (9) times sm_scale, once
        DQ + pid_bh * N * D + rows[:, None] * D + cols[None, :],
        (dq * sm_scale).to(DQ.dtype.element_ty),
        mask=q_mask,
    )
    if COUNT:
        tl.store(TILES + pid_q, n_tiles)


def triton_attention_backward(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    causal: str | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) from do (B, h, N, d), the output o and its lse (B, h, N)."""
    q, k, v = _check_inputs(q, k, v, causal)
    B, h, N, d = q.shape
    if do.shape != q.shape or o.shape != q.shape or lse.shape != (B, h, N):
        raise ValueError(
            f"do {tuple(do.shape)}, o {tuple(o.shape)}, lse {tuple(lse.shape)}; expected "
            f"(B, h, N, d) = {(B, h, N, d)} and (B, h, N) = {(B, h, N)}"
        )
    block_q, block_k = _blocks(d, block_q, block_k, "bwd")
    do, o, lse = do.contiguous(), o.contiguous(), lse.contiguous().float()
    return _backward(do, q, k, v, o, lse, causal, block_q, block_k)


def _backward(do, q, k, v, o, lse, causal, block_q, block_k, counts=None):
    """The three launches; counts: {"dkdv": (M blocks,) int32, "dq": (N blocks,) int32}."""
    B, h, N, d = q.shape
    M = k.shape[2]
    delta = torch.empty(B, h, N, device=q.device, dtype=torch.float32)  # rowsum(dO ∘ O)
    _bwd_preprocess[(triton.cdiv(B * h * N, block_q),)](o, do, delta, B * h * N, D=d, BLOCK=block_q)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = (N, M, _offset(N, M, causal), 1.0 / math.sqrt(d))
    consts = dict(D=d, BLOCK_Q=block_q, BLOCK_K=block_k, IS_CAUSAL=causal is not None)
    consts.update(COUNT=counts is not None, PREC=_precision(q))
    consts.update(_launch_options(d, max(block_q, block_k)))
    tiles = counts or {"dkdv": delta, "dq": delta}  # unused unless COUNT
    _bwd_dkdv_kernel[(triton.cdiv(M, block_k), B * h)](
        q, k, v, do, lse, delta, dk, dv, tiles["dkdv"], *args, **consts
    )
    _bwd_dq_kernel[(triton.cdiv(N, block_q), B * h)](
        q, k, v, do, lse, delta, dq, tiles["dq"], *args, **consts
    )
    return dq, dk, dv


class _TritonAttention(torch.autograd.Function):
    """Forward by the kernel; backward from q, k, v, o and lse only."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_q, block_k):
        o, lse = triton_attention_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, o, lse)  # O(N + M) per head, no N×M tensor
        ctx.config = (causal, block_q, block_k)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        causal, block_q, block_k = ctx.config
        dq, dk, dv = triton_attention_backward(do, q, k, v, o, lse, causal, block_q, block_k)
        return dq, dk, dv, None, None, None


def triton_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: str | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention by Triton kernels: (o (B, h, N, d), lse (B, h, N)), differentiable in
    q, k, v. o equals `F.scaled_dot_product_attention(q, k, v, ...)` with the same mask."""
    _check_inputs(q, k, v, causal)
    return _TritonAttention.apply(q, k, v, causal, block_q, block_k)


# ----------------------------------------------------------------------------
# input checks and block sizes


def _check_tensor(x, name: str, dims: int) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() != dims:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; expected {dims} dims")
    if x.device.type != DEVICE:
        raise ValueError(
            f"{name} is on {x.device}; the kernels run on {DEVICE} "
            f"({'the interpreter' if INTERPRETED else 'the GPU'})"
        )


def _check_inputs(q, k, v, causal):
    """The inputs, contiguous, or a TypeError/ValueError naming the argument."""
    allowed = (
        (torch.float32, torch.float16)
        if INTERPRETED
        else (torch.float32, torch.float16, torch.bfloat16)
    )
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(x, name, 4)
        if x.dtype not in allowed:
            why = " (the interpreter has no bfloat16 arithmetic)" if INTERPRETED else ""
            raise TypeError(f"{name} has dtype {x.dtype}; expected one of {allowed}{why}")
        if x.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {x.dtype}; expected q's {q.dtype}")
    B, h, N, d = q.shape  # (B, h, N, d)
    if d not in HEAD_DIMS or N < 1:
        raise ValueError(
            f"q has shape {tuple(q.shape)}; expected (B, h, N, d) with N >= 1 and d in {HEAD_DIMS}"
        )
    if k.shape[:2] != (B, h) or k.shape[3] != d or k.shape[2] < 1:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; expected (B, h, M, d) = ({B}, {h}, M, {d}) "
            "from q, M >= 1"
        )
    if v.shape != k.shape:
        raise ValueError(f"v has shape {tuple(v.shape)}; expected k's shape {tuple(k.shape)}")
    if causal not in CAUSAL:
        raise ValueError(f"causal must be one of {CAUSAL}; got {causal!r}")
    return q.contiguous(), k.contiguous(), v.contiguous()


def _precision(q: Tensor) -> str:
    """tl.dot's input precision: full float32 for float32 inputs (a GPU would round them
    to TF32 otherwise, about 1e-3), the inputs' own for float16 and bfloat16."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _launch_options(d: int, block: int) -> dict:
    """Warps and software-pipelining stages for the GPU (the interpreter takes none):
    more warps for larger tiles, three stages so that the next K, V tiles load while
    this one is multiplied."""
    if INTERPRETED:
        return {}
    return dict(num_warps=8 if block * d >= 128 * 128 else 4, num_stages=3 if d <= 64 else 2)


def _blocks(d: int, block_q, block_k, which: str) -> tuple[int, int]:
    """Block sizes: given ones checked, else `default_blocks` (16 × 16 under the interpreter)."""
    default = default_blocks(d, "forward" if which == "fwd" else "dq")
    block_q = default[0] if block_q is None else block_q
    block_k = default[1] if block_k is None else block_k
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        check_int(b, name, 16)  # tl.dot's smallest tile
        if b & (b - 1):
            raise ValueError(f"{name} must be a power of two, at least 16 (tl.dot); got {b}")
    return block_q, block_k
