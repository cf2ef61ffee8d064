"""mha_lib.efficient.mla: equal to transformers' DeepseekV3Attention, absorbed decoding equal to
plain decoding, the cache's bytes equal to the formula, bad configurations refused.

transformers is used here only, as the reference. Its RMSNorm computes in float32 whatever the
input dtype, so even in float64 the two agree to float32's precision relative to the output
(about 1e-7 · max |output|), not to float64's; the comparisons say so.
"""

import importlib.util
import itertools

import pytest
import torch

from mha_lib.efficient.cache_cost import CacheConfig, cache_bytes
from mha_lib.efficient.mla import MLACache, MultiHeadLatentAttention, decode_step_cost

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


def hf_layer(q_lora_rank, interleave, seed=0):
    DeepseekV3Config, DeepseekV3Attention, _ = reference()
    cfg = DeepseekV3Config(
        hidden_size=C,
        num_attention_heads=H,
        num_key_value_heads=H,
        kv_lora_rank=R,
        q_lora_rank=q_lora_rank,
        qk_nope_head_dim=D_N,
        qk_rope_head_dim=D_R,
        v_head_dim=D_V,
        rope_interleave=interleave,
        attn_implementation="eager",
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
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-12)
    assert len(cache) == 9


def test_cache_nbytes_equals_the_formula():
    m = MultiHeadLatentAttention(C, H, R, D_N, D_R, D_V)
    cache = MLACache()
    assert len(cache) == 0 and cache.nbytes == 0
    with torch.no_grad():
        m(torch.randn(3, 7, C), cache=cache)
        m(torch.randn(3, 1, C), cache=cache)
    cfg = CacheConfig("ours", "test", 1, kind="mla", kv_lora_rank=R, qk_rope_head_dim=D_R,
                      bytes_per_number=4)  # fmt: skip
    assert cache.nbytes == cache_bytes(cfg, 8, batch=3) == 3 * 8 * (R + D_R) * 4


def test_absorbed_step_reads_fewer_bytes_and_does_more_arithmetic_per_byte():
    kw = dict(num_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
              v_head_dim=128)  # fmt: skip
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
    args = dict(d_model=C, num_heads=H, kv_lora_rank=R, qk_nope_head_dim=D_N,
                qk_rope_head_dim=D_R, v_head_dim=D_V)  # fmt: skip
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
