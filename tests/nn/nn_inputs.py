"""Seeded random inputs shared by the tests of mha_lib.nn (imported by them, not a test)."""

import torch
from hypothesis import strategies as st

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
