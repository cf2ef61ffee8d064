"""`python -m mha_lib.bench sparse`: attention over the k keys an indexer chooses (notebook 18,
`mha_lib.sparse_attention`) against dense causal attention over all N, at growing N.

One layer's attention core on plain heads, after the projections: B = 1 sequence, h = 8 heads
of d_k = d_v = 128 (`--heads`, `--head-dim`), float32, random queries, keys and values; the
indexer is the library's `LightningIndexer` with H = 4 index heads of D = 128, its first
d_R = 64 numbers turned by RoPE (`--index-heads`, `--index-dim`, `--rope-dim`): one sixteenth
of DeepSeek-V3.2's 128 heads and 64 index heads, its D. Per (query, key) pair the indexer does
2·H·D = 1024 FLOPs and dense attention 2·h·(d_k + d_v) = 4096: 1/4 (DeepSeek-V3.2's: 2·64·128
against 2·128·(192 + 128), 1/5, and it scores in FP8). But the library's indexer scores all N²
pairs and then masks, where dense causal attention does the N²/2 causal ones: counted in FLOPs
the indexer is half of dense attention, so indexer + top-k attention can be at most about 2×
faster than dense here, however small k. Each query chooses k = 256 keys (`--topk`), all of its
earlier keys while it has fewer.

For each N (`--sizes`, default 512 to 8192; medians of interleaved rounds, `--repeats`):
(a) dense: `F.scaled_dot_product_attention(q, k, v, is_causal=True)` over the N keys;
(b) top-k attention, two ways, given the indexer's choice (computed once, outside the timing):
    - mask: what the library does (`SparseMLA` passes `causal_topk`'s (B, N, N) mask to
      `MultiHeadLatentAttention`, which ands it with its causal mask and calls SDPA with it):
      the same arithmetic as dense attention without `is_causal`, over all N² pairs, so it saves
      no work;
    - gathered: the way that saves work: the k chosen keys and values of each query copied out,
      (h, n, k, d) for a block of n queries at a time (at most 8 MiB), then attention of each
      query over its k keys: 2·h·N·k·(d_k + d_v) FLOPs, linear in N, but every chosen key and
      value is copied once per query that chose it (a fused kernel reads them in place);
(c) the indexer alone: the index scores Σ_h w_h · ReLU(q_h · k / √D) from its projections on
    (`LightningIndexer.forward` less the projections x -> q_h, k, w, which are per-token work
    like the attention's own projections, timed nowhere; the scores are asserted equal to
    `LightningIndexer.forward`'s) and `causal_topk`, the choice as indices and as the mask.
Reported: the times, dense / sparse (sparse = indexer + top-k attention, each way), the
indexer's share of the sparse total, and the smallest N from which indexer + gathered keys is
faster than dense at every larger N measured (or "at no N up to ..."). Then one decoding step
(`--decode-sizes`, default 1024 to 65536 cached tokens; each timed call runs 20 steps): one
query over N cached keys (dense), the same under the one-row mask, over its k gathered keys,
and the indexer's step (one query's scores against N cached index keys, then top-k).

Before timing, at every N, the gathered path's output is checked against the mask path's (the
same k keys: they must agree to float32 rounding); if they differ the benchmark prints it and
exits with status 1. `--tiny`: B = 2, h = 2, d = 8, H = 2, D = 8, k = 8 at N = 6 and 20 (below
and above k): the whole benchmark in seconds (the test's mode; its times mean nothing).
`--device cuda` runs it on a GPU; `--threads` sets torch's CPU threads; `--json PATH` writes the
numbers, `--markdown PATH` prints docs/benchmarks.md's tables from them.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import Tensor

from ..nn.masks import bottom_right_causal_tensor
from ..sparse_attention import IndexerCache, LightningIndexer, causal_topk
from .cli import add_common_arguments, tables_or_threads, write_numbers
from .timing import interleaved_medians
from .torch_mha import synchronize

GATHER_BYTES = 8 * 2**20  # the gathered keys and values of one block of queries, at most (on
# the 2-core CPU at N = 2048, blocks of 8 MiB took about a third of the time of 64 MiB ones)
TOLERANCE = 1e-4  # gathered vs mask, relative to max |o|: float32 rounding stays far below
SCORE_TOLERANCE = 1e-6  # ours vs the library's index scores, relative to their max |I|: a
# decoding step's one-row product rounds otherwise than the library's (B, 1, H, D) @ (B, D, N)
DECODE_STEPS = 20  # decoding steps per timed call
TINY = dict(B=2, heads=2, head_dim=8, index_heads=2, index_dim=8, rope_dim=4, topk=8, sizes=[6, 20])


# ---------------------------------------------------------------------------- the four paths


def dense_attention(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal attention of n queries (B, h, n, d_k) over m keys, the last n of them the queries'
    own tokens: (B, h, n, d_v). is_causal (top-left aligned) where n = m, no mask for one query."""
    n, m = q.shape[2], k.shape[2]
    if n == 1:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    if n != m:
        raise ValueError(f"{n} queries over {m} keys: expected n = m or n = 1")
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def masked_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float) -> Tensor:
    """What `SparseMLA` does: the indexer's mask allowed (B, n, m), True = may attend, and-ed
    with the bottom-right causal mask, given to SDPA: (B, h, n, d_v)."""
    causal = bottom_right_causal_tensor(q.shape[2], k.shape[2], q.device)  # (n, m)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & allowed[:, None], scale=scale)


