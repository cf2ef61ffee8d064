"""Benchmarks of the series: `python -m mha_lib.bench numpy` (and `torch`, see
`mha_lib.bench_torch`).

Speed is reported as ratios measured within one run: the variants are timed
in interleaved repeats (A B A B ...) so that a slow moment of the machine hits
all of them alike, and each is summarised by its median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def interleaved_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median wall time in seconds of each callable, timed in interleaved rounds."""
    for fn in fns.values():  # warm-up: first-touch allocations, BLAS threads
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def bench_numpy(sizes=(64, 256, 1024, 2048), d=512, h=8, seed=0) -> list[dict]:
    """Time `multi_head_attention` against `multi_head_attention_loop` (float32)."""
    from . import multi_head_attention, multi_head_attention_loop

    rng = np.random.default_rng(seed)
    W_q, W_k, W_v, W_o = (
        (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for _ in range(4)
    )
    rows = []
    for N in sizes:
        X = rng.standard_normal((N, d)).astype(np.float32)  # (N, C)
        repeats = max(5, min(200, int(2e6 // (N * N))))
        med = interleaved_medians(
            {
                "vectorised": lambda: multi_head_attention(X, W_q, W_k, W_v, W_o, h),
                "loop": lambda: multi_head_attention_loop(X, W_q, W_k, W_v, W_o, h),
            },
            repeats,
        )
        rows.append(
            {
                "N": N,
                "loop_ms": 1e3 * med["loop"],
                "vectorised_ms": 1e3 * med["vectorised"],
                "speedup": med["loop"] / med["vectorised"],
                "repeats": repeats,
            }
        )
    return rows


def print_numpy(rows: list[dict], d: int, h: int) -> None:
    print(f"numpy multi-head attention, float32, C = {d}, h = {h}; medians of interleaved runs")
    print(f"{'N':>6} {'loop ms':>10} {'vectorised ms':>14} {'loop / vectorised':>18}")
    for r in rows:
        print(
            f"{r['N']:>6} {r['loop_ms']:>10.2f} {r['vectorised_ms']:>14.2f} {r['speedup']:>17.2f}x"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench", description=__doc__)
    parser.add_argument("which", choices=["numpy", "torch"], help="which benchmark to run")
    parser.add_argument("--sizes", type=int, nargs="+", help="sequence lengths N")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args, rest = parser.parse_known_args(argv)
    if args.which == "torch":
        from .bench_torch import main as torch_main

        return torch_main(argv[1:] if argv is not None else sys.argv[2:])
    if rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    sizes = tuple(args.sizes) if args.sizes else (64, 256, 1024, 2048)
    rows = bench_numpy(sizes)
    print_numpy(rows, 512, 8)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"numpy": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
