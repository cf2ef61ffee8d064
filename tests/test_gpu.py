"""The library on a GPU equals the library on the CPU.

Every test here runs on each accelerator torch sees (CUDA, Apple's MPS) and is skipped, with the
reason, on a machine that has none. The CPU result in float64 is the reference; the same weights
and the same inputs (drawn on the CPU, then moved) run on the device.

Tolerances, and why they are not 1e-6:
- float32 on CUDA: torch keeps TF32 off for matrix products by default
  (`torch.backends.cuda.matmul.allow_tf32 = False`), but the device sums in another order (fused
  SDPA kernels, tiled GEMMs), so results agree to a few float32 ulps of the output's scale,
  amplified by the softmax: rtol = atol = 1e-4. The tests assert that TF32 is off, since with it
  on, products keep only 10 mantissa bits and the error grows to about 1e-3.
- float32 on MPS: the same, 1e-4 (MPS has no float64; nothing here uses float64 on the device).
- float16 / bfloat16: 10 / 7 mantissa bits, so an element of a product of width 32 is off by
  about 1e-3 / 1e-2 of its scale: rtol = atol = 1e-2 (float16) and 5e-2 (bfloat16), against the
  float64 CPU result.
"""

from __future__ import annotations

import pytest
import torch

from mha_lib.block import TransformerBlock
from mha_lib.nn import (
    GroupedQueryAttention,
    bottom_right_causal_mask_mod,
    flash_attention,
    grouped_query_attention,
)
from mha_lib.pytorch import MultiHeadAttention


def _devices() -> list:
    found = []
    found.append(
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here"),
        )
    )
    mps = getattr(torch.backends, "mps", None)
    has_mps = mps is not None and mps.is_available()
    found.append(pytest.param("mps", marks=pytest.mark.skipif(not has_mps, reason="no MPS here")))
    return found


