"""The checks that tests/distributed/ runs in its shared process groups, and their inputs
(imported by the tests, not a test).

conftest.py starts one group per world size through `Groups`; the test modules compute the
single-process references from the same inputs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import torch

from mha_lib.distributed import collectives, command, launch
from mha_lib.distributed.ring import (
    gathered_attention_rank,
    rank_calls,
    ring_attention_grad_rank,
    ring_attention_rank,
    split_sequence,
)
from mha_lib.distributed.tensor_parallel import tensor_parallel_rank
from mha_lib.distributed.weights import TINY, GGUFWeights, RandomWeights
from mha_lib.nn.decoder import DecoderConfig

WORLD_SIZES = (1, 2, 3, 4)
# the same kind of model with 4 key/value heads of 6, for world sizes 2 and 4 (TINY has 3)
TINY_KV4 = replace(TINY, num_heads=8, num_kv_heads=4, head_dim=6)
# SmolLM2 runs on these world sizes (its 3 key/value heads), on these tokens: GGUFTokenizer's
# encoding of "Tensor parallelism splits every layer of a model over several devices:"
SMOLLM2_WORLD_SIZES = (1, 3)
SMOLLM2_IDS = [15944, 48357, 30855, 897, 4070, 282, 253, 1743, 690, 1545, 3381, 42]
SMOLLM2_NEW_TOKENS = 4
# every architecture and option of tests/hf_models.small_configs runs on these world sizes
ARCH_WORLD_SIZES = (1, 2)
# gloo's own collectives are measured on this many float32 numbers (768 KiB, divisible by 1..4)
GLOO_NUMEL = 12 * 2**14


def ring_cases(P: int) -> dict[str, tuple]:
    """name: (B, h, N, M, d_k, d_v, is_causal, layout, dtype): odd lengths, N != M, the
    shortest sequence P allows, both layouts, causal and not."""
    shortest = 2 * P  # every chunk one token
    return {
        "contiguous": (2, 3, 13, 13, 8, 5, False, "contiguous", torch.float64),
        "contiguous_cross": (1, 2, 11, 17, 8, 6, False, "contiguous", torch.float64),
        "zigzag": (2, 3, 13, 13, 8, 5, False, "zigzag", torch.float64),
        "contiguous_causal": (2, 3, 13, 13, 8, 5, True, "contiguous", torch.float64),
        "zigzag_causal": (2, 3, 13, 13, 8, 5, True, "zigzag", torch.float64),
        "zigzag_causal_shortest": (1, 2, shortest, shortest, 4, 4, True, "zigzag", torch.float64),
        "zigzag_causal_float32": (2, 4, 37, 37, 16, 16, True, "zigzag", torch.float32),
    }


def ring_inputs(case: tuple, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k, v and do (the gradient of the output, for the backward cases)."""
    B, h, N, M, d_k, d_v, _, _, dtype = case
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, N, d_k, generator=g, dtype=dtype)
    k = torch.randn(B, h, M, d_k, generator=g, dtype=dtype)
    v = torch.randn(B, h, M, d_v, generator=g, dtype=dtype)
    do = torch.randn(B, h, N, d_v, generator=g, dtype=dtype)
    return q, k, v, do


# the backward pass (forward, then backward on the same ring): name -> a case of ring_cases
GRAD_CASES = {"grad_zigzag_causal": "zigzag_causal", "grad_contiguous_cross": "contiguous_cross"}


def tp_config(P: int) -> DecoderConfig:
    return TINY if 3 % P == 0 else TINY_KV4


