"""`python -m mha_lib.distributed`: notebook 14's checks from a terminal, spawned or under torchrun.

Each job runs on every rank, compares what the ranks computed together with the same thing
computed in one process, and rank 0 prints one ✓ line (or the group ends with an error):

    python -m mha_lib.distributed collectives --world-size 3
    python -m mha_lib.distributed ring --world-size 4 --tokens 37 --causal
    python -m mha_lib.distributed tp --world-size 3
    python -m mha_lib.distributed smollm2 --world-size 3 --tokens 8
    torchrun --standalone --nproc-per-node 4 -m mha_lib.distributed ring --tokens 37 --causal
    torchrun --standalone --nproc-per-node 3 -m mha_lib.distributed smollm2

Without torchrun the command starts the processes itself (`launch.run`); under torchrun (which
sets RANK and WORLD_SIZE) every process joins the group torchrun describes. --backend nccl runs
the same jobs on GPUs, one per rank.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..testing import assert_close
from . import collectives
from .launch import init_from_env, run
from .ring import gather_sequence, ring_attention_rank, split_sequence
from .tensor_parallel import SMOLLM2_ATOL, one_process_rank, tensor_parallel_rank
from .weights import TINY, GGUFWeights, RandomWeights

__all__ = ["PROMPT", "job", "main"]

JOBS = ("collectives", "ring", "tp", "smollm2")
PROMPT = "The capital of France is"  # smollm2: the prompt continued greedily


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mha_lib.distributed", description=__doc__.split("\n")[0]
    )
    p.add_argument("job", choices=JOBS)
    p.add_argument(
        "--world-size", type=int, default=3, help="processes to start (not under torchrun)"
    )
    p.add_argument(
        "--tokens",
        type=int,
        default=None,
        help="ring: sequence length N (37); smollm2: tokens to generate (8)",
    )
    p.add_argument("--prompt", default=PROMPT, help="smollm2: the text to continue")
    p.add_argument("--causal", action="store_true", help="ring: causal (zigzag layout)")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--comm-timeout", type=float, default=60.0, help="seconds a collective waits")
    return p


def _ring_inputs(tokens: int) -> tuple:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 3, tokens, 16, generator=g) for _ in range(3))  # q, k, v


def job(name: str, tokens: int | None = None, is_causal: bool = False, prompt: str = PROMPT):
    """Worker: run job `name` on this rank; rank 0 returns the ✓ line, the others None."""
    r, P = dist.get_rank(), dist.get_world_size()
    if name == "smollm2":
        return _smollm2(8 if tokens is None else tokens, prompt)
    tokens = 37 if tokens is None else tokens
    if name == "collectives":
        out = [
            collectives.all_reduce_demo()["after"],
            collectives.all_gather_demo()["after"],
            collectives.reduce_scatter_demo()["after"],
            collectives.send_recv_demo()["after"],
        ]
        assert_close(out[0], P * (P + 1) / 2 * torch.tensor([1.0, 10.0, 100.0]))
        assert_close(out[1], torch.tensor([[10.0 * j, 10.0 * j + 1] for j in range(P)]))
        assert_close(out[2], torch.full((2,), (r + 1.0) * P * (P + 1) / 2))
        assert_close(out[3], torch.full((3,), float((r - 1) % P)))
        counted = collectives.counted_collectives(12 * P)
        sent = counted["traffic"].sent
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            assert sent.get(op, 0) == collectives.ring_bytes(op, 12 * P, P), op
        line = (
            f"✓ all_reduce, all_gather, reduce_scatter, send/recv on {P} ranks; "
            "ring bytes counted == formula"
        )
    elif name == "ring":
        layout = "zigzag" if is_causal else "contiguous"
        q, k, v = _ring_inputs(tokens)
        mine = [split_sequence(x, P, layout)[r] for x in (q, k, v)]
        o = ring_attention_rank(*mine, tokens, tokens, is_causal, layout)["o"]
        blocks = [None] * P
        dist.all_gather_object(blocks, o)
        full = gather_sequence(blocks, tokens, layout)
        assert_close(
            full, F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), atol=1e-5, rtol=1e-5
        )
        line = (
            f"✓ ring attention ({layout}, is_causal={is_causal}) on {P} ranks, N = {tokens} == SDPA"
        )
    else:
        ids = torch.randint(0, TINY.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
        weights = RandomWeights(TINY, seed=0)
        logits = tensor_parallel_rank(weights, ids)["logits"]
        with torch.no_grad():
            expected = weights.model()(ids)  # notebook 12's DecoderLM, in this process
        assert_close(logits, expected, atol=1e-4, rtol=1e-5)
        line = f"✓ the random-weight decoder sharded over {P} ranks == DecoderLM in one process"
    return line if r == 0 else None


def _smollm2(tokens: int, prompt: str) -> str | None:
    """SmolLM2-135M sharded over the group, continuing `prompt` greedily; then rank 0, alone
    (its shard freed), runs the whole model in its process and compares."""
    from ..llm.tokenizer import GGUFTokenizer

    r, P = dist.get_rank(), dist.get_world_size()
    weights = GGUFWeights()
    tokenizer = GGUFTokenizer.from_gguf(weights.path) if r == 0 else None
    box = [torch.tensor([tokenizer.encode(prompt)]) if r == 0 else None]
    dist.broadcast_object_list(box, src=0)  # every rank the same ids (B = 1, N)
    ids = box[0]
    sharded = tensor_parallel_rank(weights, ids, new_tokens=tokens)
    if r != 0:
        return None
    one = one_process_rank(weights, ids, new_tokens=tokens)
    assert_close(sharded["logits"], one["logits"], rtol=0, atol=SMOLLM2_ATOL)
    assert sharded["generated"].tolist() == one["generated"].tolist()
    text = tokenizer.decode(sharded["generated"][0].tolist())
    return (
        f"✓ SmolLM2-135M sharded over {P} ranks == the model in one process (logits to "
        f"{SMOLLM2_ATOL:g}, the same {tokens} greedy tokens): {prompt!r} -> {text!r}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        init_from_env(args.backend, args.comm_timeout)
        line = job(args.job, args.tokens, args.causal, args.prompt)
        dist.barrier()  # every rank done before any leaves
        dist.destroy_process_group()
    else:
        line = run(
            job,
            args.world_size,
            args.job,
            args.tokens,
            args.causal,
            args.prompt,
            backend=args.backend,
            comm_timeout=args.comm_timeout,
        )[0]
    if line:
        print(line, flush=True)
    return 0
