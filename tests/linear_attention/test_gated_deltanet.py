"""mha_lib.linear_attention.gated_deltanet: equal to transformers' Qwen3_5GatedDeltaNet built from a
tiny random Qwen3_5TextConfig, in one pass and when decoding with its cache (prefill chunked, then
one token at a time); the cache is of a fixed size; bad input refused.

transformers computes the rule and the gated RMSNorm in float32 whatever the input dtype, so in
float64 the two agree to float32's precision relative to the output, not to float64's.
"""

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F

from mha_lib.linear_attention import (
    GatedDeltaNet,
    GatedDeltaNetCache,
    GatedRMSNorm,
    gated_delta_rule,
    l2_normalize,
)
from tests.linear_attention.linear_inputs import assert_near

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)
HF = 1e-5  # relative to max |output|; transformers computes in float32
F32, F64 = torch.float32, torch.float64
C = 24


def hf_layer(h_k, h_v, d_k, d_v, K, dtype, seed=0):
    """transformers' layer from a tiny Qwen3_5TextConfig, every weight random, and the config."""
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

    cfg = Qwen3_5TextConfig(
        vocab_size=32,
        hidden_size=C,
        intermediate_size=48,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=12,
        linear_num_key_heads=h_k,
        linear_num_value_heads=h_v,
        linear_key_head_dim=d_k,
        linear_value_head_dim=d_v,
        linear_conv_kernel_dim=K,
    )
    layer = Qwen3_5GatedDeltaNet(cfg, 0).to(dtype)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            scale = 1.0 if name in ("A_log", "dt_bias", "norm.weight") else 0.3
            p.copy_(scale * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return layer, cfg


def inputs(B, N, dtype, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, C, generator=gen, dtype=torch.float64).to(dtype)  # (B, N, C)


SHAPES = [  # (h_k, h_v, d_k, d_v, K)
    (1, 1, 8, 8, 4),
    (2, 4, 8, 6, 4),
    (3, 3, 4, 10, 2),
]


@needs_transformers
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "N, chunk_size, dtype",
    [(1, 64, F32), (3, 64, F32), (37, 64, F32), (37, 8, F32), (37, 8, F64)],
)
def test_from_hf_equals_qwen3_5_gated_deltanet(N, chunk_size, dtype, shape):
    """One token, fewer tokens than the convolution's K, one chunk and five chunks (the last
    partial); float64 too, where transformers still computes the rule in float32."""
    hf, _ = hf_layer(*shape, dtype)
    ours = GatedDeltaNet.from_hf(hf, chunk_size=chunk_size)
    assert next(ours.parameters()).dtype == dtype
    x = inputs(2, N, dtype)
    with torch.no_grad():
        assert_near(ours(x), hf(x), HF)


@needs_transformers
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("prompt", [1, 2, 11])
def test_cached_decoding_equals_the_full_pass_and_transformers_cache(shape, prompt):
    """A prompt through the chunked rule, then one token at a time through the step: the same
    outputs as one pass over everything, and as transformers' layer with its DynamicCache; the
    final states agree too (transformers keeps the convolution's last K inputs, we keep K − 1)."""
    from transformers.cache_utils import DynamicCache

    hf, cfg = hf_layer(*shape, torch.float32)
    ours = GatedDeltaNet.from_hf(hf, chunk_size=4)
    x = inputs(2, 19, torch.float32)
    cache, hf_cache = ours.new_cache(2), DynamicCache(config=cfg)
    with torch.no_grad():
        full, hf_full = ours(x), hf(x)
        steps = [ours(x[:, :prompt], cache)]
        hf_steps = [hf(x[:, :prompt], cache_params=hf_cache)]
        for t in range(prompt, 19):
            steps.append(ours(x[:, t : t + 1], cache))
            hf_steps.append(hf(x[:, t : t + 1], cache_params=hf_cache))
    decoded, hf_decoded = torch.cat(steps, dim=1), torch.cat(hf_steps, dim=1)
    assert_near(decoded, full, HF)
    assert_near(decoded, hf_decoded, HF)
    assert_near(hf_decoded, hf_full, HF)
    assert cache.length == 19
    assert_near(cache.state, hf_cache.layers[0].recurrent_states[0], HF)
    K = shape[-1]
    assert_near(cache.conv_state, hf_cache.layers[0].conv_states[0][..., 1:], 0)
    assert cache.conv_state.shape == (2, ours.conv_dim, K - 1)


@needs_transformers
def test_a_prompt_in_two_pieces_continues_through_the_state():
    from transformers.cache_utils import DynamicCache

    hf, cfg = hf_layer(2, 4, 8, 6, 4, torch.float32)
    ours = GatedDeltaNet.from_hf(hf, chunk_size=8)
    x = inputs(1, 30, torch.float32)
    cache, hf_cache = ours.new_cache(1), DynamicCache(config=cfg)
    with torch.no_grad():
        pieces = torch.cat((ours(x[:, :13], cache), ours(x[:, 13:], cache)), dim=1)
        hf_pieces = torch.cat(
            (hf(x[:, :13], cache_params=hf_cache), hf(x[:, 13:], cache_params=hf_cache)), dim=1
        )
        assert_near(pieces, ours(x), HF)
    assert_near(pieces, hf_pieces, HF)