def tp_cases(P: int) -> dict[str, tuple]:
    """name: (weights, counted, new_tokens)."""
    config = tp_config(P)
    cases = {
        "tp_float64": (RandomWeights(config, seed=3, dtype=torch.float64), False, 0),
        "tp_counted": (RandomWeights(config, seed=3), True, 3),
    }
    if P in SMOLLM2_WORLD_SIZES:  # the real model: no rank holds it whole (P = 3)
        cases["smollm2"] = (GGUFWeights(), True, SMOLLM2_NEW_TOKENS)
    if P in ARCH_WORLD_SIZES:  # Qwen2, Qwen3, Gemma 2 and 3, the options: 9 tokens, past windows
        cases |= {f"arch_{name}": (w, False, 0) for name, w in arch_weights().items()}
    return cases


@cache
def arch_weights() -> dict[str, RandomWeights]:
    """name: seeded random float64 weights of each small model of `small_configs`."""
    from tests.hf_models import small_configs

    return {
        name: RandomWeights(config, seed=3, dtype=torch.float64)
        for name, config in small_configs().items()
    }


def tp_ids(weights) -> torch.Tensor:
    if isinstance(weights, GGUFWeights):
        return torch.tensor([SMOLLM2_IDS])  # (1, 12)
    return torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(1))


COLLECTIVES = {
    "all_reduce": (collectives.all_reduce_demo, ()),
    "all_gather": (collectives.all_gather_demo, ()),
    "reduce_scatter": (collectives.reduce_scatter_demo, ()),
    "send_recv": (collectives.send_recv_demo, ()),
    "counted_24": (collectives.counted_collectives, (24,)),
    "counted_uneven": (collectives.counted_collectives, (23, torch.float64)),
    "gloo_bytes": (collectives.gloo_traffic, (GLOO_NUMEL,)),
    "whoami": (launch.whoami, ()),
}


def _calls(P: int, rank: int) -> dict[str, tuple]:
    calls = dict(COLLECTIVES)
    for name, case in ring_cases(P).items():
        N, M, is_causal, layout = case[2], case[3], case[6], case[7]
        mine = [split_sequence(x, P, layout)[rank] for x in ring_inputs(case)]
        calls[name] = (ring_attention_rank, (*mine[:3], N, M, is_causal, layout))
        if name == "zigzag_causal":
            calls["gathered"] = (gathered_attention_rank, (*mine[:3], N, M, is_causal, layout))
    for name, of in GRAD_CASES.items():
        q, k, v, do = ring_inputs(ring_cases(P)[of])
        is_causal, layout = ring_cases(P)[of][6:8]
        grad_calls = rank_calls(q, k, v, P, is_causal, layout, ring_attention_grad_rank, do)
        calls[name] = grad_calls[rank]
    for name, (weights, counted, new_tokens) in tp_cases(P).items():
        calls[name] = (tensor_parallel_rank, (weights, tp_ids(weights), counted, new_tokens))
    calls["job_ring"] = (command.job, ("ring", 2 * P + 1, True))
    calls["job_collectives"] = (command.job, ("collectives",))
    if 3 % P == 0:
        calls["job_tp"] = (command.job, ("tp",))
    if P == 3:  # the command's SmolLM2 job, compared with the one-process model on rank 0
        calls["job_smollm2"] = (command.job, ("smollm2", 2))
    return calls


class Groups:
    """groups[P]: {check name: [what rank 0, 1, ... returned]}, from one group of P processes."""

    def __init__(self):
        self.results: dict[int, dict[str, list]] = {}
        self.seconds: dict[int, float] = {}
        self.peak_rss: dict[int, list] = {}
        self.together: dict[int, dict | None] = {}

    def __getitem__(self, P: int) -> dict[str, list]:
        if P not in self.results:
            per_rank = [(list(_calls(P, r).values()),) for r in range(P)]
            names = list(_calls(P, 0))
            out = launch.run(launch.in_turn, P, per_rank=per_rank, timeout=240)
            self.results[P] = {name: [out[r][i] for r in range(P)] for i, name in enumerate(names)}
            self.seconds[P] = out.seconds
            self.peak_rss[P] = out.peak_rss
            self.together[P] = out.together
        return self.results[P]
