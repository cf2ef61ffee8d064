"""Native Sparse Attention (NSA): three attention branches per query, mixed by learned gates.

Derived in notebook 18. DeepSeek's NSA (Yuan et al., 2025) gives every query three views of the
keys before it, each a causal attention of its own, and adds their outputs:

- **compressed**: the keys and values pooled over blocks of l tokens taken every d tokens
  (`compress`: the mean of each block, as fla's reference does; the paper learns a small MLP
  with a position encoding in its place). Query t sees compressed block j once the whole block
  is in its past, j·d + l - 1 ≤ t (`compressed_attention`);
- **selected**: the tokens of n blocks of l' tokens, the blocks chosen by the compressed branch's
  attention probabilities (`select_blocks`): each selection block scores the probabilities of
  the compressed blocks it overlaps, in proportion to the tokens they share (the paper's Eq. 9
  sums them over the stride-d pieces the two blocks share, the same count when d divides l and
  l'; with l = d = l' a block's score is its compressed block's probability), the scores averaged
  over the query heads of a GQA group so that a group shares its choice (one set of blocks per
  key/value head, the unit a kernel loads), and the first block, the query's own block and the
  one before it always chosen. Query t attends to the chosen blocks' tokens s ≤ t
  (`selected_attention`);
- **window**: the last w tokens, t - w < s ≤ t (`window_attention`).

    o_t = g_cmp(t) · o_cmp(t) + g_slc(t) · o_slc(t) + g_win(t) · o_win(t)

with gates g (B, h, N, 3) per query and head, the outputs of a sigmoid of a learned projection
of x_t (`nsa_attention` takes the gates, not the projection). Causal everywhere; at most
n·l' + w + N/d keys per query instead of t + 1.

The selection branch equals fla-core's pure-torch `naive_nsa_selection`, the choice of blocks
its `naive_nsa_topk` (as sets) and the compressed branch its `naive_nsa_compression`
(tests/sparse_attention/test_nsa.py, on odd sizes, several seeds, GQA). fla pools with l = d =
l' and a Triton kernel; `compress` is checked against a plain loop.

Layout as in the series: q (B, h, N, d_k), k (B, h_kv, N, d_k), v (B, h_kv, N, d_v), h a
multiple of h_kv (G = h / h_kv query heads per group); fla's layout is (B, N, heads, d).
Attention is computed in the inputs' dtype; a query with no visible key (the compressed branch
before its first whole block) gets a zero output, as in fla.

What it holds:
- `compress(k, v, block, stride)`: the mean-pooled keys and values (B, h_kv, N_c, ·);
- `compressed_attention(q, k_cmp, v_cmp, block, stride)`: the branch's output and probabilities;
- `select_blocks(q, k_cmp, block, stride, block_size, n_selected)`: the chosen blocks' indices
  (B, h_kv, N, n), in block order, -1 where fewer may be chosen, and the "may attend" mask of
  their tokens (B, h_kv, N, N);
- `selected_attention(q, k, v, indices, block_size)`, `window_attention(q, k, v, window)`;
- `nsa_branches(...)`: the three outputs and the indices; `nsa_attention(...)`: their gated sum;
- `NativeSparseAttention`: the layer, x (B, N, C) -> (B, N, C): projections to q, k, v (GQA),
  the gates σ(x W_g + b_g) (B, h, N, 3), `nsa_attention`, the output projection. One set of keys
  and values serves the three branches, as in fla (the paper gives each branch its own).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._checks import check_int
from ..nn.masks import bottom_right_window_tensor

__all__ = [
    "NativeSparseAttention",
    "compress",
    "compressed_attention",
    "nsa_attention",
    "nsa_branches",
    "select_blocks",
    "selected_attention",
    "window_attention",
]


def _shape(x) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


def _check_qkv(q, k, v=None, k_name="k", v_name="v") -> tuple[int, int, int, int]:
    """Return (B, h, h_kv, N) after checking q (B, h, N, d_k), k (B, h_kv, M, d_k), v."""
    if not isinstance(q, Tensor) or q.dim() != 4 or not q.is_floating_point():
        raise ValueError(f"q has shape {_shape(q)}; expected a float tensor (B, h, N, d_k)")
    B, h, N, d_k = q.shape
    if not isinstance(k, Tensor) or k.dim() != 4 or k.shape[0] != B or k.shape[3] != d_k:
        raise ValueError(
            f"{k_name} has shape {_shape(k)}; expected (B, h_kv, M, d_k) with B = {B}, "
            f"d_k = {d_k} from q"
        )
    h_kv = k.shape[1]
    if h_kv == 0 or h % h_kv:
        raise ValueError(
            f"{k_name} has shape {_shape(k)}: h_kv = {h_kv} key/value heads; expected a divisor "
            f"of q's h = {h} (each group of h / h_kv query heads shares one)"
        )
    if k.dtype != q.dtype:
        raise TypeError(f"{k_name} has dtype {k.dtype}; expected q's {q.dtype}")
    if v is not None:
        if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != tuple(k.shape[:3]):
            raise ValueError(
                f"{v_name} has shape {_shape(v)}; expected (B, h_kv, M, d_v) with "
                f"(B, h_kv, M) = {tuple(k.shape[:3])} from {k_name}"
            )
        if v.dtype != q.dtype:
            raise TypeError(f"{v_name} has dtype {v.dtype}; expected q's {q.dtype}")
    return B, h, h_kv, N


def _check_same_length(q: Tensor, k: Tensor, name: str = "k") -> None:
    if k.shape[2] != q.shape[2]:
        raise ValueError(
            f"{name} has shape {_shape(k)}; expected N = {q.shape[2]} tokens, q's "
            "(NSA's branches here are self-attention over one sequence)"
        )


def _check_blocks(block, stride) -> None:
    check_int(block, "block", 1)
    check_int(stride, "stride", 1)
    if stride > block:
        raise ValueError(
            f"stride = {stride} > block = {block}; expected 1 <= stride <= block "
            "(blocks that leave gaps would drop tokens from the compressed view)"
        )


def _scale(scale, d_k: int) -> float:
    if scale is None:
        return d_k**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise ValueError(f"scale must be a positive number; got {scale!r}")
    return float(scale)


def _attend(
    q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float
) -> tuple[Tensor, Tensor]:
    """Masked attention with GQA: q (B, h, N, d_k), k (B, h_kv, M, d_k), v (B, h_kv, M, d_v),
    allowed (B or 1, h or h_kv or 1, N, M) True = may attend. Returns the output (B, h, N, d_v)
    and the probabilities (B, h, N, M); a row with no allowed key is all zeros (and passes no
    NaN back to the gradients, as a softmax over nothing but -inf would)."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)  # (B, h, M, ·)
    if allowed.shape[1] not in (1, q.shape[1]):
        allowed = allowed.repeat_interleave(G, dim=1)  # (B, h, N, M)
    seen = allowed.any(-1, keepdim=True)  # (B, h, N, 1): a row with a key to see
    scores = (q @ k.transpose(-1, -2)) * scale  # (B, h, N, M)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~seen, 0.0)
    probs = torch.softmax(scores, dim=-1) * seen  # (B, h, N, M): 0 where none is seen
    return probs @ v, probs  # (B, h, N, d_v), (B, h, N, M)


