"""`python -m mha_lib.bench torch`: this module's attention against nn.MultiheadAttention.

Three variants of the same multi-head self-attention (B = 8 sequences, embed_dim
E = 512, h = 8 heads, float32, the same weights):
- naive: the in-projection, then softmax(Q Kᵀ / √d) V written out with an
  explicit (B, h, N, N) weight tensor, then the out-projection;
- module: `mha_lib.pytorch.MultiHeadAttention` (fused
  `scaled_dot_product_attention`, need_weights=False);
- nn.MHA: `torch.nn.MultiheadAttention(batch_first=True)` called with
  need_weights=False, its fastest setting.

Speed: forward in eval mode under `torch.inference_mode()`, and forward +
backward in training mode (dropout 0); variants timed in interleaved rounds,
medians (see `mha_lib.bench.timing.interleaved_medians`), synchronising the GPU
around each call. The fraction of the machine's float32 GEMM throughput is the
model FLOPs of a pass (8·B·N·E² + 4·B·N²·E forward, 3× that forward +
backward) divided by the time, over the FLOP rate of a 2048×2048×2048 float32
matrix product timed in the same interleaved rounds.

Memory: the growth of peak memory during one pass, each variant in a fresh
subprocess (so no variant inherits another's cached allocations): on the CPU
the process's peak resident set size during the pass (Linux: VmHWM, reset
through /proc/self/clear_refs just before; elsewhere ru_maxrss) minus its
resident set size just before (module, weights and input already allocated,
kernels warmed up; glibc told to return large freed blocks at once); on a
GPU `torch.cuda.max_memory_allocated()` minus the memory allocated before
the pass. Measured for one sequence (B = 1) so that the
naive O(h·N²) weight tensor stands out against the O(N·E) activations.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn

from ..pytorch import MultiHeadAttention, pick_device
from .timing import interleaved_medians

VARIANTS = ("naive", "module", "nn.MHA")
GEMM_SIZE = 2048  # the reference GEMM: (2048, 2048) @ (2048, 2048)
TARGETS = {
    "forward_speedup_at_2048": 1.5,
    "forward_gemm_fraction_at_2048": 0.65,
    "forward_backward_speedup_at_2048": 1.1,
    "forward_memory_mib_at_4096": 64.0,
    "min_speedup_any_n": 0.95,  # "never slower beyond noise"
}


def naive_attention(m: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """Self-attention with m's weights, keeping the full (B, h, N, N) weight tensor."""
    B, N, E = x.shape
    h, d = m.num_heads, m.head_dim
    qkv = F.linear(x, m.in_proj_weight, m.in_proj_bias)  # (B, N, 3E)
    q, k, v = qkv.view(B, N, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, h, N, d)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)  # (B, h, N, N)
    heads = weights @ v  # (B, h, N, d)
    return m.out_proj(heads.transpose(1, 2).reshape(B, N, E))  # (B, N, E)


