"""Notebook 09's Triton FlashAttention against SDPA's flash backend and the naive form.

    python -m mha_lib.bench triton [--sizes 512 1024 ...] [--json PATH] [--markdown PATH]

On a CUDA GPU: forward and forward+backward TFLOP/s of three variants (our Triton
kernels, `F.scaled_dot_product_attention` restricted to its flash backend, and the
naive softmax(q kᵀ / √d) v), in float16 and bfloat16, d = 64 and 128, N from 512 to
16 384, B·N = 16 384 tokens and h·d = 2048 (so every size does similar work per
token), labelled with the device's name. Each figure is the median over rounds in
which the variants are timed one after the other (interleaved), each round a
`triton.testing.do_bench` median. FLOPs counted: 4·B·h·N²·d for the forward (two
matrix products), 2.5 times that for the backward (five: FlashAttention-2's count, for
every variant; the library's split backward does seven, `triton_flash.backward_cost`).

Without a GPU (or with MHA_LIB_DEVICE=cpu) the kernels run in Triton's interpreter,
which executes each program instance with numpy on the CPU: it measures nothing about
speed, so the benchmark says so and prints only a correctness table (the kernels
against SDPA at odd sizes, outputs and gradients).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import mha_lib.efficient.triton_flash as ta  # first: it picks the interpreter before triton loads

import torch  # isort: skip
import torch.nn.functional as F  # isort: skip

from mha_lib.pytorch import explicit_attention  # isort: skip

VARIANTS = ("triton", "sdpa_flash", "naive")


def correctness_rows() -> list[dict]:
    """Max errors of the kernels against float64 SDPA at odd sizes, both causal alignments."""
    rows = []
    g = torch.Generator().manual_seed(0)
    for N, M, d in ((37, 53, 16), (53, 37, 32), (1, 23, 16), (21, 1, 64)):
        for causal in ta.CAUSAL:
            q, k, v = (torch.randn(1, 2, n, d, generator=g).to(ta.DEVICE) for n in (N, M, M))
            leaves = [t.requires_grad_() for t in (q, k, v)]
            o, _ = ta.triton_attention(*leaves, causal)
            mask = None
            if causal is not None:
                offset = M - N if causal == "bottom_right" else 0
                mask = torch.ones(N, M, dtype=torch.bool, device=ta.DEVICE).tril(offset)
            ref = F.scaled_dot_product_attention(*(t.double() for t in leaves), attn_mask=mask)
            if mask is not None:
                ref = ref.masked_fill(~mask.any(dim=1)[:, None], 0.0)  # rows that see no key
            do = torch.randn(o.shape, generator=g).to(ta.DEVICE)
            grads = torch.autograd.grad(o, leaves, do)
            refs = torch.autograd.grad(ref, leaves, do.double())
            errors = [(o.double() - ref).abs().max().item()]
            errors += [(a.double() - b.double()).abs().max().item() for a, b in zip(grads, refs)]
            rows.append(dict(N=N, M=M, d=d, causal=str(causal), max_error=max(errors)))
    return rows


def print_correctness(rows: list[dict]) -> None:
    print("| N | M | d | causal | o, dq, dk, dv vs SDPA (float32) |")
    print("|---|---|---|---|---|")
    for r in rows:
        verdict = "< 1e-5 ✓" if r["max_error"] < 1e-5 else f"{r['max_error']:.1e} ✗"
        print(f"| {r['N']} | {r['M']} | {r['d']} | {r['causal']} | {verdict} |")


def _forward_call(fn, q, k, v):
    return lambda: fn(q, k, v)


def _backward_call(fn, q, k, v, do):
    return lambda: torch.autograd.grad(fn(q, k, v), (q, k, v), do)


def gpu_rows(sizes, head_dims, dtypes, causal, rounds, tokens, width) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    def sdpa_flash(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    forward = {
        "triton": lambda q, k, v: ta.triton_attention(q, k, v, "top_left" if causal else None)[0],
        "sdpa_flash": sdpa_flash,
        "naive": lambda q, k, v: explicit_attention(q, k, v, is_causal=causal)[0],
    }
    rows = []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for d in head_dims:
            for N in sizes:
                B, h = max(1, tokens // N), max(1, width // d)
                q, k, v = (
                    torch.randn(B, h, N, d, device="cuda", dtype=dtype).requires_grad_()
                    for _ in range(3)
                )
                do = torch.randn_like(q)
                flops = 4 * B * h * N * N * d / (2 if causal else 1)
                # the naive form holds B·h·N² scores: skip it where that passes 8 GiB
                skip_naive = B * h * N * N * q.element_size() > 8 * 2**30
                fns = {}
                for name, fn in forward.items():
                    if name == "naive" and skip_naive:
                        continue
                    fns[(name, "forward")] = _forward_call(fn, q, k, v)
                    fns[(name, "forward_backward")] = _backward_call(fn, q, k, v, do)
                times = {key: [] for key in fns}
                for _ in range(rounds):  # interleaved: each round times every variant
                    for key, fn in fns.items():
                        times[key].append(do_bench(fn, return_mode="median"))
                row = dict(dtype=dtype_name, d=d, N=N, B=B, h=h, causal=causal)
                for (name, mode), ts in times.items():
                    total = flops * (1 if mode == "forward" else 3.5)
                    row[f"{name}_{mode}_tflops"] = total / (statistics.median(ts) * 1e-3) / 1e12
                rows.append(row)
                print(_row_line(row), flush=True)
                fns.clear()
                torch.cuda.empty_cache()
    return rows


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.0f}"


def _row_line(r: dict) -> str:
    cells = [r["dtype"], str(r["d"]), str(r["N"])]
    for mode in ("forward", "forward_backward"):
        for name in VARIANTS:
            cells.append(_fmt(r.get(f"{name}_{mode}_tflops")))
        tri, ref = r.get(f"triton_{mode}_tflops"), r.get(f"sdpa_flash_{mode}_tflops")
        cells.append(f"{tri / ref:.2f}×" if tri and ref else "–")
    return "| " + " | ".join(cells) + " |"


def markdown_triton(numbers: dict) -> list[str]:
    """docs/benchmarks.md's table from the JSON this benchmark writes."""
    lines = [f"Device: {numbers['device']}; torch {numbers['torch']}, triton {numbers['triton']}."]
    if numbers.get("interpreted"):
        lines.append("Interpreter: no speed measured (correctness only).")
        return lines
    lines += [
        "",
        "| dtype | d | N | fwd: triton | SDPA flash | naive | triton / SDPA | "
        "fwd+bwd: triton | SDPA flash | naive | triton / SDPA |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row_line(r) for r in numbers["speed"]]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench triton", description=__doc__)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384]
    )
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--causal", action="store_true", help="causal (top-left) attention")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--tokens", type=int, default=16384, help="B·N, the batch from N")
    parser.add_argument("--width", type=int, default=2048, help="h·d, the heads from d")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument(
        "--markdown", metavar="PATH", help="print docs/benchmarks.md's table from JSON"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as f:
            print("\n".join(markdown_triton(json.load(f))))
        return 0
    import triton

    device = "Triton's interpreter on the CPU" if ta.INTERPRETED else torch.cuda.get_device_name()
    print(f"device: {device}; torch {torch.__version__}, triton {triton.__version__}")
    numbers = dict(device=device, torch=torch.__version__, triton=triton.__version__)
    numbers["interpreted"] = ta.INTERPRETED
    numbers["correctness"] = rows = correctness_rows()
    print_correctness(rows)
    ok = all(r["max_error"] < 1e-5 for r in rows)
    if ta.INTERPRETED:
        print(
            "The interpreter runs each program instance with numpy on the CPU: it measures "
            "nothing about speed, so no timings are taken. Run this on a CUDA GPU."
        )
        numbers["speed"] = []
    else:
        print(
            "\n| dtype | d | N | fwd TFLOP/s: triton | SDPA flash | naive | triton / SDPA | "
            "fwd+bwd: triton | SDPA flash | naive | triton / SDPA |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        numbers["speed"] = gpu_rows(
            args.sizes,
            args.head_dims,
            args.dtypes,
            args.causal,
            args.rounds,
            args.tokens,
            args.width,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(numbers, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
