"""Seeded random inputs shared by the tests of mha_lib.nn (imported by them, not a test)."""

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from mha_lib.nn.gqa import repeat_kv
from mha_lib.nn.masks import bottom_right_causal_tensor

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
seeds = st.integers(0, 2**32 - 1)


def randn(*shape, seed, dtype=torch.float64, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(requires_grad)


def qkv(B, h, N, M, d_k, d_v, seed, dtype, requires_grad=False):
    q = randn(B, h, N, d_k, seed=seed, dtype=dtype, requires_grad=requires_grad)
    k = randn(B, h, M, d_k, seed=seed + 1, dtype=dtype, requires_grad=requires_grad)
    v = randn(B, h, M, d_v, seed=seed + 2, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


# the attention functions a decoder plugs in (tests/nn/test_backends.py and notebook 09's kernel
# in tests/llm/test_triton_attention.py), against one reference
ATTENTION_SHAPES = [(7, 7), (3, 11), (1, 9)]  # (n, m): a prompt, a chunk against a cache, a token


def grouped_qkv(n, m, dtype=torch.float64, seed=0, h=6, h_kv=2, d=16):
    """q (2, h, n, d), k and v (2, h_kv, m, d): n new queries against m keys, grouped heads."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, n, d, generator=g, dtype=dtype)
    k = torch.randn(2, h_kv, m, d, generator=g, dtype=dtype)
    v = torch.randn(2, h_kv, m, d, generator=g, dtype=dtype)
    return q, k, v


def bottom_right_reference(q, k, v):
    """SDPA on repeated key/value heads with the explicit bottom-right mask."""
    g = q.shape[1] // k.shape[1]
    mask = bottom_right_causal_tensor(q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(q, repeat_kv(k, g), repeat_kv(v, g), attn_mask=mask)
