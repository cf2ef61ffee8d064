"""`python -m mha_lib.bench deltanet`: notebook 16's gated delta rule, chunked against step by step
and against transformers, and one decoding step against softmax attention's.

float32 on the CPU by default, (B, h, d_k, d_v) = (1, 8, 128, 128), unit queries and keys (as the
layer gives them); medians of interleaved rounds in one run, reported as ratios:
1. a whole sequence of N = 4096 tokens, on the CPU threads torch uses (`--threads`; the report
   and the tables say how many: step by step, the per-token products are too small to share
   between threads, so the ratio depends on the thread count): `gated_delta_rule` (chunks of 64)
   against `gated_delta_recurrence` (one `gated_delta_step` per token; the goal: chunked at least
   5× faster) and against transformers' `torch_chunk_gated_delta_rule` on the same inputs, given in
   its (B, N, h, d) layout (the goal: at least 0.8× its speed). Without flash-linear-attention,
   which the series never installs, transformers runs that reference PyTorch function itself. The
   three outputs and final states are asserted to agree before anything is timed;
2. one decoding step after N tokens, for several N: `gated_delta_step` on the state that N
   tokens left (d_k × d_v per head, whatever N; each N timed on its own) against softmax
   attention of one query over an N-token key/value cache (`F.scaled_dot_product_attention`);
   the step's time should stay flat in N where softmax attention's grows, and so should the
   bytes each keeps (the state; the cache, 2·h·N·d numbers). The step's output
   is asserted to equal the chunked rule's on that token.
3. the fixed cost of a call: step by step at a tiny size (h = 1, d = 2: almost no arithmetic),
   timed in the same interleaved rounds as the real size, and the same for one decoding step.
   Its time over the real size's is the share of a step that is per-call overhead (Python, the
   operators' dispatch), which no faster arithmetic or memory would remove; it is why the ratio
   step by step / chunked differs from machine to machine.
`--json PATH` writes the numbers, `--markdown PATH` prints docs/benchmarks.md's tables from them.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from ..linear_attention.update_rules import (
    gated_delta_recurrence,
    gated_delta_rule,
    gated_delta_step,
)
from .cli import add_common_arguments, tables_or_threads, write_numbers
from .timing import interleaved_medians
from .torch_mha import synchronize


def _transformers_rule():
    try:
        from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule
    except ImportError:
        return None
    return torch_chunk_gated_delta_rule


TINY_D = 2  # the tiny size whose step is all per-call overhead: 1 head of 2 × 2


def rule_inputs(B: int, h: int, N: int, d: int, device, seed: int = 0):
    """q, k unit vectors (B, h, N, d), v (B, h, N, d), g ≤ 0 and beta in (0, 1) (B, h, N)."""
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, h, N, d, generator=gen), dim=-1)
    k = F.normalize(torch.randn(B, h, N, d, generator=gen), dim=-1)
    v = torch.randn(B, h, N, d, generator=gen)
    g = F.logsigmoid(torch.randn(B, h, N, generator=gen) + 2)  # decays exp(g) around 0.85
    beta = torch.sigmoid(torch.randn(B, h, N, generator=gen))
    return [x.to(device) for x in (q, k, v, g, beta)]


def _relative(a, b) -> float:
    return (a - b).abs().max().item() / b.abs().max().item()


def bench_sequence(B, h, N, d, chunk_size, device, repeats) -> tuple[dict, torch.Tensor]:
    """Chunked vs step by step vs transformers over N tokens; returns the row and the final
    state (the decoding benchmark starts from it)."""
    q, k, v, g, beta = rule_inputs(B, h, N, d, device)
    fns = {
        "chunked": lambda: gated_delta_rule(q, k, v, g, beta, chunk_size),
        "recurrence": lambda: gated_delta_recurrence(q, k, v, g, beta),
    }
    tiny = rule_inputs(B, 1, N, TINY_D, device)  # the same N steps with almost no arithmetic
    fns["recurrence_tiny"] = lambda: gated_delta_recurrence(*tiny)
    hf_rule = _transformers_rule()
    if hf_rule is not None:
        hf_inputs = [x.transpose(1, 2).contiguous() for x in (q, k, v, g, beta)]  # (B, N, h, ...)
        fns["transformers"] = lambda: hf_rule(*hf_inputs, chunk_size, None, True)
    with torch.inference_mode():
        o, S = fns["chunked"]()
        o_rec, S_rec = fns["recurrence"]()
        row = {"B": B, "h": h, "N": N, "d": d, "chunk_size": chunk_size}
        row["recurrence_difference"] = max(_relative(o, o_rec), _relative(S, S_rec))
        if hf_rule is not None:
            o_hf, S_hf = fns["transformers"]()
            row["transformers_difference"] = max(
                _relative(o, o_hf.transpose(1, 2)), _relative(S, S_hf)
            )
        for key in ("recurrence_difference", "transformers_difference"):
            if row.get(key, 0) > 1e-4:  # float32 rounding over N steps stays far below
                raise AssertionError(f"the outputs disagree: {key} = {row[key]:.2e} of max |o|")
        timed = {name: (lambda f: lambda: (f(), synchronize(device)))(f) for name, f in fns.items()}
        med = interleaved_medians(timed, repeats)
    for name, t in med.items():
        row[f"{name}_ms"] = 1e3 * t
    row["recurrence_over_chunked"] = med["recurrence"] / med["chunked"]
    row["overhead_share"] = med["recurrence_tiny"] / med["recurrence"]
    if hf_rule is not None:
        row["transformers_over_chunked"] = med["transformers"] / med["chunked"]
    return row, S


def bench_decode(S, sizes, device, repeats, steps: int = 20) -> list[dict]:
    """One decoding step after N tokens, for each N: the gated delta step on the state that N
    tokens left (the chunked rule run over them, a state of S's shape (B, h, d, d)) against
    softmax attention of one query over an N-token cache; each N's step is timed on its own.
    Each timed call runs `steps` steps."""
    B, h, d, _ = S.shape
    gen = torch.Generator().manual_seed(1)
    q, k, v, g, beta = (x[:, :, 0] for x in rule_inputs(B, h, 1, d, device, seed=2))
    q1 = q[:, :, None]  # (B, h, 1, d): the new token's query

    def run_steps(fn):
        def timed():
            for _ in range(steps):
                fn()
            synchronize(device)

        return timed

    tiny = [x[:, :1, 0, :TINY_D] for x in rule_inputs(B, 1, 1, TINY_D, device, seed=2)[:3]]
    tiny_S = torch.zeros(B, 1, TINY_D, TINY_D, device=device)
    tiny_g, tiny_beta = g[:, :1], beta[:, :1]
    fns = {"delta_tiny": run_steps(lambda: gated_delta_step(tiny_S, *tiny, tiny_g, tiny_beta))}
    for N in sizes:
        with torch.inference_mode():
            _, S_N = gated_delta_rule(*rule_inputs(B, h, N, d, device, seed=3))  # (B, h, d, d)
            o_step, _ = gated_delta_step(S_N, q, k, v, g, beta)
            o_rule, _ = gated_delta_rule(*(x[:, :, None] for x in (q, k, v, g, beta)), 1, S_N)
        if _relative(o_step, o_rule[:, :, 0]) > 1e-5:
            raise AssertionError(f"the decoding step after {N} tokens disagrees with the rule")
        fns[f"delta_{N}"] = run_steps(lambda S_N=S_N: gated_delta_step(S_N, q, k, v, g, beta))
        cache_k = torch.randn(B, h, N, d, generator=gen).to(device)  # (B, h, N, d)
        cache_v = torch.randn(B, h, N, d, generator=gen).to(device)

        def softmax_step(cache_k=cache_k, cache_v=cache_v):
            return F.scaled_dot_product_attention(q1, cache_k, cache_v)

        fns[f"softmax_{N}"] = run_steps(softmax_step)
    with torch.inference_mode():
        med = interleaved_medians(fns, repeats)
    state_bytes = S.numel() * S.element_size()
    return [
        {
            "N": N,
            "delta_step_ms": 1e3 * med[f"delta_{N}"] / steps,
            "tiny_step_ms": 1e3 * med["delta_tiny"] / steps,
            "softmax_step_ms": 1e3 * med[f"softmax_{N}"] / steps,
            "state_mib": state_bytes / 2**20,
            "cache_mib": 2 * B * h * N * d * S.element_size() / 2**20,
        }
        for N in sizes
    ]


def markdown(numbers: dict) -> list[str]:
    """docs/benchmarks.md's two tables from the JSON that --json writes."""
    s, threads = numbers["sequence"], numbers["threads"]
    lines = [
        f"| the whole sequence, N = {s['N']}, h = {s['h']}, d = {s['d']}, "
        f"{threads} thread{'s' if threads > 1 else ''} | ms | its time / chunked's |",
        "|---|---|---|",
        f"| chunked (chunks of {s['chunk_size']}) | {s['chunked_ms']:.1f} | |",
        f"| step by step | {s['recurrence_ms']:.1f} | {s['recurrence_over_chunked']:.1f}× |",
    ]
    if "transformers_ms" in s:
        lines.append(
            f"| transformers' `torch_chunk_gated_delta_rule` | {s['transformers_ms']:.1f} "
            f"| {s['transformers_over_chunked']:.2f}× |"
        )
    if "recurrence_tiny_ms" in s:
        lines.append(
            f"| step by step at h = 1, d = {TINY_D} (per-call overhead) | "
            f"{s['recurrence_tiny_ms']:.1f} | {s['recurrence_tiny_ms'] / s['chunked_ms']:.1f}× "
            f"({s['overhead_share']:.0%} of step by step's time) |"
        )
    lines += [
        "",
        "| tokens before the step, N | gated delta step | softmax over the cache | state | cache |",
        "|---|---|---|---|---|",
    ]
    for r in numbers["decode"]:
        lines.append(
            f"| {r['N']} | {r['delta_step_ms']:.3f} ms | {r['softmax_step_ms']:.3f} ms "
            f"| {r['state_mib']:.2f} MiB | {r['cache_mib']:.2f} MiB |"
        )
    rows = numbers["decode"]
    if "tiny_step_ms" in rows[0]:
        step = sorted(r["delta_step_ms"] for r in rows)[len(rows) // 2]  # the median over N
        lines += [
            "",
            f"One gated delta step at h = 1, d = {TINY_D} took {rows[0]['tiny_step_ms']:.3f} ms: "
            f"{rows[0]['tiny_step_ms'] / step:.0%} of the real step's {step:.3f} ms (the median "
            "over N) is per-call overhead.",
        ]
    return lines


def report(numbers: dict) -> None:
    s, rows, threads = numbers["sequence"], numbers["decode"], numbers["threads"]
    print(f"the whole sequence, N = {s['N']}, on {threads} CPU thread{'s' if threads > 1 else ''}:")
    print(f"  {'chunked, chunks of ' + str(s['chunk_size']):<30}{s['chunked_ms']:10.1f} ms")
    goal = "met" if s["recurrence_over_chunked"] >= 5 else "NOT met"
    print(
        f"  {'step by step, ' + str(s['N']) + ' steps':<30}{s['recurrence_ms']:10.1f} ms   "
        f"chunked is {s['recurrence_over_chunked']:.1f}x faster with {threads} thread"
        f"{'s' if threads > 1 else ''} (goal: at least 5x, {goal})"
    )
    if "transformers_ms" in s:
        goal = "met" if s["transformers_over_chunked"] >= 0.8 else "NOT met"
        print(
            f"  {'transformers, chunked':<30}{s['transformers_ms']:10.1f} ms   ours runs at "
            f"{s['transformers_over_chunked']:.2f}x its speed (goal: at least 0.8x, {goal})"
        )
        print(
            f"  largest difference, relative to max |o|: step by step "
            f"{s['recurrence_difference']:.1e}, transformers {s['transformers_difference']:.1e}"
        )
    else:
        print("  transformers is not installed: no comparison")
    print(
        f"  {'step by step, h = 1, d = ' + str(TINY_D):<30}{s['recurrence_tiny_ms']:10.1f} ms   "
        f"per-call overhead: {s['overhead_share']:.0%} of step by step's time"
    )
    print("one decoding step after N tokens:")
    print(f"  {'N':>8} {'gated delta step':>18} {'softmax, cache':>20} {'state':>12} {'cache':>12}")
    for r in rows:
        print(
            f"  {r['N']:>8} {r['delta_step_ms']:15.3f} ms {r['softmax_step_ms']:17.3f} ms "
            f"{r['state_mib']:8.2f} MiB {r['cache_mib']:8.2f} MiB"
        )
    first, last = rows[0], rows[-1]
    step = sorted(r["delta_step_ms"] for r in rows)[len(rows) // 2]  # the median over N
    print(
        f"  one step at h = 1, d = {TINY_D}: {first['tiny_step_ms']:.3f} ms, "
        f"{first['tiny_step_ms'] / step:.0%} of the real step's median {step:.3f} ms"
    )
    print(
        f"  from N = {first['N']} to {last['N']}: the delta step's time "
        f"x{last['delta_step_ms'] / first['delta_step_ms']:.2f}, softmax attention's "
        f"x{last['softmax_step_ms'] / first['softmax_step_ms']:.2f}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_lib.bench deltanet", description=__doc__)
    parser.add_argument(
        "--shape", type=int, nargs=4, default=[1, 8, 4096, 128], metavar=("B", "h", "N", "d")
    )
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--decode-sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, mps")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if tables_or_threads(args, markdown):
        return 0
    device = torch.device(args.device)
    B, h, N, d = args.shape
    print(
        f"torch {torch.__version__} on {device} ({torch.get_num_threads()} CPU threads), float32, "
        f"B = {B}, h = {h}, d_k = d_v = {d}; medians of {args.repeats} interleaved rounds"
    )
    sequence, S = bench_sequence(B, h, N, d, args.chunk_size, device, args.repeats)
    numbers = {
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "sequence": sequence,
        "decode": bench_decode(S, args.decode_sizes, device, args.repeats),
    }
    report(numbers)
    write_numbers(args, numbers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