DEVICES = _devices()
LOW = [torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _dtypes(device: str) -> list[torch.dtype]:
    """float32 everywhere; float16 and bfloat16 where the device computes in them."""
    dtypes = [torch.float32, torch.float16]
    if device == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        dtypes.append(torch.bfloat16)
    if device == "mps":
        dtypes.append(torch.bfloat16)
    return dtypes


def _randn(*shape: int, seed: int) -> torch.Tensor:
    """Standard normal numbers drawn on the CPU (the same on every machine), float64."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    tol = TOL[dtype]
    assert got.dtype == dtype and torch.isfinite(got).all()
    torch.testing.assert_close(got.double().cpu(), expected.double(), rtol=tol, atol=tol)


@pytest.fixture(autouse=True)
def _no_tf32():
    if torch.cuda.is_available():
        assert not torch.backends.cuda.matmul.allow_tf32, "TF32 matmul is on: tolerances too tight"


@pytest.mark.parametrize("device", DEVICES)
def test_module_on_the_device_equals_the_cpu(device):
    torch.manual_seed(0)
    ref = MultiHeadAttention(32, 4, batch_first=True).double()  # (E, h) = (32, 4), d = 8
    x = _randn(2, 11, 32, seed=1)  # (B, N, E)
    kpm = torch.arange(11)[None, :] >= torch.tensor([11, 6])[:, None]  # (B, N), True = padding
    for need_weights in (False, True):
        expected, _ = ref(x, key_padding_mask=kpm, need_weights=need_weights)
        for dtype in _dtypes(device):
            m = MultiHeadAttention.from_torch(ref.to_torch()).to(device=device, dtype=dtype)
            out, _ = m(
                x.to(device, dtype), key_padding_mask=kpm.to(device), need_weights=need_weights
            )
            _close(out, expected, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_module_gradients_on_the_device_equal_the_cpu(device):
    torch.manual_seed(0)
    ref = MultiHeadAttention(16, 2, batch_first=True).double()
    x = _randn(2, 7, 16, seed=2)
    ref(x, is_causal=True, attn_mask=torch.ones(7, 7, dtype=torch.bool).triu(1))[0].sum().backward()
    m = MultiHeadAttention.from_torch(ref.to_torch()).to(device=device, dtype=torch.float32)
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1).to(device)
    m(x.to(device, torch.float32), is_causal=True, attn_mask=causal)[0].sum().backward()
    for (name, p_ref), p in zip(ref.named_parameters(), m.parameters()):
        assert p.grad is not None, name
        _close(p.grad, p_ref.grad, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_block_on_the_device_equals_the_cpu(device):
    torch.manual_seed(3)
    for norm_first in (False, True):
        ref = TransformerBlock(16, 4, 64, dropout=0.0, norm_first=norm_first).double().eval()
        x = _randn(2, 9, 16, seed=4)
        kpm = torch.arange(9)[None, :] >= torch.tensor([9, 5])[:, None]
        real = ~kpm  # outputs at padded positions are never used
        with torch.no_grad():
            expected, _ = ref(x, key_padding_mask=kpm)
            for dtype in _dtypes(device):
                blk = TransformerBlock(16, 4, 64, dropout=0.0, norm_first=norm_first)
                blk.load_state_dict(ref.state_dict())
                blk = blk.to(device=device, dtype=dtype).eval()
                out, _ = blk(x.to(device, dtype), key_padding_mask=kpm.to(device))
                _close(out[real.to(device)], expected[real], dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_kv_cache_decoding_on_the_device_equals_the_cpu(device):
    torch.manual_seed(5)
    ref = GroupedQueryAttention(32, 8, 2).double()  # h = 8 query heads, h_kv = 2
    x = _randn(2, 10, 32, seed=6)  # (B, N, C)
    with torch.no_grad():
        expected = ref(x, is_causal=True)  # the whole sequence at once, (B, N, C)
        for dtype in _dtypes(device):
            m = GroupedQueryAttention(32, 8, 2)
            m.load_state_dict(ref.state_dict())
            m = m.to(device=device, dtype=dtype)
            xd = x.to(device, dtype)
            cache = m.new_cache(2, 10)
            assert cache.k.device.type == device and cache.k.dtype == dtype
            steps = [m(xd[:, :3], cache=cache)]  # a chunk of 3, then one token at a time
            steps += [m(xd[:, t : t + 1], cache=cache) for t in range(3, 10)]
            _close(torch.cat(steps, dim=1), expected, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_gqa_on_the_device_equals_the_cpu(device):
    q, k, v = _randn(2, 8, 6, 16, seed=7), _randn(2, 2, 9, 16, seed=8), _randn(2, 2, 9, 8, seed=9)
    for is_causal in (False, True):
        expected = grouped_query_attention(q, k, v, is_causal=is_causal)  # (B, h, N, d_v)
        for dtype in _dtypes(device):
            qd, kd, vd = (t.to(device, dtype) for t in (q, k, v))
            _close(grouped_query_attention(qd, kd, vd, is_causal=is_causal), expected, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("N", "M"), [(37, 37), (5, 70), (64, 33)])
def test_flash_attention_on_the_device_equals_the_cpu(device, N, M):
    q, k, v = (
        _randn(1, 2, N, 16, seed=10),
        _randn(1, 2, M, 16, seed=11),
        _randn(1, 2, M, 8, seed=12),
    )
    do = _randn(1, 2, N, 8, seed=13)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    expected, _ = flash_attention(qc, kc, vc, block_q=16, block_k=16)
    expected.backward(do)
    qd, kd, vd = (t.to(device, torch.float32).requires_grad_() for t in (q, k, v))
    out, _ = flash_attention(qd, kd, vd, block_q=16, block_k=16)
    out.backward(do.to(device, torch.float32))
    _close(out, expected, torch.float32)
    for got, ref in ((qd.grad, qc.grad), (kd.grad, kc.grad), (vd.grad, vc.grad)):
        _close(got, ref, torch.float32)
    for dtype in LOW:
        if dtype not in _dtypes(device):
            continue
        low = (t.detach().to(dtype) for t in (qd, kd, vd))
        out, _ = flash_attention(*low, block_q=16, block_k=16)
        _close(out, expected, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_give_zeros_not_nan_on_the_device(device, need_weights):
    torch.manual_seed(14)
    ref = MultiHeadAttention(16, 4, batch_first=True)
    x = _randn(2, 6, 16, seed=15).float()
    kpm = torch.arange(6)[None, :] >= torch.tensor([6, 0])[:, None]  # sequence 1: every key masked
    expected, _ = ref(x, key_padding_mask=kpm, need_weights=need_weights)
    m = MultiHeadAttention.from_torch(ref.to_torch()).to(device)
    out, _ = m(x.to(device), key_padding_mask=kpm.to(device), need_weights=need_weights)
    _close(out, expected, torch.float32)
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


@pytest.mark.parametrize("device", DEVICES)
def test_module_equals_torch_module_on_the_device(device):
    torch.manual_seed(16)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).to(device)
    ours = MultiHeadAttention.from_torch(ref)
    x = _randn(4, 64, 16, seed=17).float().to(device)
    causal = torch.ones(64, 64, dtype=torch.bool).triu(1).to(device)
    expected, _ = ref(x, x, x, attn_mask=causal, is_causal=True, need_weights=False)
    out, _ = ours(x, attn_mask=causal, is_causal=True)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_flash_attention_with_a_mask_mod_on_the_device_equals_the_cpu(device):
    # a chunk of 5 queries against 40 keys: the bottom-right causal mask, tiles skipped
    q, k, v = (
        _randn(1, 2, 5, 16, seed=18),
        _randn(1, 2, 40, 16, seed=19),
        _randn(1, 2, 40, 8, seed=20),
    )
    mod = bottom_right_causal_mask_mod(5, 40)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))
    expected, _ = flash_attention(qc, kc, vc, block_q=8, block_k=8, mask_mod=mod)
    expected.sum().backward()
    qd, kd, vd = (t.to(device, torch.float32).requires_grad_() for t in (q, k, v))
    out, _ = flash_attention(qd, kd, vd, block_q=8, block_k=8, mask_mod=mod)
    out.sum().backward()
    _close(out, expected, torch.float32)
    for got, ref in ((qd.grad, qc.grad), (kd.grad, kc.grad), (vd.grad, vc.grad)):
        _close(got, ref, torch.float32)
