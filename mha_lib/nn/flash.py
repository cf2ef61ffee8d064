"""FlashAttention, forward and backward, in plain torch, with any mask given as a mask_mod.

Derived in notebook 08 (from notebook 04's online-softmax loop). The
queries are cut into blocks of `block_q` rows and the keys into blocks of
`block_k`; for each query block the key blocks are visited in turn, keeping
per row only the running max m, the running sum s of exp(score - m) and the
running weighted sum of the values. No (N, M) tensor is ever held: the
largest is one (block_q, block_k) tile per batch and head.

Masks come as FlexAttention's `mask_mod(b, h, q_idx, kv_idx) -> bool`
(True = may attend), evaluated on the index tensors of one tile at a time: the
mask zoo's functions in `masks` (causal, bottom-right causal for a chunk
against a cache, sliding window, document, prefix-LM) work unchanged. A tile
whose every entry is masked is skipped, in the forward and the backward pass
(block sparsity); `TileStats` counts the tiles computed and skipped. A query
row whose every key is masked gets a zero output and zero gradients, never NaN.

The forward pass also returns the log-sum-exp per row, L = m + log s. The
backward pass recomputes each tile's weights P = exp(S - L) from q, k and L
(nothing N×M is saved), and uses D = rowsum(dO ∘ O) for the softmax's
gradient: dS = P ∘ (dP - D) with dP = dO Vᵀ. Saved for backward: q, k, v,
the output and L: O(N + M) memory instead of the O(N·M) weights.

What it holds:
- `flash_attention_forward(q, k, v, is_causal, block_q, block_k, mask_mod=, stats=)`
  -> (o, lse);
- `flash_attention_backward(do, q, k, v, o, lse, is_causal, block_q, block_k,
  mask_mod=, stats=)` -> (dq, dk, dv);
- `flash_attention(q, k, v, is_causal=False, block_q=64, block_k=64, mask_mod=None,
  stats=None)` -> (o, lse), differentiable in q, k, v (a `torch.autograd.Function`);
- `TileStats`: tiles visited and skipped by a pass (pass one as `stats=`);
- `saved_for_backward_bytes(fn)`: the bytes autograd keeps for the backward
  pass of fn() (notebook 04's saved-tensors hook; each storage counted once);
- `hbm_bytes(N, M, d, form, causal, block_q, block_k)`: the bytes one forward pass
  moves between HBM and the chip, for one (batch, head): "naive" (three kernels, the
  (N, M) scores and weights written out and read back) or "tiled" (notebook 09's
  Triton kernel, counted tile by tile from the tiles it loads and stores);
- `causal_key_end(start_q, block_q, N, M, causal)`: one past the last key a causal
  query block may see, where the tiled kernels' loops over keys stop (notebook 09).

Shapes: q (B, h, N, d_k), k (B, h, M, d_k), v (B, h, M, d_v); o (B, h, N, d_v),
lse (B, h, N). is_causal=True is the mask_mod `causal_mask_mod`: query i sees
keys 0 .. i, aligned to the top left as in
`F.scaled_dot_product_attention(is_causal=True)`. For a chunk of N queries
against a cache of M keys pass `mask_mod=bottom_right_causal_mask_mod(N, M)`.
The tiled loop runs in Python: slower than a fused kernel, lighter than the
naive form.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_int
from .masks import causal_mask_mod

__all__ = [
    "TileStats",
    "causal_key_end",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "hbm_bytes",
    "saved_for_backward_bytes",
]


@dataclass
class TileStats:
    """How many (block_q, block_k) tiles a pass computed and how many it skipped.

    A tile is skipped when the mask blocks every (query, key) pair in it;
    `sparsity` = skipped / total is the block sparsity of the mask at that
    tiling. Pass one object as `stats=`; each pass adds to its counts.
    """

    visited: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.visited + self.skipped

    @property
    def sparsity(self) -> float:
        return self.skipped / self.total if self.total else 0.0


def _check_inputs(q, k, v, is_causal, block_q, block_k, mask_mod=None, stats=None) -> None:
    """Raise TypeError/ValueError naming the argument unless the inputs fit together."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
        if not torch.is_floating_point(x):
            raise TypeError(f"{name} must be a floating-point tensor; got dtype {x.dtype}")
        if x.dim() != 4 or x.shape[2] < 1 or x.shape[3] < 1:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}; expected 4 dims (B, h, tokens, d) "
                "with at least one token and one feature"
            )
        if x.dtype != q.dtype or x.device != q.device:
            raise TypeError(
                f"{name} is {x.dtype} on {x.device}; expected q's {q.dtype} on {q.device}"
            )
    B, h, _, d_k = q.shape  # (B, h, N, d_k)
    if k.shape[:2] != (B, h) or k.shape[3] != d_k:
        raise ValueError(
            f"k has shape {tuple(k.shape)}; expected (B, h, M, d_k) with B = {B}, h = {h}, "
            f"d_k = {d_k} from q"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"v has shape {tuple(v.shape)}; expected (B, h, M, d_v) with (B, h, M) = "
            f"{tuple(k.shape[:3])} from k"
        )
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool; got {type(is_causal).__name__}")
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        check_int(b, name)
    if mask_mod is not None and not callable(mask_mod):
        raise TypeError(
            "mask_mod must be a function mask_mod(b, h, q_idx, kv_idx) -> bool tensor; "
            f"got {type(mask_mod).__name__}"
        )
    if is_causal and mask_mod is not None:
        raise ValueError(
            "got is_causal=True and a mask_mod; give one of them (is_causal=True is "
            "mask_mod=causal_mask_mod; combine masks inside one mask_mod)"
        )
    if stats is not None and not isinstance(stats, TileStats):
        raise TypeError(f"stats must be a TileStats or None; got {type(stats).__name__}")


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` (torch.broadcast_shapes would import sympy, 35 MB
    more in every process that calls it once)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _tile_mask(mask_mod, B: int, h: int, i0: int, i1: int, j0: int, j1: int, device):
    """The mask_mod on one tile: (skip, blocked).

    skip: every pair is masked (the tile is not computed). blocked: None when
    every pair may attend, else a bool tensor broadcastable to (B, h, b_q, b_k),
    True where the score must become -inf.
    """
    if mask_mod is None:
        return False, None
    b = torch.arange(B, device=device)[:, None, None, None]  # (B, 1, 1, 1)
    head = torch.arange(h, device=device)[None, :, None, None]  # (1, h, 1, 1)
    q_idx = torch.arange(i0, i1, device=device)[:, None]  # (b_q, 1)
    kv_idx = torch.arange(j0, j1, device=device)[None, :]  # (1, b_k)
    allowed = mask_mod(b, head, q_idx, kv_idx)
    if not isinstance(allowed, Tensor) or allowed.dtype != torch.bool:
        got = allowed.dtype if isinstance(allowed, Tensor) else type(allowed).__name__
        raise TypeError(f"mask_mod must return a bool tensor (True = may attend); got {got}")
    if not _broadcasts(tuple(allowed.shape), (B, h, i1 - i0, j1 - j0)):
        raise ValueError(
            f"mask_mod returned shape {tuple(allowed.shape)} on a tile; expected one that "
            f"broadcasts to (B, h, b_q, b_k) = {(B, h, i1 - i0, j1 - j0)}"
        )
    if not allowed.any():
        return True, None
    if allowed.all():
        return False, None
    return False, ~allowed


def _resolve_mask(is_causal: bool, mask_mod):
    return causal_mask_mod if is_causal else mask_mod


def flash_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    mask_mod: Callable | None = None,
    stats: TileStats | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / √d_k + mask) v tile by tile; returns (o (B, h, N, d_v), lse (B, h, N)).

    A row with no key to attend to gets o = 0 and lse = -inf.
    """
    _check_inputs(q, k, v, is_causal, block_q, block_k, mask_mod, stats)
    mask_mod = _resolve_mask(is_causal, mask_mod)
    B, h, N, d_k = q.shape
    M, d_v = k.shape[2], v.shape[3]
    scale = 1.0 / math.sqrt(d_k)
    o = q.new_empty(B, h, N, d_v)  # (B, h, N, d_v)
    lse = q.new_empty(B, h, N)  # (B, h, N)
    for i0 in range(0, N, block_q):
        i1 = min(i0 + block_q, N)
        q_i = q[:, :, i0:i1] * scale  # (B, h, b_q, d_k)
        m = q.new_full((B, h, i1 - i0, 1), -math.inf)  # running max of each row
        s = q.new_zeros(B, h, i1 - i0, 1)  # running sum of exp(score - m)
        acc = q.new_zeros(B, h, i1 - i0, d_v)  # running sum of exp(score - m) v
        for j0 in range(0, M, block_k):
            j1 = min(j0 + block_k, M)
            skip, blocked = _tile_mask(mask_mod, B, h, i0, i1, j0, j1, q.device)
            if stats is not None:
                stats.skipped += skip
                stats.visited += not skip
            if skip:  # every pair masked: nothing to add
                continue
            scores = q_i @ k[:, :, j0:j1].transpose(-2, -1)  # (B, h, b_q, b_k): one tile
            if blocked is not None:
                scores = scores.masked_fill(blocked, -math.inf)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (B, h, b_q, 1)
            m_safe = m_new.masked_fill(m_new == -math.inf, 0.0)  # rows with nothing seen yet
            rescale = torch.exp(m - m_safe)  # what was summed so far used the old max
            p = torch.exp(scores - m_safe)  # (B, h, b_q, b_k)
            s = s * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v[:, :, j0:j1]  # (B, h, b_q, d_v)
            m = m_new
        o[:, :, i0:i1] = acc / s.masked_fill(s == 0, 1.0)  # (B, h, b_q, d_v); empty rows: 0
        lse[:, :, i0:i1] = (m + torch.log(s)).squeeze(-1)  # (B, h, b_q); empty rows: -inf
    return o, lse


def flash_attention_backward(
    do: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    mask_mod: Callable | None = None,
    stats: TileStats | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) from do (B, h, N, d_v), recomputing each tile's weights."""
    _check_inputs(q, k, v, is_causal, block_q, block_k, mask_mod, stats)
    mask_mod = _resolve_mask(is_causal, mask_mod)
    B, h, N, d_k = q.shape
    M = k.shape[2]
    if do.shape != o.shape or o.shape != (B, h, N, v.shape[3]) or lse.shape != (B, h, N):
        raise ValueError(
            f"do {tuple(do.shape)}, o {tuple(o.shape)}, lse {tuple(lse.shape)}; expected "
            f"(B, h, N, d_v) = {(B, h, N, v.shape[3])} and (B, h, N) = {(B, h, N)}"
        )
    scale = 1.0 / math.sqrt(d_k)
    D = (do * o).sum(dim=-1, keepdim=True)  # (B, h, N, 1): rowsum(dO ∘ O)
    lse = lse.masked_fill(lse == -math.inf, 0.0)  # empty rows: every weight exp(-inf) = 0
    dq = torch.zeros_like(q)  # (B, h, N, d_k)
    dk = torch.zeros_like(k)  # (B, h, M, d_k)
    dv = torch.zeros_like(v)  # (B, h, M, d_v)
    for j0 in range(0, M, block_k):
        j1 = min(j0 + block_k, M)
        k_j, v_j = k[:, :, j0:j1], v[:, :, j0:j1]  # (B, h, b_k, d_k), (B, h, b_k, d_v)
        for i0 in range(0, N, block_q):
            i1 = min(i0 + block_q, N)
            skip, blocked = _tile_mask(mask_mod, B, h, i0, i1, j0, j1, q.device)
            if stats is not None:
                stats.skipped += skip
                stats.visited += not skip
            if skip:
                continue
            q_i, do_i = q[:, :, i0:i1], do[:, :, i0:i1]  # (B, h, b_q, d_k), (B, h, b_q, d_v)
            scores = (q_i * scale) @ k_j.transpose(-2, -1)  # (B, h, b_q, b_k)
            if blocked is not None:
                scores = scores.masked_fill(blocked, -math.inf)
            p = torch.exp(scores - lse[:, :, i0:i1, None])  # (B, h, b_q, b_k): the weights
            dv[:, :, j0:j1] += p.transpose(-2, -1) @ do_i  # (B, h, b_k, d_v)
            dp = do_i @ v_j.transpose(-2, -1)  # (B, h, b_q, b_k)
            ds = p * (dp - D[:, :, i0:i1])  # (B, h, b_q, b_k): through the softmax
            dq[:, :, i0:i1] += (ds @ k_j) * scale  # (B, h, b_q, d_k)
            dk[:, :, j0:j1] += (ds.transpose(-2, -1) @ q_i) * scale  # (B, h, b_k, d_k)
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    """Forward tile by tile; backward from q, k, v, o and lse only."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, block_q, block_k, mask_mod, stats):
        o, lse = flash_attention_forward(q, k, v, is_causal, block_q, block_k, mask_mod, stats)
        ctx.save_for_backward(q, k, v, o, lse)  # O(N + M) numbers per head, no N×M tensor
        ctx.config = (is_causal, block_q, block_k, mask_mod)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(do, q, k, v, o, lse, *ctx.config)
        return dq, dk, dv, None, None, None, None, None


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    *,
    mask_mod: Callable | None = None,
    stats: TileStats | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention: (o (B, h, N, d_v), lse (B, h, N)), differentiable in q, k, v.

    q (B, h, N, d_k), k (B, h, M, d_k), v (B, h, M, d_v). o equals
    `F.scaled_dot_product_attention(q, k, v, attn_mask=mask)` where mask is
    mask_mod evaluated on the (N, M) grid (True = may attend; no mask_mod:
    every key), or `is_causal=True` (top left, = `causal_mask_mod`). Tiles
    the mask blocks entirely are skipped; `stats` (a `TileStats`) counts the
    forward pass's tiles. lse is the log-sum-exp of each row's scaled, masked
    scores (not differentiable; -inf for a row that sees no key).
    """
    _check_inputs(q, k, v, is_causal, block_q, block_k, mask_mod, stats)
    return _FlashAttention.apply(q, k, v, is_causal, block_q, block_k, mask_mod, stats)


def saved_for_backward_bytes(fn: Callable[[], object]) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of fn().

    Every tensor saved for backward passes through a saved-tensors hook;
    views of one block of memory are counted once (by storage).
    """
    blocks: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        blocks[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(blocks.values())


# ----------------------------------------------------------------------------
# the tiled kernel's traffic between HBM and the chip (notebooks 08 §8 and 09 §1)


def causal_key_end(start_q: int, block_q: int, N: int, M: int, causal: str | None) -> int:
    """One past the last key any query of the block start_q .. start_q + block_q - 1 may
    see: the tiled kernels' loops over keys stop there (M when not causal).

    causal: None, "top_left" (query i sees keys 0 .. i) or "bottom_right" (keys
    0 .. i + M - N), as in `mha_lib.efficient.triton_flash`.
    """
    if causal is None:
        return M
    offset = M - N if causal == "bottom_right" else 0
    last_row = min(start_q + block_q, N) - 1
    return max(0, min(M, last_row + offset + 1))


HBM_FORMS = ("naive", "tiled")


def hbm_bytes(
    N: int,
    M: int,
    d: int,
    form: str = "tiled",
    causal: str | None = None,
    block_q: int = 16,
    block_k: int = 16,
    bytes_per_number: int = 2,
) -> int:
    """Bytes one forward pass reads from and writes to HBM, for one (batch, head).

    form="naive": the standard attention of the FlashAttention paper (its Algorithm 0),
    three kernels: S = Q Kᵀ (the 1/√d folded into Q) reads Q and K and writes S; the
    softmax reads S and writes P (a causal mask applied there costs nothing more);
    O = P V reads P and V and writes O: 2·N·d + 2·M·d + 4·N·M numbers.

    form="tiled": notebook 09's forward kernel (`triton_flash._fwd_kernel`) counted tile
    by tile. Each program instance owns block_q queries: it loads its Q tile once,
    then the K tile and the V tile of every key block its loop visits (up to
    `causal_key_end`), and stores its O tile and its rows' log-sum-exp L (float32, 4
    bytes each, whatever the inputs' type). Only the live rows of a tile move: the
    lanes a mask switches off past N or M read and write nothing. So K and V are read
    once per query block: about 2·N·M·d / block_q numbers, the term that decides.

    bytes_per_number: 2 for float16 or bfloat16, 4 for float32. Caches between HBM and
    the chip (a GPU's L2) are not modelled: this is what the kernel asks HBM for.
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
    if form not in HBM_FORMS:
        raise ValueError(f"form must be one of {HBM_FORMS}; got {form!r}")
    if causal not in (None, "top_left", "bottom_right"):
        raise ValueError(f"causal must be None, 'top_left' or 'bottom_right'; got {causal!r}")
    if form == "naive":
        return (2 * N * d + 2 * M * d + 4 * N * M) * bytes_per_number
    numbers = 0
    for start_q in range(0, N, block_q):  # one program instance per block of queries
        rows = min(block_q, N - start_q)
        numbers += rows * d  # load its Q tile, once
        for start_k in range(0, causal_key_end(start_q, block_q, N, M, causal), block_k):
            numbers += 2 * min(block_k, M - start_k) * d  # load a K tile and a V tile
        numbers += rows * d  # store its O tile
    return numbers * bytes_per_number + 4 * N  # and L, float32, one number per query
