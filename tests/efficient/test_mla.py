"""mha_lib.efficient.mla: equal to transformers' DeepseekV3Attention, absorbed decoding equal to
plain decoding, the cache's bytes equal to the formula, bad configurations refused.

transformers is used here only, as the reference. Its RMSNorm computes in float32 whatever the
input dtype, so even in float64 the two agree to float32's precision relative to the output
(about 1e-7 · max |output|), not to float64's; the comparisons say so.
"""

import importlib.util
import itertools
import math

import pytest
import torch

from mha_lib.efficient.cache_cost import CacheConfig, cache_bytes
from mha_lib.efficient.mla import (
    MLACache,
    MultiHeadLatentAttention,
    decode_step_cost,
    yarn,
    yarn_mscale,
)
from mha_lib.testing import assert_close

# transformers is imported only when a test runs: it imports triton, which notebook 09's module
# must import first (mha_lib.efficient.triton_flash), and tests are all collected before any runs
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)


def reference():
    """transformers' DeepseekV3Config, DeepseekV3Attention and DeepseekV3RotaryEmbedding."""
    from transformers.models.deepseek_v3 import configuration_deepseek_v3 as conf
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as model

    return conf.DeepseekV3Config, model.DeepseekV3Attention, model.DeepseekV3RotaryEmbedding


C, H, R, D_N, D_R, D_V = 24, 3, 10, 6, 4, 5


def hf_layer(q_lora_rank, interleave, seed=0, d_R=D_R, **extra):
    DeepseekV3Config, DeepseekV3Attention, _ = reference()
    cfg = DeepseekV3Config(
        hidden_size=C,
        num_attention_heads=H,
        num_key_value_heads=H,
        kv_lora_rank=R,
        q_lora_rank=q_lora_rank,
        qk_nope_head_dim=D_N,
        qk_rope_head_dim=d_R,
        v_head_dim=D_V,
        rope_interleave=interleave,
        attn_implementation="eager",
        **extra,
    )
    layer = DeepseekV3Attention(cfg, 0).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():  # every weight random, the RMSNorms' too
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return cfg, layer


def close(a, b, rel=1e-6):
    scale = b.abs().max().item()
    assert (a - b).abs().max().item() <= rel * scale, ((a - b).abs().max().item(), scale)