def compress(k: Tensor, v: Tensor, block: int, stride: int) -> tuple[Tensor, Tensor]:
    """Mean-pool keys k (B, h_kv, N, d_k) and values v (B, h_kv, N, d_v) over the whole blocks of
    `block` tokens starting every `stride` tokens: block j holds tokens j·stride ..
    j·stride + block - 1. Returns k_cmp (B, h_kv, N_c, d_k), v_cmp (B, h_kv, N_c, d_v) with
    N_c = (N - block) // stride + 1 whole blocks (0 when N < block: a partial block is never
    whole in any query's past, so no query could see it)."""
    if not isinstance(k, Tensor) or k.dim() != 4 or not k.is_floating_point():
        raise ValueError(f"k has shape {_shape(k)}; expected a float tensor (B, h_kv, N, d_k)")
    if not isinstance(v, Tensor) or v.dim() != 4 or tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise ValueError(
            f"v has shape {_shape(v)}; expected (B, h_kv, N, d_v) with (B, h_kv, N) = "
            f"{tuple(k.shape[:3])} from k"
        )
    _check_blocks(block, stride)
    N = k.shape[2]
    if N < block:
        return k[:, :, :0], v[:, :, :0]  # (B, h_kv, 0, ·)
    k_cmp = k.unfold(2, block, stride).mean(-1)  # (B, h_kv, N_c, d_k): unfold puts block last
    v_cmp = v.unfold(2, block, stride).mean(-1)  # (B, h_kv, N_c, d_v)
    return k_cmp, v_cmp


