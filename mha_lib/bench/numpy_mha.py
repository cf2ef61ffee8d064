"""`python -m mha_lib.bench numpy`: the vectorised numpy multi-head attention
against the per-head loop (both derived in notebook 03), float32, C = 512, h = 8.

`--json PATH` also writes the numbers; `--markdown PATH` reads such a file and
prints docs/benchmarks.md's table rows from it, without running anything.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from .timing import interleaved_medians


def bench_numpy(sizes=(64, 256, 1024, 2048), d=512, h=8, seed=0) -> list[dict]:
    """Time `multi_head_attention` against `multi_head_attention_loop` (float32)."""
    from .. import multi_head_attention, multi_head_attention_loop

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


def markdown_numpy(numbers: dict) -> list[str]:
    """docs/benchmarks.md's table, one line per row, from the JSON that `--json` writes."""
    lines = ["| N | loop ms | vectorised ms | loop / vectorised |", "|---|---|---|---|"]
    for r in numbers["numpy"]:
        lines.append(
            f"| {r['N']} | {r['loop_ms']:.2f} | {r['vectorised_ms']:.2f} | {r['speedup']:.2f}× |"
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench numpy", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 2048])
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument(
        "--markdown",
        metavar="PATH",
        help="print docs/benchmarks.md's table from a --json file; run nothing",
    )
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as f:
            print("\n".join(markdown_numpy(json.load(f))))
        return 0
    rows = bench_numpy(tuple(args.sizes))
    print_numpy(rows, 512, 8)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"numpy": rows}, f, indent=2)
    return 0