def make_modules(E: int, h: int, device) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """This module and nn.MultiheadAttention with the same (seeded) weights."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(E, h, batch_first=True, device=device)
    return MultiHeadAttention.from_torch(ref), ref


def forward_fns(mod, ref, x) -> dict:
    """The three variants as callables of no argument."""
    return {
        "naive": lambda: naive_attention(mod, x),
        "module": lambda: mod(x)[0],
        "nn.MHA": lambda: ref(x, x, x, need_weights=False)[0],
    }


def synchronize(device: torch.device) -> None:
    """Wait for the device to finish its queued work (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def model_flops(B: int, N: int, E: int) -> float:
    """Forward FLOPs: in- and out-projections 8·B·N·E², Q Kᵀ and weights·V 4·B·N²·E."""
    return 8.0 * B * N * E * E + 4.0 * B * N * N * E


def repeats_for(N: int) -> int:
    """Fewer rounds for the long sequences, so the whole benchmark takes minutes."""
    return max(3, min(15, int(6e6 // (N * N))))


def bench_speed(sizes, B, E, h, device) -> tuple[list[dict], list[dict]]:
    """Time the variants at each N; returns (forward rows, forward+backward rows)."""
    mod, ref = make_modules(E, h, device)
    a = torch.randn(GEMM_SIZE, GEMM_SIZE, device=device)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE, device=device)
    gemm_flops = 2.0 * GEMM_SIZE**3
    fwd_rows, fb_rows = [], []
    for N in sizes:
        x = torch.randn(B, N, E, device=device)  # (B, N, E)
        repeats = repeats_for(N)

        def timed(fn):
            def run():
                fn()
                synchronize(device)

            return run

        mod.eval(), ref.eval()
        with torch.inference_mode():
            fns = {name: timed(fn) for name, fn in forward_fns(mod, ref, x).items()}
            fns["gemm"] = timed(lambda: a @ b)
            med = interleaved_medians(fns, repeats)
        gemm_rate = gemm_flops / med["gemm"]  # FLOP/s
        fwd_rows.append(_row(N, med, model_flops(B, N, E), gemm_rate, repeats))

        mod.train(), ref.train()
        xg = x.clone().requires_grad_()

        def with_backward(fn):
            def run():
                for p in (*mod.parameters(), *ref.parameters(), xg):
                    p.grad = None
                fn().sum().backward()
                synchronize(device)

            return run

        fns = {name: with_backward(fn) for name, fn in forward_fns(mod, ref, xg).items()}
        fns["gemm"] = timed(lambda: a @ b)
        med = interleaved_medians(fns, repeats)
        gemm_rate = gemm_flops / med["gemm"]  # measured again, in these rounds
        fb_rows.append(_row(N, med, 3 * model_flops(B, N, E), gemm_rate, repeats))
    return fwd_rows, fb_rows


def _row(N, med, flops, gemm_rate, repeats) -> dict:
    row = {"N": N, "repeats": repeats, "gemm_gflops": gemm_rate / 1e9}
    for name in VARIANTS:
        row[f"{name}_ms"] = 1e3 * med[name]
        row[f"{name}_speedup"] = med["nn.MHA"] / med[name]  # > 1: faster than nn.MHA
        row[f"{name}_gemm_fraction"] = flops / med[name] / gemm_rate
    return row


# ----------------------------------------------------------------------------
# memory, one variant per fresh process


def memory_child(variant: str, mode: str, N: int, B: int, E: int, h: int, device: str) -> int:
    """Run one pass of one variant and print its peak memory growth in bytes (JSON)."""
    device = torch.device(device)
    mod, ref = make_modules(E, h, device)
    train = mode == "forward_backward"
    mod.train(train), ref.train(train)

    def run_pass(fn) -> None:
        if train:
            fn().sum().backward()
        else:
            with torch.inference_mode():
                fn()
        synchronize(device)

    def make_fn(n: int):
        x = torch.randn(B, n, E, device=device, requires_grad=train)
        return forward_fns(mod, ref, x)[variant]

    run_pass(make_fn(64))  # warm up kernels and thread pools
    fn = make_fn(N)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = _reset_peak_rss()
    run_pass(fn)
    if device.type == "cuda":
        growth = torch.cuda.max_memory_allocated(device) - before
    else:
        growth = _peak_rss() - before
    print(json.dumps({"growth_bytes": int(growth)}))
    return 0


def _proc_status_bytes(field: str) -> int:
    """A memory field of /proc/self/status (Linux), e.g. VmRSS or VmHWM, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # the file says kB
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _reset_peak_rss() -> int:
    """Reset the peak resident set size to the current one; return the current one.

    Linux: writing 5 to /proc/self/clear_refs resets VmHWM. Elsewhere the
    peak cannot be reset and ru_maxrss (a peak since the start) is returned.
    """
    if os.path.exists("/proc/self/clear_refs"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _proc_status_bytes("VmRSS")
    return _ru_maxrss_bytes()


def _peak_rss() -> int:
    """Peak resident set size since `_reset_peak_rss` (Linux) or since the start."""
    if os.path.exists("/proc/self/clear_refs"):
        return _proc_status_bytes("VmHWM")
    return _ru_maxrss_bytes()


def _ru_maxrss_bytes() -> int:
    """ru_maxrss in bytes (it is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if platform.system() == "Darwin" else rss * 1024


def bench_memory(sizes, B, E, h, device, modes=("forward", "forward_backward")) -> list[dict]:
    """Peak memory growth of each variant and mode, each in a fresh subprocess."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    # glibc: return every large freed block to the system at once, so that the
    # resident set size follows the memory actually in use
    env["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    rows = []
    for mode in modes:
        for N in sizes:
            row = {"mode": mode, "N": N, "B": B}
            for variant in VARIANTS:
                cmd = [sys.executable, "-m", "mha_lib.bench.torch_mha", "--memory-child"]
                cmd += [variant, mode, str(N), str(B), str(E), str(h), str(device)]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if done.returncode != 0:
                    raise RuntimeError(f"memory subprocess failed: {' '.join(cmd)}\n{done.stderr}")
                growth = json.loads(done.stdout.strip().splitlines()[-1])["growth_bytes"]
                row[f"{variant}_mib"] = growth / 2**20
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------
# report


def print_speed(title: str, rows: list[dict]) -> None:
    print(title)
    print(
        f"{'N':>6} {'naive ms':>10} {'module ms':>10} {'nn.MHA ms':>10}"
        f" {'naive vs MHA':>13} {'module vs MHA':>14} {'module % GEMM':>14}"
    )
    for r in rows:
        print(
            f"{r['N']:>6} {r['naive_ms']:>10.1f} {r['module_ms']:>10.1f} {r['nn.MHA_ms']:>10.1f}"
            f" {r['naive_speedup']:>12.2f}x {r['module_speedup']:>13.2f}x"
            f" {100 * r['module_gemm_fraction']:>13.0f}%"
        )


def print_memory(rows: list[dict], device: torch.device) -> None:
    how = (
        "torch.cuda.max_memory_allocated() minus the memory allocated before the pass"
        if device.type == "cuda"
        else "peak resident set size during the pass (VmHWM, reset just before it) minus "
        "the resident set size before it"
    )
    print(f"peak memory growth of one pass, B = {rows[0]['B']}, each variant in a fresh process")
    print(f"  ({how}; weights and input allocated and kernels warmed up before)")
    print(f"{'pass':>17} {'N':>6} {'naive MiB':>10} {'module MiB':>11} {'nn.MHA MiB':>11}")
    for r in rows:
        print(
            f"{r['mode']:>17} {r['N']:>6} {r['naive_mib']:>10.0f} {r['module_mib']:>11.0f}"
            f" {r['nn.MHA_mib']:>11.0f}"
        )


def check_targets(fwd, fb, mem) -> dict[str, dict]:
    """Compare the measured numbers with the targets (only those that were measured)."""
    results = {}

    def add(name, value, ok):
        results[name] = {"value": value, "target": TARGETS[name], "met": bool(ok)}

    at = {r["N"]: r for r in fwd}
    if 2048 in at:
        add(
            "forward_speedup_at_2048", at[2048]["module_speedup"], at[2048]["module_speedup"] >= 1.5
        )
        frac = at[2048]["module_gemm_fraction"]
        add("forward_gemm_fraction_at_2048", frac, frac >= 0.65)
    fb_at = {r["N"]: r for r in fb}
    if 2048 in fb_at:
        s = fb_at[2048]["module_speedup"]
        add("forward_backward_speedup_at_2048", s, s >= 1.1)
    for r in mem:
        if r["mode"] == "forward" and r["N"] == 4096:
            add("forward_memory_mib_at_4096", r["module_mib"], r["module_mib"] <= 64)
    if fwd:
        worst = min(r["module_speedup"] for r in fwd + fb)
        add("min_speedup_any_n", worst, worst >= TARGETS["min_speedup_any_n"])
    return results


def print_targets(results: dict[str, dict]) -> None:
    print("targets")
    for name, r in results.items():
        mark = "✓" if r["met"] else "✗"
        print(f"  {mark} {name}: {r['value']:.2f} (target {r['target']})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench torch", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 2048])
    parser.add_argument("--memory-sizes", type=int, nargs="*", default=[2048, 4096])
    parser.add_argument("--batch", type=int, default=8, help="B for the timings")
    parser.add_argument("--memory-batch", type=int, default=1, help="B for the memory runs")
    parser.add_argument("--device", help="cpu, cuda, mps (default: pick_device())")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument("--memory-child", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        variant, mode, N, B, E, h, device = args.memory_child
        return memory_child(variant, mode, int(N), int(B), int(E), int(h), device)

    E, h = 512, 8
    device = torch.device(args.device) if args.device else pick_device()
    print(
        f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads), float32,"
        f" B = {args.batch}, E = {E}, h = {h}; medians of interleaved runs"
    )
    fwd, fb = bench_speed(args.sizes, args.batch, E, h, device)
    gemm = [round(r["gemm_gflops"]) for r in fwd + fb]
    print(
        f"reference float32 GEMM {GEMM_SIZE}x{GEMM_SIZE}x{GEMM_SIZE}, timed in the same rounds: "
        f"{min(gemm)}-{max(gemm)} GFLOP/s"
    )
    print_speed("forward (eval, inference_mode); 'vs MHA' = nn.MHA time / variant time", fwd)
    print_speed("forward + backward (training mode)", fb)
    mem = []
    if args.memory_sizes:
        mem = bench_memory(args.memory_sizes, args.memory_batch, E, h, device)
        print_memory(mem, device)
    targets = check_targets(fwd, fb, mem)
    print_targets(targets)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": str(device),
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "B": args.batch,
                    "embed_dim": E,
                    "num_heads": h,
                    "dtype": "float32",
                    "forward": fwd,
                    "forward_backward": fb,
                    "memory": mem,
                    "targets": targets,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