def _compressed_visible(N: int, N_c: int, block: int, stride: int, device) -> Tensor:
    """(N, N_c) bool: query t sees compressed block j once it is whole in its past."""
    t = torch.arange(N, device=device)[:, None]  # (N, 1)
    j = torch.arange(N_c, device=device)[None, :]  # (1, N_c)
    return j * stride + block - 1 <= t  # (N, N_c)


def compressed_attention(
    q: Tensor,
    k_cmp: Tensor,
    v_cmp: Tensor,
    block: int,
    stride: int,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The compressed branch: queries q (B, h, N, d_k) attend to the compressed blocks
    k_cmp (B, h_kv, N_c, d_k), v_cmp (B, h_kv, N_c, d_v) whole in their past. Returns the output
    (B, h, N, d_v), zero for a query before the first whole block, and the probabilities
    (B, h, N, N_c) that `select_blocks` ranks blocks by. scale defaults to 1/√d_k."""
    _check_qkv(q, k_cmp, v_cmp, "k_cmp", "v_cmp")
    _check_blocks(block, stride)
    scale = _scale(scale, q.shape[-1])
    visible = _compressed_visible(q.shape[2], k_cmp.shape[2], block, stride, q.device)
    return _attend(q, k_cmp, v_cmp, visible[None, None], scale)


def _overlaps(n_blocks: int, N_c: int, block: int, stride: int, block_size: int, device) -> Tensor:
    """(n_blocks, N_c): the tokens selection block i (i·l' .. (i+1)·l' - 1) shares with
    compressed block j (j·d .. j·d + l - 1). With l = d = l' it is the identity."""
    i = torch.arange(n_blocks, device=device)[:, None]  # (n_blocks, 1)
    j = torch.arange(N_c, device=device)[None, :]  # (1, N_c)
    start = torch.maximum(i * block_size, j * stride)
    end = torch.minimum((i + 1) * block_size, j * stride + block)
    return (end - start).clamp(min=0)  # (n_blocks, N_c)


def _block_token_mask(indices: Tensor, N: int, block_size: int) -> Tensor:
    """indices (B, h_kv, N, n), -1 = none, -> (B, h_kv, N, N) bool: token s lies in a chosen
    block of query t and s <= t."""
    n_blocks = -(-N // block_size)
    chosen = torch.zeros(*indices.shape[:3], n_blocks + 1, dtype=torch.bool, device=indices.device)
    chosen.scatter_(-1, indices.where(indices >= 0, n_blocks), True)  # -1 -> a spare column
    token_block = torch.arange(N, device=indices.device) // block_size  # (N,)
    in_chosen = chosen[..., token_block]  # (B, h_kv, N, N)
    causal = torch.ones(N, N, dtype=torch.bool, device=indices.device).tril()  # (N, N)
    return in_chosen & causal


def select_blocks(
    q: Tensor,
    k_cmp: Tensor,
    block: int,
    stride: int,
    block_size: int,
    n_selected: int,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Each query's n_selected blocks of block_size tokens, chosen by the compressed branch.

    q (B, h, N, d_k), k_cmp (B, h_kv, N_c, d_k) from `compress(k, v, block, stride)`. A
    selection block i scores Σ_j overlap(i, j) · p(t, j), p the compressed attention's
    probabilities averaged over the G query heads of each group; blocks 0, t // l' and
    t // l' - 1 are always chosen; blocks after the query's own are never. Returns
    (indices (B, h_kv, N, n'), allowed (B, h_kv, N, N)): n' = min(n_selected, ⌈N / l'⌉) block
    indices per query in increasing order, -1 where fewer blocks may be chosen, and the bool
    mask, True = may attend: the chosen blocks' tokens s ≤ t.
    """
    B, h, h_kv, N = _check_qkv(q, k_cmp, None, "k_cmp")
    _check_blocks(block, stride)
    check_int(block_size, "block_size", 1)
    check_int(n_selected, "n_selected", 3)  # the first, the previous and the own block fit
    scale = _scale(scale, q.shape[-1])
    N_c = k_cmp.shape[2]
    visible = _compressed_visible(N, N_c, block, stride, q.device)  # (N, N_c)
    _, probs = _attend(q, k_cmp, k_cmp, visible[None, None], scale)  # (B, h, N, N_c)
    probs = probs.view(B, h_kv, h // h_kv, N, N_c).mean(2)  # (B, h_kv, N, N_c): one per group
    n_blocks = -(-N // block_size)
    weights = _overlaps(n_blocks, N_c, block, stride, block_size, q.device).to(probs.dtype)
    block_scores = probs @ weights.T  # (B, h_kv, N, n_blocks)
    own = torch.arange(N, device=q.device)[:, None] // block_size  # (N, 1)
    i = torch.arange(n_blocks, device=q.device)[None, :]  # (1, n_blocks)
    forced = (i == 0) | (i == own) | (i == own - 1)  # (N, n_blocks)
    block_scores = block_scores.masked_fill(forced, float("inf"))
    block_scores = block_scores.masked_fill(i > own, float("-inf"))  # after the query's block
    top = block_scores.topk(min(n_selected, n_blocks), dim=-1)  # (B, h_kv, N, n')
    indices = top.indices.masked_fill(top.values == float("-inf"), n_blocks)
    indices = indices.sort(dim=-1).values  # increasing, the unusable ones (n_blocks) last
    indices = indices.masked_fill(indices == n_blocks, -1)  # (B, h_kv, N, n')
    return indices, _block_token_mask(indices, N, block_size)


def selected_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    indices: Tensor,
    block_size: int,
    scale: float | None = None,
) -> Tensor:
    """The selected branch: each query of q (B, h, N, d_k) attends to the tokens s ≤ t of the
    blocks of block_size tokens its group chose, indices (B, h_kv, N, n) (-1 = none), in
    k (B, h_kv, N, d_k), v (B, h_kv, N, d_v). Returns (B, h, N, d_v)."""
    B, _, h_kv, N = _check_qkv(q, k, v)
    _check_same_length(q, k)
    check_int(block_size, "block_size", 1)
    n_blocks = -(-N // block_size)
    if (
        not isinstance(indices, Tensor)
        or indices.dim() != 4
        or tuple(indices.shape[:3]) != (B, h_kv, N)
        or indices.is_floating_point()
        or indices.dtype == torch.bool
    ):
        raise ValueError(
            f"indices has shape {_shape(indices)}; expected integer block indices "
            f"(B, h_kv, N, n) with (B, h_kv, N) = {(B, h_kv, N)}"
        )
    if indices.numel() and (indices.min() < -1 or indices.max() >= n_blocks):
        raise ValueError(
            f"indices holds values from {int(indices.min())} to {int(indices.max())}; expected "
            f"-1 (none) or a block 0 .. {n_blocks - 1} of ⌈N / block_size⌉ = {n_blocks}"
        )
    allowed = _block_token_mask(indices.long(), N, block_size)  # (B, h_kv, N, N)
    return _attend(q, k, v, allowed, _scale(scale, q.shape[-1]))[0]


def window_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, scale: float | None = None
) -> Tensor:
    """The window branch: query t of q (B, h, N, d_k) attends to keys t - window < s ≤ t of
    k (B, h_kv, N, d_k), v (B, h_kv, N, d_v) (notebook 08's sliding window). (B, h, N, d_v)."""
    _check_qkv(q, k, v)
    _check_same_length(q, k)
    check_int(window, "window", 1)
    N = q.shape[2]
    allowed = bottom_right_window_tensor(N, N, window, q.device)  # (N, N)
    return _attend(q, k, v, allowed[None, None], _scale(scale, q.shape[-1]))[0]


def nsa_branches(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block: int,
    stride: int,
    block_size: int,
    n_selected: int,
    window: int,
    scale: float | None = None,
) -> dict[str, Tensor]:
    """The three branches of NSA on q (B, h, N, d_k), k (B, h_kv, N, d_k), v (B, h_kv, N, d_v):
    {"compressed", "selected", "window"}: (B, h, N, d_v) each, and "indices" (B, h_kv, N, n'),
    the blocks `select_blocks` chose."""
    _check_qkv(q, k, v)
    _check_same_length(q, k)
    k_cmp, v_cmp = compress(k, v, block, stride)  # (B, h_kv, N_c, ·)
    o_cmp, _ = compressed_attention(q, k_cmp, v_cmp, block, stride, scale)
    indices, _ = select_blocks(q, k_cmp, block, stride, block_size, n_selected, scale)
    return {
        "compressed": o_cmp,
        "selected": selected_attention(q, k, v, indices, block_size, scale),
        "window": window_attention(q, k, v, window, scale),
        "indices": indices,
    }


def nsa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    gates: Tensor,
    block: int,
    stride: int,
    block_size: int,
    n_selected: int,
    window: int,
    scale: float | None = None,
) -> Tensor:
    """NSA's output (B, h, N, d_v): g_cmp · o_cmp + g_slc · o_slc + g_win · o_win, with gates
    (B, h, N, 3) the sigmoid's outputs in [0, 1] per query and head, in the branches' order
    (compressed, selected, window). Arguments as `nsa_branches`."""
    B, h, _, N = _check_qkv(q, k, v)
    if not isinstance(gates, Tensor) or tuple(gates.shape) != (B, h, N, 3):
        raise ValueError(
            f"gates has shape {_shape(gates)}; expected (B, h, N, 3) = {(B, h, N, 3)}, "
            "one gate per query, head and branch"
        )
    if not gates.is_floating_point() or (gates.numel() and (gates.min() < 0 or gates.max() > 1)):
        raise ValueError(
            "gates must hold a sigmoid's outputs, numbers in [0, 1]; pass torch.sigmoid(logits)"
        )
    out = nsa_branches(q, k, v, block, stride, block_size, n_selected, window, scale)
    g = gates.to(q.dtype)[..., None]  # (B, h, N, 3, 1)
    return (
        g[..., 0, :] * out["compressed"]
        + g[..., 1, :] * out["selected"]
        + g[..., 2, :] * out["window"]
    )


class NativeSparseAttention(nn.Module):
    """NSA as a layer: x (B, N, C) -> (B, N, C), causal, no positions of its own.

    q_proj (C -> h·d_k), k_proj (C -> h_kv·d_k), v_proj (C -> h_kv·d_v), gate_proj (C -> h·3,
    with a bias: the gates σ(x W_g + b_g), per query, head and branch), out_proj (h·d_v -> C);
    nn.Linear layouts (out, in). The branches' sizes as `nsa_branches`.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int,
        d_k: int,
        d_v: int,
        block: int,
        stride: int,
        block_size: int,
        n_selected: int,
        window: int,
    ) -> None:
        super().__init__()
        C = check_int(d_model, "d_model", 1)
        h, h_kv = check_int(num_heads, "num_heads", 1), check_int(num_kv_heads, "num_kv_heads", 1)
        if h % h_kv:
            raise ValueError(
                f"num_kv_heads = {h_kv}; expected a divisor of num_heads = {h} (GQA groups)"
            )
        d_k, d_v = check_int(d_k, "d_k", 1), check_int(d_v, "d_v", 1)
        _check_blocks(block, stride)
        check_int(block_size, "block_size", 1)
        check_int(n_selected, "n_selected", 3)
        check_int(window, "window", 1)
        self.d_model, self.num_heads, self.num_kv_heads, self.d_k, self.d_v = C, h, h_kv, d_k, d_v
        self.sizes = dict(
            block=block, stride=stride, block_size=block_size, n_selected=n_selected, window=window
        )
        self.q_proj = nn.Linear(C, h * d_k, bias=False)
        self.k_proj = nn.Linear(C, h_kv * d_k, bias=False)
        self.v_proj = nn.Linear(C, h_kv * d_v, bias=False)
        self.gate_proj = nn.Linear(C, h * 3)
        self.out_proj = nn.Linear(h * d_v, C, bias=False)

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """q (B, h, N, d_k), k (B, h_kv, N, d_k), v (B, h_kv, N, d_v), gates (B, h, N, 3)."""
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x has shape {_shape(x)}; expected (B, N, C) with C = {self.d_model}")
        B, N, _ = x.shape
        h, h_kv = self.num_heads, self.num_kv_heads
        q = self.q_proj(x).view(B, N, h, self.d_k).transpose(1, 2)  # (B, h, N, d_k)
        k = self.k_proj(x).view(B, N, h_kv, self.d_k).transpose(1, 2)  # (B, h_kv, N, d_k)
        v = self.v_proj(x).view(B, N, h_kv, self.d_v).transpose(1, 2)  # (B, h_kv, N, d_v)
        gates = torch.sigmoid(self.gate_proj(x)).view(B, N, h, 3).transpose(1, 2)  # (B, h, N, 3)
        return q, k, v, gates

    def forward(self, x: Tensor) -> Tensor:
        q, k, v, gates = self.heads(x)
        out = nsa_attention(q, k, v, gates, **self.sizes)  # (B, h, N, d_v)
        B, _, N, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, N, -1))  # (B, N, C)
