"""Seeded random inputs shared by the tests of mha_lib.linear_attention (imported by them, not a
test), and transformers' reference functions in their (B, N, h, d) layout."""

import torch
import torch.nn.functional as F

DTYPES = [torch.float32, torch.float64]


def rule_inputs(B, h, N, d_k, d_v, seed, dtype, state=False):
    """q, k unit vectors (as the layer gives them), v, g ≤ 0, beta in (0, 1), a state or None."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = F.normalize(randn(B, h, N, d_k), dim=-1)  # (B, h, N, d_k)
    k = F.normalize(randn(B, h, N, d_k), dim=-1)  # (B, h, N, d_k)
    v = randn(B, h, N, d_v)  # (B, h, N, d_v)
    g = F.logsigmoid(randn(B, h, N) + 2)  # (B, h, N): decays exp(g) mostly near 1
    beta = torch.sigmoid(randn(B, h, N))  # (B, h, N)
    S0 = randn(B, h, d_k, d_v) if state else None  # (B, h, d_k, d_v)
    cast = [x.to(dtype) for x in (q, k, v, g, beta)]
    return (*cast, None if S0 is None else S0.to(dtype))


def reference(name):
    """transformers' torch_chunk_gated_delta_rule or torch_recurrent_gated_delta_rule, imported
    when a test runs (transformers imports triton, which notebook 09's module must import first)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5

    return getattr(modeling_qwen3_5, name)


def to_hf(*xs):
    """(B, h, N, ...) -> transformers' (B, N, h, ...)."""
    return [x.transpose(1, 2) for x in xs]


def assert_near(a, b, rel):
    """|a − b| ≤ rel · max |b|, elementwise: a tolerance relative to the output's scale."""
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(b.abs().max().item(), 1e-30)
    err = (a - b).abs().max().item()
    assert err <= rel * scale, f"largest difference {err:.3g}, {err / scale:.3g} of max |b|"