def test_the_layer_written_out_step_by_step():
    """Without transformers: the layer's six steps as its docstring lists them, in float64."""
    torch.manual_seed(0)
    layer = GatedDeltaNet(C, 2, 4, 8, 6, conv_kernel_size=3).double()
    with torch.no_grad():
        layer.norm.weight.copy_(torch.rand(6) + 0.5)
    x = inputs(2, 9, torch.float64)
    qkv = layer.in_proj_qkv(x)  # (B, N, conv_dim)
    conv = torch.zeros_like(qkv)
    w = layer.conv1d.weight[:, 0]  # (conv_dim, K)
    for t in range(9):  # output t mixes inputs t − 2, t − 1, t (zeros before the start)
        for j in range(3):
            if t - 2 + j >= 0:
                conv[:, t] += w[:, j] * qkv[:, t - 2 + j]
    q, k, v = F.silu(conv).split([16, 16, 24], dim=-1)
    q, k = q.reshape(2, 9, 2, 8), k.reshape(2, 9, 2, 8)  # (B, N, h_k, d_k)
    q, k = (a / (a.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt() for a in (q, k))  # unit vectors
    q, k = q.repeat_interleave(2, dim=2), k.repeat_interleave(2, dim=2)  # key head i: 2i, 2i + 1
    v = v.reshape(2, 9, 4, 6)
    beta = torch.sigmoid(layer.in_proj_b(x))  # (B, N, h_v)
    g = -torch.exp(layer.A_log) * F.softplus(layer.in_proj_a(x) + layer.dt_bias)
    o, _ = gated_delta_rule(*(t.transpose(1, 2) for t in (q, k, v, g, beta)), chunk_size=4)
    o = o.transpose(1, 2)  # (B, N, h_v, d_v)
    z = layer.in_proj_z(x).reshape(2, 9, 4, 6)
    o = layer.norm.weight * o / (o.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * F.silu(z)
    expected = layer.out_proj(o.reshape(2, 9, 24))
    with torch.no_grad():
        assert_near(layer(x), expected, 1e-12)


def test_the_cache_has_a_fixed_size():
    layer = GatedDeltaNet(C, 2, 4, 8, 6)
    cache = layer.new_cache(3)
    numbers = 3 * (layer.conv_dim * 3 + 4 * 8 * 6)  # conv_dim = 2·2·8 + 4·6 = 56
    assert layer.conv_dim == 56 and cache.nbytes == 4 * numbers
    with torch.no_grad():
        layer(inputs(3, 50, torch.float32), cache)
        layer(inputs(3, 1, torch.float32), cache)
    assert cache.length == 51 and cache.nbytes == 4 * numbers
    assert isinstance(cache, GatedDeltaNetCache)


def test_a_fresh_layers_decays_lie_in_mamba2s_range():
    torch.manual_seed(0)
    layer = GatedDeltaNet(C, 2, 64, 4, 4)
    dt = F.softplus(layer.dt_bias)  # (h_v,)
    A = layer.A_log.exp()  # (h_v,)
    assert ((dt >= 1e-3 * 0.999) & (dt <= 0.1 * 1.001)).all()
    assert ((A >= 1 - 1e-6) & (A <= 16 + 1e-5)).all()
    # with a = 0, the per-token decay exp(g) = exp(−A·dt) lies in [exp(−1.6), exp(−0.001)]
    decay = (-(A * dt)).exp()
    assert decay.min() > math.exp(-1.6 * 1.001) and decay.max() < math.exp(-0.001 * 0.999)


def test_the_pieces():
    x = torch.randn(5, 7, dtype=torch.float64)
    assert_near(l2_normalize(x).norm(dim=-1), torch.ones(5, dtype=torch.float64), 1e-5)
    norm = GatedRMSNorm(7).double()
    z = torch.randn(5, 7, dtype=torch.float64)
    rms = x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    assert_near(norm(x, z), x / rms * F.silu(z), 1e-14)


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_is_refused():
    layer = GatedDeltaNet(C, 2, 4, 8, 6)
    with pytest.raises(
        ValueError,
        match=r"x has shape \(2, 5, 23\); expected \(B, N, C\) with "
        r"C = 24",
    ):
        layer(torch.zeros(2, 5, 23))
    with pytest.raises(ValueError, match=r"x has shape \(5, 24\)"):
        layer(torch.zeros(5, 24))
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor; got list"):
        layer([[0.0] * 24])
    with pytest.raises(
        ValueError,
        match=r"cache.state has shape \(3, 4, 8, 6\); expected "
        r"\(B, h_v, d_k, d_v\) = \(2, 4, 8, 6\), with B = 2",
    ):
        layer(torch.zeros(2, 5, 24), layer.new_cache(3))
    with pytest.raises(
        ValueError,
        match=r"cache.state has shape \(2, 4, 8, 6\); expected "
        r"\(B, h_v, d_k, d_v\) = \(2, 4, 6, 6\)",
    ):
        GatedDeltaNet(C, 2, 4, 6, 6)(torch.zeros(2, 5, 24), layer.new_cache(2))
    with pytest.raises(TypeError, match=r"cache must be a GatedDeltaNetCache; got dict"):
        layer(torch.zeros(2, 5, 24), {})
    with pytest.raises(
        ValueError,
        match=r"num_value_heads = 6 is not a multiple of "
        r"num_key_heads = 4",
    ):
        GatedDeltaNet(C, 4, 6, 8, 8)
    with pytest.raises(ValueError, match=r"chunk_size must be at least 1; got 0"):
        GatedDeltaNet(C, 2, 4, 8, 6, chunk_size=0)
    with pytest.raises(TypeError, match=r"batch_size must be an int; got float"):
        layer.new_cache(2.0)


@needs_transformers
def test_from_hf_refuses_another_activation():
    hf, _ = hf_layer(1, 1, 4, 4, 4, torch.float32)
    hf.activation = "gelu"
    with pytest.raises(ValueError, match=r"activation is 'gelu'; expected 'silu'"):
        GatedDeltaNet.from_hf(hf)
