"""`python -m mha_lib.bench efficient`: what the efficient forms of notebook 08 save.

Three measurements, float32, on the device `pick_device()` finds (or --device):

1. KV-cache decoding against recomputing (`mha_lib.nn.GroupedQueryAttention`,
   C = 256, h = h_kv = 8, one sequence): the time to produce the output of token
   N given the N - 1 before it, with the cache (project one token, append, attend
   to N keys) and without (project and attend all N tokens causally, keep the last
   row), timed in interleaved rounds (medians). The cache's memory at N is exact:
   2·N·h_kv·d numbers, kept for the whole generation; the peak memory growth of
   one step is measured in a fresh process (the cache allocated and filled before).
2. KV-cache memory of grouped-query attention: one layer with h = 32 query heads,
   d = 128, N = 4096 tokens, for h_kv = 32 (multi-head), 8 (GQA) and 1
   (multi-query): computed 2·B·h_kv·N·d·4 bytes, and measured (`KVCache.nbytes`).
3. The plain-torch FlashAttention forward (`mha_lib.nn.flash.flash_attention`,
   blocks of 64) against SDPA (`F.scaled_dot_product_attention`, a fused kernel)
   and the naive form (the (B, h, N, N) weights written out), B = 1, h = 8, d = 64:
   - forward time in inference mode, interleaved rounds, medians;
   - peak memory growth of one forward pass, each variant in a fresh process
     (as `python -m mha_lib.bench torch` measures it: on the CPU the peak resident
     set size during the pass minus the resident set size before it);
   - memory kept for the backward pass (autograd's saved tensors, exact).
The Python-level tiled loop is expected to be SLOWER than the fused kernel (it
launches a few small operations per tile); what it saves is memory.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from ..nn import (
    GroupedQueryAttention,
    KVCache,
    flash_attention,
    saved_for_backward_bytes,
)
from ..pytorch import explicit_attention
from ..runtime import pick_device
from . import memory
from .timing import interleaved_medians
from .torch_mha import synchronize

FLASH_VARIANTS = ("naive", "flash (torch loop)", "SDPA")
KV_VARIANTS = ("cache", "recompute")
KV_SHAPE = {"C": 256, "h": 8}
FLASH_SHAPE = {"B": 1, "h": 8, "d": 64, "block": 64}


def _timed(fn, device):
    def run():
        fn()
        synchronize(device)

    return run


def bench_kv_cache(sizes, memory_sizes, device) -> list[dict]:
    """Per-token decoding time (and peak memory growth) with and without the cache."""
    C, h = KV_SHAPE["C"], KV_SHAPE["h"]
    torch.manual_seed(0)
    model = GroupedQueryAttention(C, h, h).to(device).eval()
    rows = []
    for N in sizes:
        x = torch.randn(1, N, C, device=device)  # (1, N, C)
        cache = model.new_cache(1, N)
        with torch.inference_mode():
            model(x[:, : N - 1], cache=cache)  # the N - 1 tokens before: cached once

            def with_cache():
                cache.truncate(N - 1)  # forget the last step's token
                return model(x[:, N - 1 :], cache=cache)  # (1, 1, C)

            def recompute():
                return model(x, is_causal=True)[:, -1:]  # (1, 1, C)

            torch.testing.assert_close(with_cache(), recompute(), rtol=1e-4, atol=1e-5)
            repeats = max(5, min(30, int(4e5 // N)))
            med = interleaved_medians(
                {"cache": _timed(with_cache, device), "recompute": _timed(recompute, device)},
                repeats,
            )
        rows.append(
            {
                "N": N,
                "cache_ms": 1e3 * med["cache"],
                "recompute_ms": 1e3 * med["recompute"],
                "speedup": med["recompute"] / med["cache"],
                "cache_mib": 2 * N * C * 4 / 2**20,  # 2·N·h_kv·d float32, h_kv·d = C here
                "repeats": repeats,
            }
        )
    for row in rows:
        if row["N"] in memory_sizes:
            for name in KV_VARIANTS:
                growth = _memory_in_subprocess(name, row["N"], device)
                row[f"{name}_step_peak_mib"] = growth / 2**20
    return rows


def bench_gqa_memory(N: int = 4096, h: int = 32, d: int = 128) -> list[dict]:
    """KV-cache bytes of one layer for h_kv = h, h/4, 1: computed and measured."""
    rows = []
    for h_kv in (h, h // 4, 1):
        computed = 2 * 1 * h_kv * N * d * 4  # 2·B·h_kv·N·d float32
        cache = KVCache(1, h_kv, N, d)  # allocated on the CPU
        rows.append(
            {
                "h": h,
                "h_kv": h_kv,
                "N": N,
                "d": d,
                "computed_mib": computed / 2**20,
                "measured_mib": cache.nbytes / 2**20,
            }
        )
        del cache
    return rows


def flash_fns(q, k, v) -> dict:
    """The three forward variants as callables of no argument."""
    block = FLASH_SHAPE["block"]
    return {
        "naive": lambda: explicit_attention(q, k, v)[0],
        "flash (torch loop)": lambda: flash_attention(q, k, v, block_q=block, block_k=block)[0],
        "SDPA": lambda: F.scaled_dot_product_attention(q, k, v),
    }


def _qkv(N, device, requires_grad=False):
    B, h, d = FLASH_SHAPE["B"], FLASH_SHAPE["h"], FLASH_SHAPE["d"]
    return [
        torch.randn(B, h, N, d, device=device, requires_grad=requires_grad) for _ in range(3)
    ]  # 3 x (B, h, N, d)


def bench_flash(sizes, memory_sizes, device) -> list[dict]:
    """Forward time, peak memory growth and memory kept for backward of the three variants."""
    torch.manual_seed(0)
    rows = []
    for N in sizes:
        q, k, v = _qkv(N, device)
        fns = flash_fns(q, k, v)
        with torch.inference_mode():
            torch.testing.assert_close(
                fns["flash (torch loop)"](), fns["SDPA"](), rtol=1e-4, atol=1e-5
            )
            repeats = max(3, min(15, int(2e7 // (N * N))))
            med = interleaved_medians({n: _timed(f, device) for n, f in fns.items()}, repeats)
        qg, kg, vg = _qkv(N, device, requires_grad=True)
        row = {"N": N, "repeats": repeats}
        for name, fn in flash_fns(qg, kg, vg).items():
            row[f"{name}_ms"] = 1e3 * med[name]
            row[f"{name}_kept_mib"] = saved_for_backward_bytes(fn) / 2**20
        rows.append(row)
    for row in rows:
        if row["N"] in memory_sizes:
            for name in FLASH_VARIANTS:
                row[f"{name}_peak_mib"] = _memory_in_subprocess(name, row["N"], device) / 2**20
    return rows


def _decoding_fn(variant: str, N: int, device):
    """One decoding step at prefix length N, with the cache (filled before) or recomputing."""
    torch.manual_seed(0)
    model = GroupedQueryAttention(KV_SHAPE["C"], KV_SHAPE["h"], KV_SHAPE["h"]).to(device).eval()
    x = torch.randn(1, N, KV_SHAPE["C"], device=device)  # (1, N, C)
    if variant == "recompute":
        return lambda: model(x, is_causal=True)[:, -1:]  # (1, 1, C)
    cache = model.new_cache(1, N)  # allocated before the measurement: kept, not per step
    model(x[:, : N - 1], cache=cache)

    def step():
        cache.truncate(N - 1)
        return model(x[:, N - 1 :], cache=cache)  # (1, 1, C)

    return step


def memory_child(variant: str, N: int, device: str) -> int:
    """One forward pass of one variant; print its peak memory growth in bytes (JSON)."""
    device = torch.device(device)
    torch.manual_seed(0)
    with torch.inference_mode():
        if variant in KV_VARIANTS:
            _decoding_fn(variant, 64, device)()  # warm up kernels and thread pools
            fn = _decoding_fn(variant, N, device)
            fn()  # a first step, so that the measured one finds everything allocated
        else:
            flash_fns(*_qkv(64, device))[variant]()  # warm up kernels and thread pools
            fn = flash_fns(*_qkv(N, device))[variant]
        before = memory.start(device)
        fn()
        synchronize(device)
        growth = memory.finish(device, before)
    print(growth)
    return 0


def _memory_in_subprocess(variant: str, N: int, device) -> int:
    """Peak memory growth (bytes) of one pass of `variant`, in a fresh process."""
    args = [
        "--memory-child",
        variant,
        str(N),
        str(device),
        "--threads",
        str(torch.get_num_threads()),
    ]
    return memory.growth_in_subprocess(__name__, args)


# ----------------------------------------------------------------------------
# report


def print_kv_cache(rows: list[dict]) -> None:
    print("KV-cache decoding: time to produce token N's output (C = 256, h = h_kv = 8, B = 1)")
    print(f"{'N':>6} {'with cache':>11} {'recompute':>11} {'speed-up':>9} {'cache size':>11}")
    for r in rows:
        print(
            f"{r['N']:>6} {r['cache_ms']:>8.2f} ms {r['recompute_ms']:>8.2f} ms"
            f" {r['speedup']:>8.1f}x {r['cache_mib']:>7.2f} MiB"
        )
    measured = [r for r in rows if "cache_step_peak_mib" in r]
    if measured:
        print("peak memory growth of one decoding step (fresh process; the cache allocated before)")
        print(f"{'N':>6} {'with cache':>11} {'recompute':>11}")
        for r in measured:
            print(
                f"{r['N']:>6} {r['cache_step_peak_mib']:>7.2f} MiB"
                f" {r['recompute_step_peak_mib']:>7.2f} MiB"
            )


def print_gqa(rows: list[dict]) -> None:
    r0 = rows[0]
    print(
        f"KV-cache memory of one layer, h = {r0['h']} query heads, d = {r0['d']}, "
        f"N = {r0['N']}, B = 1, float32"
    )
    print(f"{'h_kv':>6} {'computed':>12} {'measured':>12} {'vs MHA':>8}")
    for r in rows:
        print(
            f"{r['h_kv']:>6} {r['computed_mib']:>8.1f} MiB {r['measured_mib']:>8.1f} MiB"
            f" {r['measured_mib'] / r0['measured_mib']:>8.3f}"
        )


def print_flash(rows: list[dict]) -> None:
    s = FLASH_SHAPE
    print(
        f"attention forward, B = {s['B']}, h = {s['h']}, d = {s['d']}, N = M, blocks of "
        f"{s['block']}: time (inference mode), peak memory growth (fresh process), kept for "
        "backward"
    )
    print(f"{'N':>6} " + " ".join(f"{name:>20}" for name in FLASH_VARIANTS) + "   (ms)")
    for r in rows:
        print(f"{r['N']:>6} " + " ".join(f"{r[f'{n}_ms']:>20.1f}" for n in FLASH_VARIANTS))
    if any("SDPA_peak_mib" in r for r in rows):
        print(f"{'N':>6} " + " ".join(f"{name:>20}" for name in FLASH_VARIANTS) + "   (peak MiB)")
        for r in rows:
            if "SDPA_peak_mib" in r:
                print(
                    f"{r['N']:>6} "
                    + " ".join(f"{r[f'{n}_peak_mib']:>20.1f}" for n in FLASH_VARIANTS)
                )
    print(f"{'N':>6} " + " ".join(f"{name:>20}" for name in FLASH_VARIANTS) + "   (kept MiB)")
    for r in rows:
        print(f"{r['N']:>6} " + " ".join(f"{r[f'{n}_kept_mib']:>20.2f}" for n in FLASH_VARIANTS))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench efficient", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096])
    parser.add_argument("--flash-sizes", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--memory-sizes", type=int, nargs="*", default=[2048])
    parser.add_argument("--kv-memory-sizes", type=int, nargs="*", default=[4096])
    parser.add_argument("--gqa-length", type=int, default=4096, help="N for the GQA table")
    parser.add_argument("--device", help="cpu, cuda, mps (default: pick_device())")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: torch's choice); 1 avoids thread-pool stalls on a "
        "machine shared with other jobs",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        variant, N, device = args.memory_child
        return memory_child(variant, int(N), device)

    device = torch.device(args.device) if args.device else pick_device()
    print(
        f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads), "
        "float32; medians of interleaved runs"
    )
    kv = bench_kv_cache(args.sizes, args.kv_memory_sizes, device)
    print_kv_cache(kv)
    gqa = bench_gqa_memory(N=args.gqa_length)
    print_gqa(gqa)
    flash = bench_flash(args.flash_sizes, args.memory_sizes, device)
    print_flash(flash)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": str(device),
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "kv_cache": kv,
                    "gqa_memory": gqa,
                    "flash": flash,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
