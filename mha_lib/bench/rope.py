"""`python -m mha_lib.bench rope`: `mha_lib.positions.rope` against transformers' Llama code.

One measurement, float32 by default, on the device `pick_device()` finds (or --device):
rotate a head's queries and keys q, k (B, h, N, d) = (4, 16, 4096, 128) at positions 0 .. N-1,
- ours: `rope(q, pos)` and `rope(k, pos)`, each computing its angles;
- transformers: `LlamaRotaryEmbedding` (the cos and sin tables) then `apply_rotary_pos_emb`;
timed in interleaved rounds (medians) in one run, and reported as the ratio ours /
transformers (below 1: ours is faster). Without transformers only ours is timed.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from ..positions import rope
from ..runtime import pick_device
from .timing import interleaved_medians
from .torch_mha import synchronize


def _llama(d: int, base: float):
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import (
            LlamaRotaryEmbedding,
            apply_rotary_pos_emb,
        )
    except ImportError:
        return None
    cfg = LlamaConfig(hidden_size=d, num_attention_heads=1, head_dim=d, rope_theta=base)
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": base}
    return LlamaRotaryEmbedding(cfg), apply_rotary_pos_emb


def bench_rope(B: int, h: int, N: int, d: int, device, dtype, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, B, h, N, d, generator=g).to(device=device, dtype=dtype)
    pos = torch.arange(N, device=device)
    fns = {"ours": lambda: (rope(q, pos), rope(k, pos))}
    llama = _llama(d, 10000.0)
    if llama is not None:
        emb, apply = llama[0].to(device), llama[1]

        def theirs():
            cos, sin = emb(q, pos[None])
            return apply(q, k, cos, sin)

        fns["transformers"] = theirs
        ours, ref = fns["ours"](), theirs()
        err = max(float((a - b).abs().max()) for a, b in zip(ours, ref))
    timed = {}
    for name, fn in fns.items():
        timed[name] = (lambda f: lambda: (f(), synchronize(device)))(fn)
    with torch.inference_mode():
        med = interleaved_medians(timed, repeats)
    row = {"B": B, "h": h, "N": N, "d": d, "dtype": str(dtype).removeprefix("torch.")}
    row["ours_ms"] = round(med["ours"] * 1e3, 3)
    if llama is not None:
        row["transformers_ms"] = round(med["transformers"] * 1e3, 3)
        row["ratio"] = round(med["ours"] / med["transformers"], 3)
        row["max_abs_difference"] = err
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench rope", description=__doc__)
    parser.add_argument(
        "--shape", type=int, nargs=4, default=[4, 16, 4096, 128], metavar=("B", "h", "N", "d")
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", help="cpu, cuda, mps (default: pick_device())")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else pick_device()
    row = bench_rope(*args.shape, device, getattr(torch, args.dtype), args.repeats)
    print(
        f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads), "
        f"{row['dtype']}; medians of {args.repeats} interleaved rounds"
    )
    print(f"rope on (B, h, N, d) = {tuple(args.shape)}, queries and keys:")
    print(f"  ours          {row['ours_ms']:9.3f} ms")
    if "ratio" in row:
        print(f"  transformers  {row['transformers_ms']:9.3f} ms")
        print(
            f"  ours / transformers = {row['ratio']:.2f}x "
            f"(max |difference| {row['max_abs_difference']:.1e})"
        )
    else:
        print("  transformers is not installed: no comparison")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": str(device),
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "rope": row,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