@needs_transformers
@pytest.mark.parametrize(
    "q_lora_rank, interleave, masked, gaps",
    list(itertools.product([None, 7], [True, False], [True, False], [True, False])),
)
def test_from_hf_equals_deepseek_v3_attention(q_lora_rank, interleave, masked, gaps):
    cfg, hf = hf_layer(q_lora_rank, interleave)
    DeepseekV3RotaryEmbedding = reference()[2]
    ours = MultiHeadLatentAttention.from_hf(hf)
    g = torch.Generator().manual_seed(1)
    B, N = 2, 6
    x = torch.randn(B, N, C, generator=g, dtype=torch.float64)
    if gaps:
        pos = torch.tensor([[0, 1, 4, 5, 9, 30], [2, 3, 4, 7, 8, 11]])
    else:
        pos = torch.arange(N).expand(B, N)
    cos, sin = DeepseekV3RotaryEmbedding(cfg)(x, pos)
    allowed = torch.ones(N, N, dtype=torch.bool).tril()  # (N, N) causal
    if masked:  # also a padding mask on the second sequence's first two tokens
        pad = torch.ones(B, 1, 1, N, dtype=torch.bool)
        pad[1, :, :, :2] = False
        allowed = allowed & pad
        allowed[1, :, :2, 0] = True  # keep one key for every query (no all-masked row)
    allowed = allowed.expand(B, 1, N, N)
    additive = torch.zeros(B, 1, N, N, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        ref = hf(x, (cos, sin), additive)[0]
        for absorb in (False, True):
            out = ours(x, positions=pos, is_causal=False, mask=allowed, absorb=absorb)
            close(out, ref)


@needs_transformers
def test_unmasked_equals_hf_without_mask():
    cfg, hf = hf_layer(None, True)
    DeepseekV3RotaryEmbedding = reference()[2]
    ours = MultiHeadLatentAttention.from_hf(hf)
    x = torch.randn(1, 5, C, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    pos = torch.arange(5)[None]
    with torch.no_grad():
        close(ours(x, is_causal=False), hf(x, DeepseekV3RotaryEmbedding(cfg)(x, pos), None)[0])


# DeepSeek-V3's published rope_scaling, with a shorter original context so that positions
# within a few hundred tokens already go beyond it
V3_YARN = {
    "rope_type": "yarn",
    "factor": 40.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


@needs_transformers
@pytest.mark.parametrize(
    "scaling",
    [
        V3_YARN,
        {**V3_YARN, "mscale": 0.707, "mscale_all_dim": 0.707, "factor": 4.0},
        {**V3_YARN, "mscale": 1.0, "mscale_all_dim": 0.5},  # a rotated part scaled too
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
    ],
)
def test_yarn_equals_deepseek_v3_attention_with_its_rope_scaling(scaling):
    """With YaRN (d_R = 8, so that the ramp leaves one pair, blends one and interpolates the
    others), the layer loaded with from_hf equals transformers' at positions up to 900: the
    frequencies, the factor on the rotated parts and the softmax scale times mscale²."""
    cfg, hf = hf_layer(
        None,
        True,
        d_R=8,
        rope_parameters={**scaling, "rope_theta": 10000.0},
        max_position_embeddings=2560,
    )
    DeepseekV3RotaryEmbedding = reference()[2]
    ours = MultiHeadLatentAttention.from_hf(hf)
    rotary = DeepseekV3RotaryEmbedding(cfg)
    assert ours.scale == pytest.approx(hf.scaling, rel=1e-12)
    assert_close(ours.rope_frequencies, rotary.inv_freq, rtol=0, atol=0)
    assert ours.rope_factor == pytest.approx(rotary.attention_scaling, rel=1e-12)
    plain = 1.0 / 10000.0 ** (torch.arange(0, 8, 2) / 8)
    keep = ours.rope_frequencies / plain  # 1: kept, 1/factor: interpolated
    assert (
        keep[0] == 1
        and keep[-1] == pytest.approx(1 / scaling["factor"])
        and len(set(keep.tolist())) >= 3
    )
    x = torch.randn(2, 6, C, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    pos = torch.tensor([[0, 5, 70, 300, 301, 900], [1, 2, 3, 4, 64, 65]])
    cos, sin = rotary(x, pos)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril().expand(2, 1, 6, 6)
    additive = torch.zeros(2, 1, 6, 6, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        ref = hf(x, (cos, sin), additive)[0]
        for absorb in (False, True):
            close(ours(x, positions=pos, is_causal=False, mask=allowed, absorb=absorb), ref)


def test_deepseek_v3s_yarn_multiplies_the_softmax_scale_by_about_1_87():
    scaling = {
        "rope_type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    }
    freqs, attention_factor, softmax_factor = yarn(64, 10000.0, scaling)
    assert softmax_factor == pytest.approx((0.1 * math.log(40) + 1) ** 2) == yarn_mscale(40) ** 2
    assert 1.87 < softmax_factor < 1.88 and attention_factor == 1.0 and freqs.shape == (32,)
    layer = MultiHeadLatentAttention(64, 2, 16, 8, 64, 8, rope_scaling=scaling)
    assert layer.scale == pytest.approx(softmax_factor / math.sqrt(8 + 64))
    with pytest.raises(ValueError, match="not supported"):
        yarn(64, 10000.0, {**scaling, "rope_type": "longrope"})
    with pytest.raises(ValueError, match="factor"):
        yarn(64, 10000.0, {**scaling, "factor": 0})
    with pytest.raises(ValueError, match="does not use"):
        yarn(64, 10000.0, {**scaling, "long_factor": [1.0]})


@pytest.mark.parametrize("q_lora_rank", [None, 8])
def test_prefill_then_absorbed_decode_equals_the_full_forward(q_lora_rank):
    torch.manual_seed(0)
    m = MultiHeadLatentAttention(C, H, R, D_N, D_R, D_V, q_lora_rank=q_lora_rank).double()
    x = torch.randn(2, 9, C, dtype=torch.float64)
    with torch.no_grad():
        full = m(x)
        cache = MLACache()
        parts = [m(x[:, :5], cache=cache)]
        parts += [m(x[:, t : t + 1], cache=cache, absorb=True) for t in range(5, 7)]
        parts.append(m(x[:, 7:], cache=cache, absorb=True))  # a chunk of 2 after the cache
    assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-12)
    assert len(cache) == 9


def test_cache_nbytes_equals_the_formula():
    m = MultiHeadLatentAttention(C, H, R, D_N, D_R, D_V)
    cache = MLACache()
    assert len(cache) == 0 and cache.nbytes == 0
    with torch.no_grad():
        m(torch.randn(3, 7, C), cache=cache)
        m(torch.randn(3, 1, C), cache=cache)
    cfg = CacheConfig(
        "ours", "test", 1, kind="mla", kv_lora_rank=R, qk_rope_head_dim=D_R, bytes_per_number=4
    )
    assert cache.nbytes == cache_bytes(cfg, 8, batch=3) == 3 * 8 * (R + D_R) * 4


def test_absorbed_step_reads_fewer_bytes_and_does_more_arithmetic_per_byte():
    kw = dict(
        num_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
    )
    plain, absorbed = (decode_step_cost(4096, absorb=a, **kw) for a in (False, True))
    assert absorbed["bytes"] < plain["bytes"] / 5
    assert absorbed["flops_per_byte"] > plain["flops_per_byte"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(qk_rope_head_dim=3), "even"),
        (dict(num_heads=0), "num_heads"),
        (dict(kv_lora_rank=0), "kv_lora_rank"),
        (dict(qk_nope_head_dim=0, qk_rope_head_dim=0), "at least 1"),
        (dict(q_lora_rank=0), "q_lora_rank"),
        (dict(rope_base=1.0), "rope_base"),
    ],
)
def test_bad_configurations_are_refused(kwargs, match):
    args = dict(
        d_model=C,
        num_heads=H,
        kv_lora_rank=R,
        qk_nope_head_dim=D_N,
        qk_rope_head_dim=D_R,
        v_head_dim=D_V,
    )
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        MultiHeadLatentAttention(**args)


def test_bad_inputs_are_refused():
    m = MultiHeadLatentAttention(C, H, R, D_N, D_R, D_V)
    with pytest.raises(ValueError, match="expected \\(B, n, C\\)"):
        m(torch.randn(2, 3, C + 1))
    with pytest.raises(ValueError, match="positions has shape"):
        m(torch.randn(2, 3, C), positions=torch.arange(4))
    with pytest.raises(TypeError, match="MLACache"):
        m(torch.randn(2, 3, C), cache=object())
    with pytest.raises(TypeError, match="DeepseekV3Attention"):
        MultiHeadLatentAttention.from_hf(torch.nn.Linear(2, 2))
