"""`python -m mha_lib.bench mla`: one decoding step of latent attention, three ways.

A layer shaped like DeepSeek-V3's attention in its per-head sizes (kv_lora_rank r = 512,
d_N = 128, d_R = 64, d_V = 128) with fewer heads (--heads, default 16, so that it fits a
laptop), float32, one sequence. For each cached length m (default 1k to 16k) the attention of
ONE new query over m cached tokens is timed in three forms, all giving the same output:
- rebuild: what `MultiHeadLatentAttention.attend` does without absorption: up-project the m
  cached latents to per-head keys and values on every call, then attention;
- expanded: plain attention over per-head keys and values that are already in memory (an
  expanded cache, as an MHA model would keep: h·(d_N + d_R + d_V) numbers per token; built
  once, outside the timing);
- absorbed: the query into the latent space, scores against the latents, mix, up-project once.
The fair comparison for absorption is `expanded`: `rebuild` pays the up-projection every step.
Absorption reads fewer bytes than `expanded` (the latents instead of per-head keys and
values) for more FLOPs (every head scores against all r latent dimensions, not d_N + d_R):
`mla.decode_step_cost` counts both, and the FLOP ratio is about 3.4 to 3.8 at these sizes.
Whether fewer bytes buy time depends on whether the step waits for memory: a GPU decoding a
large batch does, a CPU core on one query often does not.

Times are medians of interleaved rounds, reported with their ratios (one run, one machine); the
bytes and FLOPs are counted, not timed. On a GPU (--device cuda) the same script measures there.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from ..efficient.mla import MultiHeadLatentAttention, decode_step_cost
from ..runtime import pick_device
from .timing import interleaved_medians

R, D_N, D_R, D_V = 512, 128, 64, 128


def expanded_cache(layer: MultiHeadLatentAttention, c, k_rope):
    """The per-head keys (B, h, m, d_N + d_R) and values (B, h, m, d_V) of cached latents c
    (B, m, r) and rope keys k_rope (B, m, d_R): what an expanded cache holds."""
    W_UK, W_UV = layer.up_weights()  # (h, d_N, r), (h, d_V, r)
    k_nope = torch.einsum("bmr,hdr->bhmd", c, W_UK)  # (B, h, m, d_N)
    k_r = k_rope[:, None].expand(-1, layer.num_heads, -1, -1)  # (B, h, m, d_R)
    v = torch.einsum("bmr,hvr->bhmv", c, W_UV)  # (B, h, m, d_V)
    return torch.cat((k_nope, k_r), dim=-1).contiguous(), v.contiguous()


def bench(sizes, heads: int, device, repeats: int = 5) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    layer = MultiHeadLatentAttention(heads * D_V, heads, R, D_N, D_R, D_V).to(device).eval()
    q_nope = torch.randn(1, heads, 1, D_N, generator=g).to(device)
    q_rope = torch.randn(1, heads, 1, D_R, generator=g).to(device)
    q = torch.cat((q_nope, q_rope), dim=-1)  # (1, h, 1, d_N + d_R)
    rows = []
    for m in sizes:
        c = torch.randn(1, m, R, generator=g).to(device)
        k_rope = torch.randn(1, m, D_R, generator=g).to(device)
        with torch.inference_mode():
            k, v = expanded_cache(layer, c, k_rope)

        def sync(out):
            if device.type == "cuda":
                torch.cuda.synchronize()
            return out

        def rebuild(c=c, k_rope=k_rope):
            with torch.inference_mode():
                return sync(layer.attend(q_nope, q_rope, c, k_rope, None, False))

        def absorbed(c=c, k_rope=k_rope):
            with torch.inference_mode():
                return sync(layer.attend(q_nope, q_rope, c, k_rope, None, True))

        def expanded(k=k, v=v):
            with torch.inference_mode():
                return sync(F.scaled_dot_product_attention(q, k, v, scale=layer.scale))

        outs = [rebuild(), expanded(), absorbed()]
        diff = max((o - outs[0]).abs().max().item() for o in outs[1:])
        t = interleaved_medians(
            {"rebuild": rebuild, "expanded": expanded, "absorbed": absorbed}, repeats
        )
        cost = {a: decode_step_cost(m, heads, R, D_N, D_R, D_V, absorb=a) for a in (False, True)}
        rows.append(
            {
                "m": m,
                "rebuild_ms": 1e3 * t["rebuild"],
                "expanded_ms": 1e3 * t["expanded"],
                "absorbed_ms": 1e3 * t["absorbed"],
                "rebuild_over_absorbed": t["rebuild"] / t["absorbed"],
                "expanded_over_absorbed": t["expanded"] / t["absorbed"],
                "expanded_mib": cost[False]["bytes"] / 2**20,
                "absorbed_mib": cost[True]["bytes"] / 2**20,
                "flops_absorbed_over_expanded": cost[True]["flops"] / cost[False]["flops"],
                "expanded_flops_per_byte": cost[False]["flops_per_byte"],
                "absorbed_flops_per_byte": cost[True]["flops_per_byte"],
                "max_abs_difference": diff,
            }
        )
    return rows


def print_rows(rows: list[dict]) -> None:
    print(
        "| m | ms: rebuild | expanded | absorbed | expanded / absorbed | rebuild / absorbed | "
        "MiB read: expanded → absorbed | FLOPs: absorbed / expanded |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['m']} | {r['rebuild_ms']:.2f} | {r['expanded_ms']:.2f} | "
            f"{r['absorbed_ms']:.2f} | {r['expanded_over_absorbed']:.2f}× | "
            f"{r['rebuild_over_absorbed']:.1f}× | {r['expanded_mib']:.0f} → "
            f"{r['absorbed_mib']:.0f} | {r['flops_absorbed_over_expanded']:.2f}× |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench mla", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", help="cpu, cuda, mps (default: pick_device())")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else pick_device()
    print(
        f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads), float32, "
        f"h = {args.heads}, r = {R}, d_N = {D_N}, d_R = {D_R}, d_V = {D_V}; one query"
    )
    rows = bench(args.sizes, args.heads, device, args.repeats)
    print_rows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": str(device),
                    "torch": torch.__version__,
                    "heads": args.heads,
                    "rows": rows,
                },
                f,
                indent=1,
            )
    return 0
