"""One process group per world size for the tests of mha_lib.distributed.

Starting a group costs a second or more (each process imports torch), so each world size
P = 1..4 gets one group, started the first time a test asks for it, which runs in turn every
check that needs P processes (`launch.in_turn`): the collectives, every ring-attention case,
the tensor-parallel decoder where P divides its heads (random weights; and SmolLM2-135M on 1 and
3 ranks). The tests compare what the ranks returned with the single-process references:
`smollm2_reference` is notebook 12's model, loaded here once, in float32 and in float64. The
fault tests start their own groups.
"""

from __future__ import annotations

import pytest
import torch

from tests.distributed.distributed_inputs import SMOLLM2_IDS, SMOLLM2_NEW_TOKENS, Groups


@pytest.fixture(scope="session")
def groups() -> Groups:
    return Groups()


@pytest.fixture(scope="session")
def smollm2_reference() -> dict:
    """Notebook 12's DecoderLM (load_decoder on the packaged file) on SMOLLM2_IDS: "logits"
    (float32), its greedy tokens and their margins, and "logits64", the same model in float64
    (the float32 weights, every sum in float64: the exact logits, to float32's eye); its
    parameters' names and count, and a few whole weights."""
    from mha_lib.llm import load_decoder
    from mha_lib.nn import generate
    from mha_lib.nn.generation import Trace

    model = load_decoder()
    some = [  # whole weights, for tests/distributed/test_weights.py
        "embed.weight",
        "layers.7.self_attn.q_proj.weight",
        "layers.7.self_attn.k_proj.weight",
        "layers.7.self_attn.out_proj.weight",
        "layers.29.mlp.down_proj.weight",
        "layers.3.norm2.weight",
        "norm.weight",
    ]
    params = dict(model.named_parameters())
    weights = {name: params[name].detach().clone() for name in some}
    names = set(params)
    ids = torch.tensor([SMOLLM2_IDS])
    trace = Trace()
    with torch.no_grad():
        logits = model(ids)  # (1, N, V)
        generated = generate(model, ids, SMOLLM2_NEW_TOKENS, stop_ids=(), trace=trace)
        logits64 = model.double()(ids)
    return {
        "logits": logits,
        "generated": generated[:, ids.shape[1] :],
        "margins": trace.logit_margins,
        "logits64": logits64,
        "parameters": sum(p.numel() for p in model.parameters()),
        "names": names,
        "weights": weights,
    }
