"""Ring attention: a sequence split over P ranks, the keys and values passed around a ring.

Derived in notebook 14 §4 (Liu, Zaharia and Abbeel 2023, "Ring attention with blockwise
transformers"). Each rank holds the queries, keys and values of its own tokens. In P steps
every rank sees every block of keys and values: at each step it posts the send of the block it
holds to the next rank and the receive of the previous rank's block, attends its queries to the
block it holds meanwhile, then waits for the transfer. The partial results, one per block, are
merged by their log-sum-exp (`merge_partials`: notebook 08's online softmax, applied to whole
blocks), with the blocks computed by `mha_lib.nn.flash.flash_attention_forward`.

Layouts. The N tokens are cut into 2P chunks of nearly equal size (`chunk_bounds`), and each
rank holds two of them (`layout_chunks`):
- "contiguous": rank r holds chunks 2r and 2r + 1, one run of consecutive tokens;
- "zigzag": rank r holds chunks r and 2P - 1 - r, one early and one late.
Under a causal mask a query chunk a needs key chunk b fully when a > b, half (the causal
triangle) when a = b, and not at all when a < b (`block_kind`). With the contiguous layout the
last rank needs every block and the first almost none, so at every step most ranks wait for
the last; the zigzag layout gives every rank the same work at every step (`work_per_step`).

What it holds:
- `chunk_bounds(N, world_size)`, `layout_chunks(layout, world_size)`,
  `rank_positions(N, world_size, layout, rank)`: who holds which tokens;
- `split_sequence(x, world_size, layout)` and `gather_sequence(blocks, N, layout)`: a
  (B, h, N, d) tensor cut into the ranks' blocks and put back together;
- `merge_partials(o_a, lse_a, o_b, lse_b)`: two partial attentions over disjoint sets of keys
  combined into the attention over both;
- `block_kind(a, b, is_causal)` and `work_per_step(world_size, layout, is_causal)`: the chunk
  pairs each rank computes or skips at each step, counted without running anything;
- `ring_attention_rank(q, k, v, N, M, is_causal, layout)`: worker, this rank's share;
- `ring_attention_backward_rank(...)`: worker, the gradients on the same ring, each block's
  dk and dv travelling one step behind it; `ring_attention_grad_rank(...)` both passes;
- `gathered_attention_rank(...)`: worker, the alternative: gather every key and value on
  every rank (with the counted ring all-gather), then attend;
- `ring_kv_bytes(...)`: the bytes one rank sends, and the key/value numbers it holds at once,
  for the ring and for gathering;
- `rank_calls(q, k, v, world_size, ...)`: the call each rank makes on its own chunks;
- `ring_attention_spawn(q, k, v, world_size, is_causal=False, layout=None)`: the whole thing on
  world_size new processes; returns the output (B, h, N, d_v).

Shapes: q (B, h, N, d_k), k (B, h, M, d_k), v (B, h, M, d_v); M = N when causal. o (B, h, N,
d_v), lse (B, h, N).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from .._checks import check_int
from ..nn.flash import flash_attention_backward, flash_attention_forward
from .collectives import Traffic, finish_ring_pass, ring_all_gather, start_ring_pass
from .launch import rank_device, run

__all__ = [
    "LAYOUTS",
    "block_kind",
    "chunk_bounds",
    "gather_sequence",
    "gathered_attention_rank",
    "layout_chunks",
    "merge_partials",
    "rank_calls",
    "rank_positions",
    "ring_attention_backward_rank",
    "ring_attention_grad_rank",
    "ring_attention_rank",
    "ring_attention_spawn",
    "ring_kv_bytes",
    "split_sequence",
    "work_per_step",
]

LAYOUTS = ("contiguous", "zigzag")


# ----------------------------------------------------------------------------- who holds what


def _check_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    return layout


def _check_length(N, world_size, name: str = "N") -> None:
    check_int(world_size, "world_size", 1)
    if N < 2 * world_size:
        raise ValueError(
            f"{name} = {N} tokens cannot give each of world_size = {world_size} ranks two "
            f"chunks: need {name} >= 2 · world_size = {2 * world_size}"
        )


def chunk_bounds(N: int, world_size: int) -> list[tuple[int, int]]:
    """(start, stop) of the 2P chunks of N tokens; sizes differ by at most one (larger first)."""
    check_int(N, "N", 1)
    _check_length(N, world_size)
    size, extra = divmod(N, 2 * world_size)
    bounds, start = [], 0
    for c in range(2 * world_size):
        stop = start + size + (c < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def layout_chunks(layout: str, world_size: int) -> list[tuple[int, int]]:
    """The two chunk indices each rank holds: (2r, 2r + 1) contiguous, (r, 2P - 1 - r) zigzag."""
    _check_layout(layout)
    P = check_int(world_size, "world_size", 1)
    if layout == "contiguous":
        return [(2 * r, 2 * r + 1) for r in range(P)]
    return [(r, 2 * P - 1 - r) for r in range(P)]


def rank_positions(N: int, world_size: int, layout: str, rank: int) -> Tensor:
    """The positions (in 0 .. N-1) of the tokens `rank` holds, in the order it holds them."""
    bounds = chunk_bounds(N, world_size)
    return torch.cat([torch.arange(*bounds[c]) for c in layout_chunks(layout, world_size)[rank]])


def split_sequence(x: Tensor, world_size: int, layout: str) -> list[Tensor]:
    """x (B, h, N, d) -> one (B, h, n_r, d) tensor per rank, each with its own storage."""
    N = x.shape[2]
    return [
        x[:, :, rank_positions(N, world_size, layout, r)].contiguous() for r in range(world_size)
    ]


def gather_sequence(blocks: list[Tensor], N: int, layout: str) -> Tensor:
    """The ranks' blocks (B, h, n_r, d) put back in token order: (B, h, N, d)."""
    P = len(blocks)
    out = blocks[0].new_empty(*blocks[0].shape[:2], N, *blocks[0].shape[3:])
    for r, block in enumerate(blocks):
        out[:, :, rank_positions(N, P, layout, r)] = block
    return out


