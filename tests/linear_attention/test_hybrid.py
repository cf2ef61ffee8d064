"""mha_lib.linear_attention.hybrid: Qwen3.5's text decoder from the series' blocks, equal to
transformers' Qwen3_5ForCausalLM built from tiny random Qwen3_5TextConfigs (any layout of layer
types, partial RoPE, tied or untied embeddings, one or more key heads per value-head group), in
one pass, prefill then decode, and greedy generation through the states; bad input refused.

transformers computes its RMSNorms, RoPE's angles and the gated delta rule in float32 whatever the
input's dtype, so the logits agree to float32's precision relative to their size (HF), in
float64 too; our own paths against each other (cache against none) agree to 1e-10 in float64.
"""

import importlib.util

import pytest
import torch

from mha_lib.linear_attention import GatedDeltaNet, GatedDeltaNetCache, HybridConfig, HybridLM
from mha_lib.nn import generate
from mha_lib.nn.decoder import DecoderAttention, DecoderConfig, DecoderLM
from mha_lib.nn.kv_cache import KVCache
from tests.linear_attention.linear_inputs import assert_near

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)
HF = 2e-5  # relative to max |logit|: transformers computes in float32 (module docstring)
V = 61
LINEAR, FULL = "linear_attention", "full_attention"


def hf_model(
    layer_types, *, tie=False, rotary=0.25, h_k=2, h_v=4, dtype=torch.float32, seed=0, scaling=None
):
    """transformers' Qwen3_5ForCausalLM from a tiny config, every weight random (norms too);
    scaling: a RoPE scaling's keys (rope_type, factor, ...) beside the default RoPE's."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=len(layer_types),
        layer_types=list(layer_types),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_key_heads=h_k,
        linear_num_value_heads=h_v,
        linear_key_head_dim=8,
        linear_value_head_dim=6,
        linear_conv_kernel_dim=4,
        max_position_embeddings=96,
        tie_word_embeddings=tie,
        rope_parameters={
            "rope_theta": 500.0,
            "rope_type": "default",
            "partial_rotary_factor": rotary,
            **(scaling or {}),
        },
        eos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(cfg).to(dtype).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 1.0 if name.endswith(("A_log", "dt_bias")) else 0.3
            p.copy_(scale * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return model


def ids_of(B, N, seed=1):
    return torch.randint(0, V, (B, N), generator=torch.Generator().manual_seed(seed))


LAYOUTS = [
    (LINEAR, LINEAR, LINEAR, FULL),  # Qwen3.5's 3:1
    (FULL, LINEAR, FULL),
    (LINEAR,),
    (FULL, FULL),
    (LINEAR, LINEAR, FULL, LINEAR),
]


@pytest.mark.parametrize("layer_types", LAYOUTS)
@pytest.mark.parametrize(
    "tie, rotary, h_k, dtype",
    [
        (False, 0.25, 2, torch.float32),
        (True, 0.5, 4, torch.float32),
        (False, 1.0, 1, torch.float64),
    ],
)
def test_logits_equal_transformers(layer_types, tie, rotary, h_k, dtype):
    hf = hf_model(layer_types, tie=tie, rotary=rotary, h_k=h_k, dtype=dtype)
    ours = HybridLM.from_hf(hf, chunk_size=4)
    assert next(ours.parameters()).dtype == dtype
    assert [type(layer.self_attn) for layer in ours.layers] == [
        GatedDeltaNet if t == LINEAR else DecoderAttention for t in layer_types
    ]
    ids = ids_of(2, 11)
    with torch.no_grad():
        assert_near(ours(ids), hf(ids, use_cache=False).logits, HF)


@pytest.mark.parametrize(
    "rotary, scaling",
    [
        (0.5, {"rope_type": "linear", "factor": 4.0}),
        (1.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}),
    ],
)
def test_a_rope_scaling_is_read_equal_to_transformers(rotary, scaling):
    """The architecture's reader (mha_lib.models) reads transformers' RoPE scalings for the
    hybrid too: a linear one on partial RoPE, YaRN on a full one, each equal to transformers."""
    hf = hf_model(LAYOUTS[0], rotary=rotary, dtype=torch.float64, scaling=scaling)
    ours = HybridLM.from_hf(hf, chunk_size=4)
    assert ours.config.rope_freq_factors is not None
    ids = ids_of(2, 11)
    with torch.no_grad():
        assert_near(ours(ids), hf(ids, use_cache=False).logits, HF)


def test_yarn_on_partial_rope_is_refused_by_name():
    """YaRN's attention factor scales only the turned part of a score there: not read."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    with pytest.raises(ValueError, match=r"rope_dim = 4 with YaRN's attention factor"):
        HybridConfig.from_hf(hf_model(LAYOUTS[0], rotary=0.5, scaling=yarn).config)


