"""`python -m mha_lib.bench mla`: one decoding step of latent attention, plain vs absorbed.

A layer shaped like DeepSeek-V3's attention in its per-head sizes (kv_lora_rank r = 512,
d_N = 128, d_R = 64, d_V = 128) with fewer heads (--heads, default 16, so that it fits a
laptop), float32, one sequence. For each cached length m (default 1k to 16k) the step that
`MultiHeadLatentAttention.attend` takes for ONE new query over m cached latents is timed:
- plain: up-project the m latents to per-head keys and values, then attention;
- absorbed: the query into the latent space, scores against the latents, mix, up-project once.
Times are medians of interleaved rounds, reported with their ratio (one run, one machine); the
bytes and FLOPs are counted by `mla.decode_step_cost` (plain: the per-head keys and values
attention reads; absorbed: the latents plus the up-projection weights). On a GPU (--device
cuda) the same script measures there.
"""

from __future__ import annotations

import argparse
import json

import torch

from ..efficient.mla import MultiHeadLatentAttention, decode_step_cost
from ..runtime import pick_device
from .timing import interleaved_medians

R, D_N, D_R, D_V = 512, 128, 64, 128


def bench(sizes, heads: int, device, repeats: int = 5) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    layer = MultiHeadLatentAttention(heads * D_V, heads, R, D_N, D_R, D_V).to(device).eval()
    q_nope = torch.randn(1, heads, 1, D_N, generator=g).to(device)
    q_rope = torch.randn(1, heads, 1, D_R, generator=g).to(device)
    rows = []
    for m in sizes:
        c = torch.randn(1, m, R, generator=g).to(device)
        k_rope = torch.randn(1, m, D_R, generator=g).to(device)

        def step(absorb, c=c, k_rope=k_rope):
            with torch.inference_mode():
                out = layer.attend(q_nope, q_rope, c, k_rope, None, absorb)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return out

        with torch.inference_mode():
            diff = (step(True) - step(False)).abs().max().item()
        t = interleaved_medians({"plain": lambda: step(False), "absorbed": lambda: step(True)},
                                repeats)  # fmt: skip
        cost = {a: decode_step_cost(m, heads, R, D_N, D_R, D_V, absorb=a) for a in (False, True)}
        rows.append(
            {
                "m": m,
                "plain_ms": 1e3 * t["plain"],
                "absorbed_ms": 1e3 * t["absorbed"],
                "speed_up": t["plain"] / t["absorbed"],
                "plain_mib": cost[False]["bytes"] / 2**20,
                "absorbed_mib": cost[True]["bytes"] / 2**20,
                "plain_flops_per_byte": cost[False]["flops_per_byte"],
                "absorbed_flops_per_byte": cost[True]["flops_per_byte"],
                "max_abs_difference": diff,
            }
        )
    return rows


def print_rows(rows: list[dict]) -> None:
    print("| m | plain ms | absorbed ms | plain / absorbed | MiB read: plain | absorbed | "
          "FLOP/byte: plain | absorbed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['m']} | {r['plain_ms']:.2f} | {r['absorbed_ms']:.2f} | {r['speed_up']:.1f}× | "
            f"{r['plain_mib']:.1f} | {r['absorbed_mib']:.1f} | "
            f"{r['plain_flops_per_byte']:.2f} | {r['absorbed_flops_per_byte']:.1f} |"
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
            json.dump({"device": str(device), "torch": torch.__version__, "heads": args.heads,
                       "rows": rows}, f, indent=1)  # fmt: skip
    return 0