# ------------------------------------------------------------------------------ the merge


def merge_partials(o_a: Tensor, lse_a: Tensor, o_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Attention over keys A ∪ B from the attention over A and over B (disjoint key sets).

    o_a, o_b (..., n, d_v): softmax-weighted values over each set; lse_a, lse_b (..., n): the
    log-sum-exp of each row's scores over that set (-inf for a row that saw no key). With
    L = log(e^{lse_a} + e^{lse_b}): o = e^{lse_a - L} o_a + e^{lse_b - L} o_b; returns (o, L).
    """
    lse = torch.logaddexp(lse_a, lse_b)  # (..., n)
    safe = lse.masked_fill(lse == -math.inf, 0.0)  # rows with no key in either: weights 0
    w_a = torch.exp(lse_a - safe)[..., None]  # (..., n, 1): the share of A's keys
    w_b = torch.exp(lse_b - safe)[..., None]
    return w_a * o_a + w_b * o_b, lse


# ---------------------------------------------------------------------------- the work, counted


def block_kind(a: int, b: int, is_causal: bool) -> str:
    """Query chunk a against key chunk b: "full", "diagonal" (causal triangle) or "skipped"."""
    if not is_causal or a > b:
        return "full"
    return "diagonal" if a == b else "skipped"


def work_per_step(world_size: int, layout: str, is_causal: bool) -> list[list[int]]:
    """[step][rank]: the chunk pairs (query chunk, key chunk) rank computes at that step.

    At step t rank r holds the keys and values of rank (r - t) mod P. Each rank holds 2 chunks,
    so 4 pairs per step; a diagonal pair counts as one (half its scores are masked, but a
    kernel computes the tile). Skipped pairs are 4 minus the count.
    """
    P = check_int(world_size, "world_size", 1)
    chunks = layout_chunks(layout, P)
    table = []
    for t in range(P):
        row = []
        for r in range(P):
            kv = chunks[(r - t) % P]
            row.append(sum(block_kind(a, b, is_causal) != "skipped" for a in chunks[r] for b in kv))
        table.append(row)
    return table


def ring_kv_bytes(
    B: int, h: int, M: int, d_k: int, d_v: int, world_size: int, bytes_per_number: int = 4
) -> dict[str, int]:
    """Per rank, for M keys and values split evenly over P ranks (M divisible by 2P):
    "ring_sent": bytes sent by the ring (P - 1 blocks); "gather_sent": bytes sent by a ring
    all-gather of every block (the same); "ring_held" / "gather_held": key/value numbers held at
    once (the block being used and the one arriving, against all M)."""
    for name, value in (("B", B), ("h", h), ("M", M), ("d_k", d_k), ("d_v", d_v)):
        check_int(value, name, 1)
    P = check_int(world_size, "world_size", 1)
    if M % (2 * P):
        raise ValueError(f"M = {M} is not divisible by 2 · world_size = {2 * P}")
    block = B * h * (M // P) * (d_k + d_v)  # numbers in one rank's keys and values
    return {
        "ring_sent": (P - 1) * block * bytes_per_number,
        "gather_sent": (P - 1) * block * bytes_per_number,
        "ring_held": (2 if P > 1 else 1) * block,
        "gather_held": P * block,
    }


# ------------------------------------------------------------------------------ on each rank


def _pieces(x: Tensor, bounds: list[tuple[int, int]], chunks: tuple[int, ...]) -> list[Tensor]:
    sizes = [bounds[c][1] - bounds[c][0] for c in chunks]
    return list(x.split(sizes, dim=2))


def ring_attention_rank(
    q: Tensor, k: Tensor, v: Tensor, N: int, M: int, is_causal: bool, layout: str
) -> dict:
    """Worker: this rank's queries attend to every rank's keys and values, passed around a ring.

    q (B, h, n_r, d_k), k (B, h, m_r, d_k), v (B, h, m_r, d_v): this rank's two chunks
    (`split_sequence`) of a sequence of N queries and M keys. Returns {"o" (B, h, n_r, d_v),
    "lse" (B, h, n_r), "work": [(computed, skipped) chunk pairs per step], "traffic"}.
    """
    r, P = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    q, k, v = q.to(device), k.to(device), v.to(device)
    q_bounds, kv_bounds = chunk_bounds(N, P), chunk_bounds(M, P)
    chunks = layout_chunks(layout, P)
    if q.shape[2] != sum(q_bounds[c][1] - q_bounds[c][0] for c in chunks[r]):
        raise ValueError(
            f"rank {r}: q has {q.shape[2]} tokens; the {layout} layout gives it "
            f"chunks {chunks[r]} of N = {N} tokens"
        )
    d_k = q.shape[3]
    q_parts = _pieces(q, q_bounds, chunks[r])  # 2 x (B, h, chunk, d_k)
    o = [q.new_zeros(*p.shape[:3], v.shape[3]) for p in q_parts]  # 2 x (B, h, chunk, d_v)
    lse = [q.new_full(p.shape[:3], -math.inf) for p in q_parts]  # 2 x (B, h, chunk)
    kv = torch.cat([k, v], dim=-1).contiguous()  # (B, h, m_r, d_k + d_v): one message
    traffic, work = Traffic(), []
    for t in range(P):
        src = (r - t) % P  # whose keys and values this rank holds now
        if t < P - 1:  # post the next transfer first: it runs while this block is computed
            nxt = (r - t - 1) % P
            incoming = kv.new_empty(*kv.shape[:2], _length(kv_bounds, chunks[nxt]), kv.shape[3])
            requests = start_ring_pass(kv, incoming)
        k_src, v_src = kv[..., :d_k], kv[..., d_k:]
        k_parts = _pieces(k_src, kv_bounds, chunks[src])
        v_parts = _pieces(v_src, kv_bounds, chunks[src])
        computed = skipped = 0
        for i, a in enumerate(chunks[r]):
            for j, b in enumerate(chunks[src]):
                kind = block_kind(a, b, is_causal)
                if kind == "skipped":
                    skipped += 1
                    continue
                o_ab, lse_ab = flash_attention_forward(
                    q_parts[i], k_parts[j], v_parts[j], is_causal=kind == "diagonal"
                )
                o[i], lse[i] = merge_partials(o[i], lse[i], o_ab, lse_ab)
                computed += 1
        work.append((computed, skipped))
        if t < P - 1:
            finish_ring_pass(requests, kv, incoming, traffic, "kv")
            kv = incoming
    return {
        "o": torch.cat(o, dim=2).cpu(),
        "lse": torch.cat(lse, dim=2).cpu(),
        "work": work,
        "traffic": traffic,
    }


def _length(bounds, chunks) -> int:
    return sum(bounds[c][1] - bounds[c][0] for c in chunks)


def ring_attention_backward_rank(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    do: Tensor,
    N: int,
    M: int,
    is_causal: bool,
    layout: str,
) -> dict:
    """Worker: the gradients of ring attention, computed on the same ring.

    q, k, v as in `ring_attention_rank`; o (B, h, n_r, d_v) and lse (B, h, n_r) what it returned
    on this rank; do (B, h, n_r, d_v) the gradient of the loss with respect to o. Each block of
    keys and values travels the ring as in the forward pass, and its gradient (dk, dv) travels
    one step behind it: every rank adds its share (`nn.flash.flash_attention_backward`, which
    recomputes the weights from q, k and the final lse) and passes it on, and after P steps each
    block's gradient reaches its owner. Returns {"dq", "dk", "dv", "traffic"}.
    """
    r, P = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    q, k, v, o, lse, do = (x.to(device) for x in (q, k, v, o, lse, do))
    q_bounds, kv_bounds = chunk_bounds(N, P), chunk_bounds(M, P)
    chunks = layout_chunks(layout, P)
    d_k = q.shape[3]
    q_parts, o_parts, lse_parts, do_parts = (
        _pieces(x, q_bounds, chunks[r]) for x in (q, o, lse, do)
    )  # 2 x (B, h, chunk, ...) each
    dq = torch.zeros_like(q)  # (B, h, n_r, d_k)
    dq_parts = _pieces(dq, q_bounds, chunks[r])  # views into dq
    kv = torch.cat([k, v], dim=-1).contiguous()  # (B, h, m_r, d_k + d_v)
    dkv = torch.zeros_like(kv)  # the gradient of the block held, gathered on its way round
    traffic = Traffic()
    for t in range(P):
        src = (r - t) % P
        nxt = (r - t - 1) % P  # whose block arrives next (after the last step: this rank's own)
        if t < P - 1:
            incoming = kv.new_empty(*kv.shape[:2], _length(kv_bounds, chunks[nxt]), kv.shape[3])
            requests = start_ring_pass(kv, incoming)
        k_parts = _pieces(kv[..., :d_k], kv_bounds, chunks[src])
        v_parts = _pieces(kv[..., d_k:], kv_bounds, chunks[src])
        dk_parts = _pieces(dkv[..., :d_k], kv_bounds, chunks[src])  # views into dkv
        dv_parts = _pieces(dkv[..., d_k:], kv_bounds, chunks[src])
        for i, a in enumerate(chunks[r]):
            for j, b in enumerate(chunks[src]):
                kind = block_kind(a, b, is_causal)
                if kind == "skipped":
                    continue
                dq_ab, dk_ab, dv_ab = flash_attention_backward(
                    do_parts[i],
                    q_parts[i],
                    k_parts[j],
                    v_parts[j],
                    o_parts[i],
                    lse_parts[i],
                    is_causal=kind == "diagonal",
                )
                dq_parts[i] += dq_ab
                dk_parts[j] += dk_ab
                dv_parts[j] += dv_ab
        if P > 1:  # the gradient follows its block to the next rank
            grads = dkv.new_empty(*dkv.shape[:2], _length(kv_bounds, chunks[nxt]), dkv.shape[3])
            finish_ring_pass(start_ring_pass(dkv, grads, tag=1), dkv, grads, traffic, "dkv")
            dkv = grads
        if t < P - 1:
            finish_ring_pass(requests, kv, incoming, traffic, "kv")
            kv = incoming
    return {
        "dq": dq.cpu(),
        "dk": dkv[..., :d_k].cpu(),
        "dv": dkv[..., d_k:].cpu(),
        "traffic": traffic,
    }


def ring_attention_grad_rank(
    q: Tensor, k: Tensor, v: Tensor, do: Tensor, N: int, M: int, is_causal: bool, layout: str
) -> dict:
    """Worker: one forward and one backward pass of ring attention on this rank; returns
    {"o", "dq", "dk", "dv"} (this rank's chunks) and the bytes of both passes."""
    forward = ring_attention_rank(q, k, v, N, M, is_causal, layout)
    o, lse = forward["o"], forward["lse"]
    grads = ring_attention_backward_rank(q, k, v, o, lse, do, N, M, is_causal, layout)
    return {"o": o, **grads, "forward_traffic": forward["traffic"]}


def gathered_attention_rank(
    q: Tensor, k: Tensor, v: Tensor, N: int, M: int, is_causal: bool, layout: str
) -> dict:
    """Worker: the alternative to the ring: gather every rank's keys and values (counted ring
    all-gather), then attend this rank's queries to all of them. Same inputs as
    `ring_attention_rank`; returns {"o", "traffic", "held"} (held: key/value numbers at once)."""
    r, P = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    q = q.to(device)
    kv = torch.cat([k, v], dim=-1).contiguous().to(device)  # (B, h, m_r, d_k + d_v)
    B, h, _, d = kv.shape
    chunks = layout_chunks(layout, P)
    kv_bounds = chunk_bounds(M, P)
    sizes = [B * h * _length(kv_bounds, chunks[j]) * d for j in range(P)]
    traffic = Traffic()
    flat = ring_all_gather(kv.reshape(-1), sizes, traffic)  # every rank's block, in rank order
    blocks = [b.view(B, h, -1, d) for b in flat.split(sizes)]
    everything = gather_sequence(blocks, M, layout)  # (B, h, M, d_k + d_v), token order
    positions_q = rank_positions(N, P, layout, r).to(device)
    mask = None
    if is_causal:  # (n_r, M), True = may attend
        mask = positions_q[:, None] >= torch.arange(M, device=device)[None, :]
    o = torch.nn.functional.scaled_dot_product_attention(
        q, everything[..., : q.shape[3]], everything[..., q.shape[3] :], attn_mask=mask
    )
    return {"o": o.cpu(), "traffic": traffic, "held": everything.numel()}


# ------------------------------------------------------------------------------- from outside


def _check_qkv(q, k, v, is_causal) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or not torch.is_floating_point(x) or x.dim() != 4:
            got = (
                f"shape {tuple(x.shape)}, {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
            )
            raise ValueError(f"{name} has {got}; expected a floating-point (B, h, tokens, d)")
    B, h, N, d_k = q.shape
    if k.shape[:2] != (B, h) or k.shape[3] != d_k or k.dtype != q.dtype:
        raise ValueError(
            f"k has shape {tuple(k.shape)}, {k.dtype}; expected (B, h, M, d_k) = "
            f"({B}, {h}, M, {d_k}), {q.dtype}, from q"
        )
    if v.shape[:3] != k.shape[:3] or v.dtype != q.dtype:
        raise ValueError(
            f"v has shape {tuple(v.shape)}, {v.dtype}; expected (B, h, M, d_v) "
            f"with (B, h, M) = {tuple(k.shape[:3])} from k, {q.dtype}"
        )
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool; got {type(is_causal).__name__}")
    if is_causal and k.shape[2] != N:
        raise ValueError(
            f"is_causal=True needs as many keys as queries; got N = {N} queries "
            f"and M = {k.shape[2]} keys"
        )


def rank_calls(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    world_size: int,
    is_causal: bool = False,
    layout: str | None = None,
    worker=ring_attention_rank,
    do: Tensor | None = None,
) -> list[tuple]:
    """For each rank, (worker, its arguments): the call it makes on its own chunks of q, k, v.

    worker: `ring_attention_rank` or `gathered_attention_rank`, or `ring_attention_grad_rank`
    with do (B, h, N, d_v), the gradient of the output, cut the same way; layout defaults as in
    `ring_attention_spawn`. Run them with `launch.run(launch.in_turn, ...)`, several per group.
    """
    _check_qkv(q, k, v, is_causal)
    check_int(world_size, "world_size", 1)
    layout = _check_layout(layout or ("zigzag" if is_causal else "contiguous"))
    N, M = q.shape[2], k.shape[2]
    _check_length(N, world_size, "N")
    _check_length(M, world_size, "M")
    if do is not None and do.shape != (*q.shape[:3], v.shape[3]):
        raise ValueError(
            f"do has shape {tuple(do.shape)}; expected (B, h, N, d_v) = "
            f"{(*q.shape[:3], v.shape[3])}, the output's"
        )
    tensors = (q, k, v) if do is None else (q, k, v, do)
    blocks = zip(*(split_sequence(x.detach().cpu(), world_size, layout) for x in tensors))
    return [(worker, (*b, N, M, is_causal, layout)) for b in blocks]  # rank r: its chunks only


def ring_attention_spawn(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    world_size: int,
    is_causal: bool = False,
    layout: str | None = None,
    **run_options,
) -> Tensor:
    """Ring attention over world_size new processes: the output (B, h, N, d_v), gathered.

    Each rank receives only its two chunks of q, k and v (`split_sequence`); layout defaults to
    "zigzag" when causal (every rank the same work), else "contiguous". Equals
    `F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)` up to the order of the sums.
    run_options go to `launch.run` (timeout, comm_timeout, backend).
    """
    layout = layout or ("zigzag" if is_causal else "contiguous")
    calls = rank_calls(q, k, v, world_size, is_causal, layout)
    results = run(ring_attention_rank, world_size, per_rank=[a for _, a in calls], **run_options)
    return gather_sequence([res["o"] for res in results], q.shape[2], layout).to(q.device)