@pytest.mark.parametrize("layer_types", LAYOUTS[:2])
def test_prefill_then_decode_equals_the_full_forward(layer_types):
    hf = hf_model(layer_types, dtype=torch.float64)
    ours = HybridLM.from_hf(hf, chunk_size=4)
    ids = ids_of(2, 17, seed=3)
    cache = ours.new_cache(2, 17)
    assert [type(c) for c in cache.layers] == [
        GatedDeltaNetCache if t == LINEAR else KVCache for t in layer_types
    ]
    with torch.no_grad():
        full = ours(ids)
        steps = [ours(ids[:, :6], cache)] + [ours(ids[:, t : t + 1], cache) for t in range(6, 17)]
    assert cache.length == 17
    assert_near(torch.cat(steps, dim=1), full, 1e-10)


@pytest.mark.parametrize("layer_types", [LAYOUTS[0], LAYOUTS[4]])
def test_greedy_tokens_through_the_states_equal_transformers_generate(layer_types):
    hf = hf_model(layer_types, seed=5)
    ours = HybridLM.from_hf(hf)
    ids = ids_of(2, 9, seed=6)
    with torch.no_grad():
        theirs = hf.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False)
    mine = generate(ours, ids, 12, stop_ids=())
    assert mine.tolist() == theirs.tolist()
    assert generate(ours, ids, 12, stop_ids=(), use_cache=False).tolist() == theirs.tolist()


def test_a_linear_layers_cache_stays_the_same_size_and_a_full_layers_grows():
    hf = hf_model(LAYOUTS[0])
    ours = HybridLM.from_hf(hf)
    cache = ours.new_cache(1, 90)
    before = [c.nbytes for c in cache.layers[:3]]
    with torch.no_grad():
        ours(ids_of(1, 80), cache)
    assert [c.nbytes for c in cache.layers[:3]] == before  # 80 tokens later: the same bytes
    kv = cache.layers[3]
    assert kv.length == 80 and kv.k.shape == (1, 2, 90, 8)
    h_v, d_k, d_v, conv_dim = 4, 8, 6, 2 * 2 * 8 + 4 * 6
    assert before[0] == 4 * (h_v * d_k * d_v + conv_dim * 3)


def test_a_head_mask_scales_the_value_heads_of_a_linear_layer():
    hf = hf_model((LINEAR,), dtype=torch.float64)
    ours = HybridLM.from_hf(hf)
    x = torch.randn(1, 5, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    layer = ours.layers[0].self_attn
    with torch.no_grad():
        assert_near(layer(x, head_mask=torch.zeros(4)), torch.zeros(1, 5, 32), 0)
        assert_near(layer(x, head_mask=torch.ones(4)), layer(x), 0)


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_is_refused():
    hf = hf_model(LAYOUTS[0])
    ours = HybridLM.from_hf(hf)
    with pytest.raises(TypeError, match=r"model is a DecoderLM; expected transformers' Qwen3_5"):
        HybridLM.from_hf(DecoderLM(DecoderConfig(V, 8, 1, 2, 1, 4, 8, 100.0, 1e-6, 16)))
    with pytest.raises(ValueError, match=r"config is a 'llama' configuration; expected"):
        from transformers import LlamaConfig

        HybridConfig.from_hf(LlamaConfig())
    with pytest.raises(TypeError, match=r"config must be a HybridConfig; got DecoderConfig"):
        HybridLM(DecoderConfig(V, 8, 1, 2, 1, 4, 8, 100.0, 1e-6, 16))
    with pytest.raises(ValueError, match=r"layer_types\[2\] = 'sliding' is not a layer"):
        HybridConfig(V, 8, 3, 2, 1, 4, 8, 100.0, 1e-6, 16, layer_types=(LINEAR, FULL, "sliding"))
    with pytest.raises(ValueError, match=r"a hybrid model has no sink cache"):
        ours.new_sink_cache(1, window=4)
    cache = ours.new_cache(1, 20)
    with torch.no_grad():
        ours(ids_of(1, 5), cache)
    with pytest.raises(ValueError, match=r"cannot go back to 2: its tokens are summed"):
        cache.truncate(2)
    with pytest.raises(ValueError, match=r"input_ids has batch 2; the cache was made for 1"):
        ours(ids_of(2, 1), cache)
    assert cache.length == 5  # refused before anything was stored
    with pytest.raises(ValueError, match=r"expected \(h_v,\) = \(4,\), one entry per value head"):
        ours.layers[0].self_attn(torch.zeros(1, 2, 32), head_mask=torch.ones(3))


def test_a_model_without_a_dense_mlp_is_refused():
    hf = hf_model((FULL,))
    del hf.model.layers[0].mlp  # as Qwen3.5's mixture of experts has no mlp.gate_proj
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight is missing: expected a dense"):
        HybridLM.from_hf(hf)