def gathered_attention(
    q: Tensor, k: Tensor, v: Tensor, indices: Tensor, scale: float, budget: int = GATHER_BYTES
) -> Tensor:
    """Attention of each query (B, h, n, d_k) over only its chosen keys: indices (B, n, k'), -1
    where a query has fewer (`causal_topk`'s), into the m keys (B, h, m, d_k) and values
    (B, h, m, d_v). The chosen keys and values are copied out for a block of queries at a time,
    (h, n_block, k', d), at most `budget` bytes: (B, h, n, d_v)."""
    B, h, n, d_k = q.shape
    d_v, kk = v.shape[-1], indices.shape[-1]
    valid = indices >= 0  # (B, n, k'): every query has at least itself
    idx = indices.clamp(min=0)
    block = max(1, min(n, budget // (h * kk * (d_k + d_v) * q.element_size())))
    out = q.new_empty(B, h, n, d_v)
    # two buffers reused by every block: a fresh 8 MiB tensor per block is mapped and faulted in
    # anew (on the 2-core CPU that made N = 4096 take 30 s instead of about 1)
    k_buf, v_buf = q.new_empty(h, block * kk, d_k), q.new_empty(h, block * kk, d_v)
    for b in range(B):
        for s in range(0, n, block):
            e = min(n, s + block)
            if (e - s) * kk != k_buf.shape[1]:  # the last, shorter block
                k_buf, v_buf = q.new_empty(h, (e - s) * kk, d_k), q.new_empty(h, (e - s) * kk, d_v)
            flat = idx[b, s:e].reshape(-1)  # (n_block·k',)
            torch.index_select(k[b], 1, flat, out=k_buf)  # (h, n_block·k', d_k)
            torch.index_select(v[b], 1, flat, out=v_buf)  # (h, n_block·k', d_v)
            k_sel = k_buf.view(h, e - s, kk, d_k)  # (h, n_block, k', d_k)
            v_sel = v_buf.view(h, e - s, kk, d_v)  # (h, n_block, k', d_v)
            scores = (k_sel @ q[b, :, s:e, :, None])[..., 0]  # (h, n_block, k')
            scores = (scores * scale).masked_fill(~valid[b, s:e], float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (h, n_block, k')
            out[b, :, s:e] = (weights[:, :, None] @ v_sel)[:, :, 0]  # (h, n_block, d_v)
    return out


def index_scores(q_I: Tensor, k_I: Tensor, w: Tensor, scale: float) -> Tensor:
    """`LightningIndexer.forward` from its projections on: index queries q_I (B, n, H, D), the m
    index keys k_I (B, m, D), the weights w (B, n, H) already times 1/√H, scale 1/√D:
    Σ_h w_h · ReLU(q_h · k · scale) (B, n, m), -inf after each query's token."""
    n, m = q_I.shape[1], k_I.shape[1]
    dots = q_I @ k_I.transpose(1, 2)[:, None]  # (B, n, H, m)
    relu = F.relu(dots * scale)  # (B, n, H, m)
    scores = (w[:, :, None] @ relu)[:, :, 0]  # (B, n, m)
    causal = bottom_right_causal_tensor(n, m, q_I.device)  # (n, m)
    return scores.masked_fill(~causal, float("-inf"))


# ---------------------------------------------------------------------------- the inputs


class Layer:
    """The sizes and the random inputs of one layer: queries, keys and values (B, h, N, d) and
    the indexer's q_I (B, N, H, D), k_I (B, N, D), w (B, N, H) at positions 0 .. N - 1."""

    def __init__(self, B, heads, head_dim, index_heads, index_dim, rope_dim, topk, device):
        self.B, self.h, self.d, self.topk, self.device = B, heads, head_dim, topk, device
        self.scale = head_dim**-0.5
        C, r_q = heads * head_dim, heads * head_dim // 2  # x and c_Q: inputs of the projections
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            indexer = LightningIndexer(C, r_q, index_heads, index_dim, rope_dim)
        self.indexer = indexer.to(device).eval()
        self.H, self.D = index_heads, index_dim

    def inputs(self, N: int, seed: int = 0, decode: bool = False):
        """q, k, v (B, h, N, d) and the indexer's q_I, k_I, w. The index scores that are timed
        are checked against the library's on the same x and c_Q: `LightningIndexer.forward`
        over the N tokens (prefill) or, decode=True, the last token's step with the N - 1 others
        in an `IndexerCache` (its scores (B, 1, N) only: the whole matrix is not made)."""
        gen = torch.Generator().manual_seed(seed)
        B, h, d, dev = self.B, self.h, self.d, self.device
        q, k, v = (torch.randn(B, h, N, d, generator=gen).to(dev) for _ in range(3))
        x = torch.randn(B, N, self.indexer.d_model, generator=gen).to(dev)
        c_Q = torch.randn(B, N, self.indexer.q_lora_rank, generator=gen).to(dev)
        ix, pos = self.indexer, torch.arange(N, device=dev)
        with torch.inference_mode():
            q_I, k_I = ix.queries(c_Q, pos), ix.keys(x, pos)  # (B, N, H, D), (B, N, D)
            w = ix.weights_proj(x) * ix.index_n_heads**-0.5  # (B, N, H)
            if decode:
                cache = IndexerCache()
                cache.append(k_I[:, :-1])  # the N - 1 tokens before the step
                theirs = ix(x[:, -1:], c_Q[:, -1:], cache=cache)  # (B, 1, N)
                ours = index_scores(q_I[:, -1:], k_I, w[:, -1:], ix.scale)
            else:
                ours, theirs = index_scores(q_I, k_I, w, ix.scale), ix(x, c_Q)  # (B, N, N)
        blocked = torch.isinf(theirs)  # -inf after each query's token
        difference = (ours - theirs).masked_fill(blocked, 0).abs().max().item()
        difference /= theirs.masked_fill(blocked, 0).abs().max().item()
        if not (torch.equal(torch.isinf(ours), blocked) and difference <= SCORE_TOLERANCE):
            raise AssertionError(
                f"N = {N}: the timed index scores differ from LightningIndexer.forward's "
                f"(by up to {difference:.2e} of max |I|, or where they are -inf)"
            )
        return q, k, v, q_I, k_I, w

    def flops(self, N: int) -> dict:
        """Counted multiply-adds × 2 of the prefill over N tokens."""
        h, d, k = self.h, self.d, min(self.topk, N)
        return {
            "dense_gflop": 2 * h * 2 * d * N * (N + 1) / 2 / 1e9,  # causal pairs only
            "gathered_gflop": 2 * h * 2 * d * N * k / 1e9,  # (the first k queries pay k too)
            "indexer_gflop": 2 * self.H * self.D * N * N / 1e9,  # every pair, then masked
        }


def _relative(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item() / b.abs().max().item()


def _check(label: str, gathered: Tensor, masked: Tensor) -> float:
    difference = _relative(gathered, masked)
    if not difference <= TOLERANCE:
        print(
            f"{label}: attention over the gathered keys differs from the mask path by "
            f"{difference:.2e} of max |o| (tolerance {TOLERANCE:.0e}): the two ways of attending "
            "to the chosen keys disagree"
        )
        sys.exit(1)
    return difference


def _synced(fn, device, steps: int = 1):
    def timed():
        for _ in range(steps):
            out = fn()
        synchronize(device)
        return out

    return timed


# ---------------------------------------------------------------------------- the benchmark


def bench_prefill(layer: Layer, sizes, repeats: int) -> list[dict]:
    """Dense, masked, gathered and the indexer over N tokens, each N timed on its own."""
    rows, dev, scale = [], layer.device, layer.scale
    for N in sizes:
        q, k, v, q_I, k_I, w = layer.inputs(N)
        with torch.inference_mode():
            indices, allowed = causal_topk(
                index_scores(q_I, k_I, w, layer.indexer.scale), layer.topk
            )
            fns = {
                "dense": lambda: dense_attention(q, k, v, scale),
                "indexer": lambda: causal_topk(
                    index_scores(q_I, k_I, w, layer.indexer.scale), layer.topk
                ),
                "mask": lambda: masked_attention(q, k, v, allowed, scale),
                "gathered": lambda: gathered_attention(q, k, v, indices, scale),
            }
            difference = _check(f"N = {N}", fns["gathered"](), fns["mask"]())
            med = interleaved_medians({n: _synced(f, dev) for n, f in fns.items()}, repeats)
        rows.append(_row(N, med, difference) | layer.flops(N))
        print(f"  prefill, N = {N}: checked and timed", flush=True)
    return rows


def bench_decode(layer: Layer, sizes, repeats: int, steps: int = DECODE_STEPS) -> list[dict]:
    """One decoding step after N - 1 tokens: the last token's query over the N cached keys
    (dense), under its one-row mask, over its k gathered keys, and the indexer's step (its
    query's scores against the N cached index keys, then top-k). Each timed call runs `steps`
    steps."""
    rows, dev, scale = [], layer.device, layer.scale
    for N in sizes:
        q, k, v, q_I, k_I, w = layer.inputs(N, seed=1, decode=True)
        q1, q_I1, w1 = q[:, :, -1:], q_I[:, -1:], w[:, -1:]  # the newest token's
        del q, q_I, w
        with torch.inference_mode():
            indices, allowed = causal_topk(
                index_scores(q_I1, k_I, w1, layer.indexer.scale), layer.topk
            )  # (B, 1, k'), (B, 1, N)
            fns = {
                "dense": lambda: dense_attention(q1, k, v, scale),
                "indexer": lambda: causal_topk(
                    index_scores(q_I1, k_I, w1, layer.indexer.scale), layer.topk
                ),
                "mask": lambda: masked_attention(q1, k, v, allowed, scale),
                "gathered": lambda: gathered_attention(q1, k, v, indices, scale),
            }
            difference = _check(f"decoding, N = {N}", fns["gathered"](), fns["mask"]())
            med = interleaved_medians({n: _synced(f, dev, steps) for n, f in fns.items()}, repeats)
        row = _row(N, {name: t / steps for name, t in med.items()}, difference)
        cached = layer.B * N * layer.h * 2 * layer.d * 4  # float32 keys and values
        row |= {
            "kv_cache_mib": cached / 2**20,
            "index_cache_mib": layer.B * N * layer.D * 4 / 2**20,
        }
        rows.append(row)
    return rows


def _row(N: int, med: dict, difference: float) -> dict:
    row = {"N": N, "gathered_vs_mask_difference": difference}
    for name, t in med.items():
        row[f"{name}_ms"] = 1e3 * t
    for way in ("gathered", "mask"):
        total = med["indexer"] + med[way]
        row[f"dense_over_{way}"] = med["dense"] / total  # above 1: sparse is faster
        row[f"dense_over_{way}_alone"] = med["dense"] / med[way]
        row[f"indexer_share_{way}"] = med["indexer"] / total
    return row


def wins_from(rows: list[dict], key: str) -> int | None:
    """The smallest N from which rows[key] > 1 (sparse faster) at every larger N measured."""
    first = None
    for r in reversed(rows):
        if r[key] <= 1:
            break
        first = r["N"]
    return first


def _where(rows: list[dict], key: str) -> str:
    first = wins_from(rows, key)
    last = rows[-1]["N"]
    return f"from N = {first} on" if first is not None else f"at no N up to {last}"


# ---------------------------------------------------------------------------- the report


def markdown(numbers: dict) -> list[str]:
    """docs/benchmarks.md's two tables and their conclusions from the JSON that --json writes."""
    s, threads = numbers["sizes"], numbers["threads"]
    what = (
        f"B = {s['B']}, h = {s['h']}, d = {s['d']}, H = {s['H']}, D = {s['D']}, k = {s['topk']}, "
        f"{threads} thread{'s' if threads > 1 else ''}"
    )
    lines = [
        f"| prefill, N tokens ({what}) | dense causal | indexer: scores + top-k | top-k, mask "
        "| top-k, gathered | dense / (indexer + gathered) | dense / (indexer + mask) "
        "| indexer's share (gathered) | GFLOP: dense, gathered, indexer |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in numbers["prefill"]:
        lines.append(
            f"| {r['N']} | {r['dense_ms']:.1f} ms | {r['indexer_ms']:.1f} ms "
            f"| {r['mask_ms']:.1f} ms "
            f"| {r['gathered_ms']:.1f} ms | {r['dense_over_gathered']:.2f}× "
            f"| {r['dense_over_mask']:.2f}× | {r['indexer_share_gathered']:.0%} "
            f"| {r['dense_gflop']:.2f}, {r['gathered_gflop']:.2f}, {r['indexer_gflop']:.2f} |"
        )
    lines += [
        "",
        f"| one decoding step after N tokens ({what}) | dense | indexer | top-k, mask "
        "| top-k, gathered | dense / (indexer + gathered) | indexer's share (gathered) "
        "| keys and values cached | index keys cached |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in numbers["decode"]:
        lines.append(
            f"| {r['N']} | {r['dense_ms']:.3f} ms | {r['indexer_ms']:.3f} ms "
            f"| {r['mask_ms']:.3f} ms | {r['gathered_ms']:.3f} ms "
            f"| {r['dense_over_gathered']:.2f}× | {r['indexer_share_gathered']:.0%} "
            f"| {r['kv_cache_mib']:.1f} MiB | {r['index_cache_mib']:.2f} MiB |"
        )
    lines += ["", *conclusions(numbers)]
    return lines


def conclusions(numbers: dict) -> list[str]:
    """Where sparse wins, in sentences computed from the rows."""
    pre, dec = numbers["prefill"], numbers["decode"]
    return [
        f"Prefill: indexer + gathered keys is faster than dense causal attention "
        f"{_where(pre, 'dense_over_gathered')}; the gathered attention alone, without the "
        f"indexer, is faster {_where(pre, 'dense_over_gathered_alone')}; indexer + the "
        f"library's mask path is faster {_where(pre, 'dense_over_mask')}.",
        "Decoding: indexer + gathered keys is faster than dense "
        f"{_where(dec, 'dense_over_gathered')}; indexer + the mask path is faster "
        f"{_where(dec, 'dense_over_mask')}.",
    ]


def report(numbers: dict) -> None:
    print("\n".join(markdown(numbers)))
    worst = max(r["gathered_vs_mask_difference"] for r in numbers["prefill"] + numbers["decode"])
    print(
        f"gathered and mask paths agree at every N: largest difference {worst:.1e} of max |o| "
        f"(tolerance {TOLERANCE:.0e})"
    )


def run(args) -> dict:
    device = torch.device(args.device)
    if args.tiny:
        t = TINY
        shape = (t["B"], t["heads"], t["head_dim"], t["index_heads"], t["index_dim"])
        shape += (t["rope_dim"], t["topk"])
        sizes = decode_sizes = t["sizes"]
    else:
        shape = (1, args.heads, args.head_dim, args.index_heads, args.index_dim, args.rope_dim)
        shape += (args.topk,)
        sizes, decode_sizes = args.sizes, args.decode_sizes
    layer = Layer(*shape, device)
    print(
        f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads), float32, "
        f"B = {layer.B}, h = {layer.h}, d_k = d_v = {layer.d}, index heads H = {layer.H} of "
        f"D = {layer.D}, top-k = {layer.topk}; medians of {args.repeats} interleaved rounds",
        flush=True,
    )
    return {
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "tiny": bool(args.tiny),
        "sizes": {"B": layer.B, "h": layer.h, "d": layer.d, "H": layer.H, "D": layer.D}
        | {"topk": layer.topk},
        "prefill": bench_prefill(layer, sizes, args.repeats),
        "decode": bench_decode(layer, decode_sizes, args.repeats),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench sparse", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--decode-sizes", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--topk", type=int, default=256, help="keys each query chooses, k")
    parser.add_argument("--heads", type=int, default=8, help="attention heads h")
    parser.add_argument("--head-dim", type=int, default=128, help="d_k = d_v")
    parser.add_argument("--index-heads", type=int, default=4, help="index heads H")
    parser.add_argument("--index-dim", type=int, default=128, help="index head dimension D")
    parser.add_argument("--rope-dim", type=int, default=64, help="d_R, the indexer's RoPE part")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes, in seconds (the test's)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, mps")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if tables_or_threads(args, markdown):
        return 0
    numbers = run(args)
    report(numbers)
    write_numbers(args, numbers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
