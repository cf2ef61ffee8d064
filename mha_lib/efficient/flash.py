"""FlashAttention, forward and backward, in plain torch.

Derived in notebook 08 (from notebook 04's online-softmax loop). The
queries are cut into blocks of `block_q` rows and the keys into blocks of
`block_k`; for each query block the key blocks are visited in turn, keeping
per row only the running max m, the running sum s of exp(score - m) and the
running weighted sum of the values. No (N, M) tensor is ever held: the
largest is one (block_q, block_k) tile per batch and head.

The forward pass also returns the log-sum-exp per row, L = m + log s. The
backward pass recomputes each tile's weights P = exp(S - L) from q, k and L
(nothing N×M is saved), and uses D = rowsum(dO ∘ O) for the softmax's
gradient: dS = P ∘ (dP - D) with dP = dO Vᵀ. Saved for backward: q, k, v,
the output and L: O(N + M) memory instead of the O(N·M) weights.

What it holds:
- `flash_attention_forward(q, k, v, is_causal, block_q, block_k)` -> (o, lse);
- `flash_attention_backward(do, q, k, v, o, lse, is_causal, block_q, block_k)`
  -> (dq, dk, dv);
- `flash_attention(q, k, v, is_causal=False, block_q=64, block_k=64)` ->
  (o, lse), differentiable in q, k, v (a `torch.autograd.Function`);
- `naive_attention(q, k, v, is_causal)`: the plain definition, the (N, M)
  weights written out (what autograd then keeps);
- `saved_for_backward_bytes(fn)`: the bytes autograd keeps for the backward
  pass of fn() (notebook 04's saved-tensors hook; each storage counted once).

Shapes: q (B, h, N, d_k), k (B, h, M, d_k), v (B, h, M, d_v); o (B, h, N, d_v),
lse (B, h, N). is_causal: query i sees keys 0 .. i, aligned to the top left
as in `F.scaled_dot_product_attention(is_causal=True)` (so every row sees at
least key 0). The tiled loop runs in Python: slower than a fused kernel,
lighter than the naive form.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "naive_attention",
    "saved_for_backward_bytes",
]


def _check_inputs(q, k, v, is_causal, block_q, block_k) -> None:
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
        if isinstance(b, bool) or not isinstance(b, int):
            raise TypeError(f"{name} must be an int; got {type(b).__name__}")
        if b < 1:
            raise ValueError(f"{name} must be at least 1; got {b}")


def _future(i0: int, i1: int, j0: int, j1: int, device) -> Tensor:
    """(i1-i0, j1-j0) bool, True where key j lies after query i (blocked when causal)."""
    rows = torch.arange(i0, i1, device=device)[:, None]  # (b_q, 1)
    cols = torch.arange(j0, j1, device=device)[None, :]  # (1, b_k)
    return cols > rows  # (b_q, b_k)


def flash_attention_forward(
    q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False, block_q: int = 64, block_k: int = 64
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / √d_k) v tile by tile; returns (o (B, h, N, d_v), lse (B, h, N))."""
    _check_inputs(q, k, v, is_causal, block_q, block_k)
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
        k_end = min(M, i1) if is_causal else M  # causal: later keys are every row's future
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, k_end)
            scores = q_i @ k[:, :, j0:j1].transpose(-2, -1)  # (B, h, b_q, b_k): one tile
            if is_causal and j1 - 1 > i0:  # the tile crosses the diagonal
                scores = scores.masked_fill(_future(i0, i1, j0, j1, q.device), -math.inf)
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (B, h, b_q, 1)
            rescale = torch.exp(m - m_new)  # what was summed so far used the old max
            p = torch.exp(scores - m_new)  # (B, h, b_q, b_k)
            s = s * rescale + p.sum(dim=-1, keepdim=True)
            acc = acc * rescale + p @ v[:, :, j0:j1]  # (B, h, b_q, d_v)
            m = m_new
        o[:, :, i0:i1] = acc / s  # (B, h, b_q, d_v)
        lse[:, :, i0:i1] = (m + torch.log(s)).squeeze(-1)  # (B, h, b_q)
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
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients (dq, dk, dv) from do (B, h, N, d_v), recomputing each tile's weights."""
    _check_inputs(q, k, v, is_causal, block_q, block_k)
    B, h, N, d_k = q.shape
    M = k.shape[2]
    if do.shape != o.shape or o.shape != (B, h, N, v.shape[3]) or lse.shape != (B, h, N):
        raise ValueError(
            f"do {tuple(do.shape)}, o {tuple(o.shape)}, lse {tuple(lse.shape)}; expected "
            f"(B, h, N, d_v) = {(B, h, N, v.shape[3])} and (B, h, N) = {(B, h, N)}"
        )
    scale = 1.0 / math.sqrt(d_k)
    D = (do * o).sum(dim=-1, keepdim=True)  # (B, h, N, 1): rowsum(dO ∘ O)
    dq = torch.zeros_like(q)  # (B, h, N, d_k)
    dk = torch.zeros_like(k)  # (B, h, M, d_k)
    dv = torch.zeros_like(v)  # (B, h, M, d_v)
    for j0 in range(0, M, block_k):
        j1 = min(j0 + block_k, M)
        k_j, v_j = k[:, :, j0:j1], v[:, :, j0:j1]  # (B, h, b_k, d_k), (B, h, b_k, d_v)
        for i0 in range(0, N, block_q):
            i1 = min(i0 + block_q, N)
            if is_causal and i1 - 1 < j0:  # every row of this block precedes every key
                continue
            q_i, do_i = q[:, :, i0:i1], do[:, :, i0:i1]  # (B, h, b_q, d_k), (B, h, b_q, d_v)
            scores = (q_i * scale) @ k_j.transpose(-2, -1)  # (B, h, b_q, b_k)
            if is_causal and j1 - 1 > i0:
                scores = scores.masked_fill(_future(i0, i1, j0, j1, q.device), -math.inf)
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
    def forward(ctx, q, k, v, is_causal, block_q, block_k):
        o, lse = flash_attention_forward(q, k, v, is_causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, o, lse)  # O(N + M) numbers per head, no N×M tensor
        ctx.config = (is_causal, block_q, block_k)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(do, q, k, v, o, lse, *ctx.config)
        return dq, dk, dv, None, None, None


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False, block_q: int = 64, block_k: int = 64
) -> tuple[Tensor, Tensor]:
    """FlashAttention: (o (B, h, N, d_v), lse (B, h, N)), differentiable in q, k, v.

    q (B, h, N, d_k), k (B, h, M, d_k), v (B, h, M, d_v). o equals
    `F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)`; lse is the
    log-sum-exp of each row's scaled scores (not differentiable).
    """
    _check_inputs(q, k, v, is_causal, block_q, block_k)
    return _FlashAttention.apply(q, k, v, is_causal, block_q, block_k)


def naive_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False) -> Tensor:
    """softmax(q kᵀ / √d_k) v with the (B, h, N, M) weights written out; (B, h, N, d_v)."""
    _check_inputs(q, k, v, is_causal, 1, 1)
    N, M = q.shape[2], k.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, h, N, M)
    if is_causal:
        future = torch.ones(N, M, dtype=torch.bool, device=q.device).triu(1)  # (N, M)
        scores = scores.masked_fill(future, -math.inf)
    return torch.softmax(scores, dim=-1) @ v  # (B, h, N, d_v)


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
