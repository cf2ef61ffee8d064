"""mha_lib.sparse_attention.sparse_mla: DeepSeek-V3.2's decoder (dense layers) from the series'
blocks, equal to transformers' DeepseekV32ForCausalLM on tiny random configurations of odd
sizes (N below and above index_topk, tied or untied, the default RoPE and YaRN, float32 and
float64): its logits, each layer's top-k choices, the logits of a prefill and of each decoding
step through the caches, and greedy tokens through the caches with the series' `generate`; with
index_topk >= N it is dense MLA, transformers' DeepseekV3ForCausalLM with the same weights;
its cache's bytes are the bill's; a mixture of experts and bad input are refused by name.

transformers computes its RMSNorms in float32 whatever the dtype (ours in the input's), so the
logits agree to float32's precision relative to their size (HF), in float64 too; our own paths
against each other (cache against none) agree to 1e-10 in float64.
"""

import pytest
import torch

from mha_lib.efficient.cache_cost import CacheConfig, cache_bytes
from mha_lib.efficient.mla import MLACache
from mha_lib.nn import generate
from mha_lib.nn.decoder import DecoderConfig
from mha_lib.sparse_attention import (
    DeepseekV32LM,
    SparseMLA,
    SparseMLACache,
    SparseMLAConfig,
)
from mha_lib.testing import assert_close
from tests.sparse_attention.sparse_inputs import (
    SIZES,
    YARN,
    V,
    assert_near,
    hf_config,
    hf_model,
    ids_of,
    needs_transformers,
    same_choices,
)

pytestmark = needs_transformers
HF = 2e-5  # relative to max |logit|: transformers' RMSNorms compute in float32 (docstring)


@pytest.mark.parametrize(
    "N, topk, tie, rope, dtype",
    [
        (11, 5, False, None, torch.float32),  # N above k
        (11, 5, True, YARN, torch.float64),
        (4, 6, False, YARN, torch.float32),  # N below k
        (13, 3, False, None, torch.float64),
    ],
)
def test_logits_and_choices_equal_transformers(N, topk, tie, rope, dtype):
    hf = hf_model(layers=2, topk=topk, tie=tie, rope=rope, dtype=dtype)
    ours = DeepseekV32LM.from_hf(hf)
    assert next(ours.parameters()).dtype == dtype
    assert all(isinstance(layer.self_attn, SparseMLA) for layer in ours.layers)
    ids = ids_of(2, N)
    chosen = []
    hooks = [
        layer.self_attn.indexer.register_forward_hook(lambda m, a, out: chosen.append(out))
        for layer in hf.model.layers
    ]
    with torch.no_grad():
        theirs = hf(ids, use_cache=False).logits
    for hook in hooks:
        hook.remove()
    with torch.no_grad():
        assert_near(ours(ids), theirs, HF)
    for l in range(2):
        indices = ours.topk_indices(ids, l)  # (B, N, k)
        assert indices.shape == (2, N, min(topk, N)) and indices.dtype == torch.long
        assert same_choices(indices, chosen[l].long()) == 2 * N


@pytest.mark.parametrize("rope", [None, YARN])
def test_prefill_and_each_decoding_step_equal_transformers_through_the_caches(rope):
    """A prompt of 4 tokens, then 9 one at a time past index_topk = 5: each step's logits equal
    transformers' with its DynamicCache (whose indexer keeps its keys too), and ours with a cache
    equal ours without one."""
    from transformers import DynamicCache

    hf = hf_model(layers=2, topk=5, rope=rope, dtype=torch.float64, seed=2)
    ours = DeepseekV32LM.from_hf(hf)
    ids = ids_of(2, 13, seed=4)
    cache, past = ours.new_cache(2, 13), DynamicCache(config=hf.config)
    assert all(isinstance(c, SparseMLACache) for c in cache.layers)
    mine, theirs = [], []
    with torch.no_grad():
        for a, b in [(0, 4)] + [(t, t + 1) for t in range(4, 13)]:
            mine.append(ours(ids[:, a:b], cache))
            theirs.append(hf(ids[:, a:b], past_key_values=past, use_cache=True).logits)
        full = ours(ids)
    assert cache.length == 13 and [len(c.index) for c in cache.layers] == [13, 13]
    assert_near(torch.cat(mine, 1), torch.cat(theirs, 1), HF)
    assert_near(torch.cat(mine, 1), full, 1e-10)


@pytest.mark.parametrize("tie, seed", [(False, 5), (True, 6)])
def test_greedy_tokens_through_the_caches_equal_transformers_generate(tie, seed):
    """3 prompt tokens and 9 generated, from below index_topk = 5 to past it: the same tokens as
    transformers' greedy generate, with our cache and without it."""
    hf = hf_model(layers=2, topk=5, tie=tie, seed=seed)
    ours = DeepseekV32LM.from_hf(hf)
    ids = ids_of(2, 3, seed=seed + 1)
    with torch.no_grad():
        theirs = hf.generate(ids, max_new_tokens=9, min_new_tokens=9, do_sample=False)
    assert generate(ours, ids, 9, stop_ids=()).tolist() == theirs.tolist()
    assert generate(ours, ids, 9, stop_ids=(), use_cache=False).tolist() == theirs.tolist()


def test_absorbed_decoding_gives_the_same_outputs():
    """MLA's weight absorption (scores against the latents) under the indexer's mask: the same
    layer outputs as the plain path, prefill then one token at a time, to 1e-10 in float64."""
    ours = DeepseekV32LM.from_hf(hf_model(layers=1, topk=4, dtype=torch.float64, seed=9))
    attn = ours.layers[0].self_attn
    x = torch.randn(2, 10, 21, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    plain, absorbed = attn.new_cache(2, 10), attn.new_cache(2, 10)
    with torch.no_grad():
        a = [attn(x[:, :6], cache=plain)] + [
            attn(x[:, t : t + 1], cache=plain) for t in range(6, 10)
        ]
        b = [attn(x[:, :6], cache=absorbed, absorb=True)] + [
            attn(x[:, t : t + 1], cache=absorbed, absorb=True) for t in range(6, 10)
        ]
        full = attn(x)
    assert_near(torch.cat(b, 1), torch.cat(a, 1), 1e-10)
    assert_near(torch.cat(a, 1), full, 1e-10)


def test_topk_at_least_N_is_dense_mla():
    """With index_topk >= N every query keeps every earlier key: transformers' V3.2 equals its
    DeepseekV3ForCausalLM with the same weights (the indexer's left out) exactly, and ours equals
    both; with index_topk < N the indexer changes the logits."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    N = 9
    hf = hf_model(layers=2, topk=N, dtype=torch.float64, seed=7)
    fields = {k: v for k, v in SIZES.items()}
    dense_config = DeepseekV3Config(
        **fields,
        num_hidden_layers=2,
        first_k_dense_replace=2,
        rope_parameters={"rope_theta": 500.0, "rope_type": "default"},
        rope_interleave=True,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        attn_implementation="eager",
    )
    dense = DeepseekV3ForCausalLM(dense_config).to(torch.float64).eval()
    missing, unexpected = dense.load_state_dict(hf.state_dict(), strict=False)
    assert not missing and unexpected and all(".indexer." in k for k in unexpected)
    ids = ids_of(2, N, seed=8)
    ours = DeepseekV32LM.from_hf(hf)
    with torch.no_grad():
        sparse_logits, dense_logits = hf(ids).logits, dense(ids).logits
        assert_close(sparse_logits, dense_logits)  # exactly
        assert_near(ours(ids), dense_logits, HF)
        assert (ours.topk_indices(ids, 0) >= 0).sum().item() == 2 * N * (N + 1) // 2
        fewer = DeepseekV32LM.from_hf(hf_model(layers=2, topk=3, dtype=torch.float64, seed=7))
        assert not torch.allclose(fewer(ids), ours(ids))  # the same weights, 3 keys per query


def test_the_cache_bill_of_a_sparse_mla_model():
    """After T tokens each layer holds B·T·(r + d_R + D) numbers: MLA's latents and the
    indexer's keys, the bill of `cache_cost` with index_head_dim."""
    ours = DeepseekV32LM.from_hf(hf_model(layers=2, topk=5))
    cache = ours.new_cache(3, 20)
    with torch.no_grad():
        ours(ids_of(3, 11), cache)
    r, d_R, D = SIZES["kv_lora_rank"], SIZES["qk_rope_head_dim"], SIZES["index_head_dim"]
    bill = CacheConfig(
        "tiny V3.2",
        "test",
        2,
        kind="mla",
        kv_lora_rank=r,
        qk_rope_head_dim=d_R,
        index_head_dim=D,
        bytes_per_number=4,
    )
    assert cache.nbytes == cache_bytes(bill, 11, batch=3) == 2 * 3 * 11 * (r + d_R + D) * 4
    assert [c.index.nbytes for c in cache.layers] == [3 * 11 * D * 4] * 2
    cache.truncate(6)  # then decoding goes on from token 6 as if 7 .. 10 had never come
    with torch.no_grad():
        again = ours(ids_of(3, 11)[:, 6:], cache)
        assert_near(again, ours(ids_of(3, 11))[:, 6:], 1e-5)


def test_the_config_is_read_from_transformers_with_every_option():
    config = SparseMLAConfig.from_hf(hf_config(layers=3, topk=7, rope=YARN))
    assert (config.num_layers, config.index_topk, config.index_head_dim) == (3, 7, 9)
    assert (config.num_kv_heads, config.head_dim) == (3, 5 + 6)
    assert config.rope_freq_factors is None and config.query_scale is None  # MLA turns its own
    assert config.rope_scaling == {k: v for k, v in YARN.items() if k != "rope_theta"}
    assert SparseMLAConfig.from_hf(hf_config()).rope_scaling is None
    assert config.layer_types == ("indexed_attention",) * 3  # transformers' name, every layer


# --- refused by name ----------------------------------------------------------------------------


def test_a_mixture_of_experts_is_refused_by_name():
    moe = hf_config(layers=3, first_k_dense_replace=1, n_routed_experts=4)
    with pytest.raises(
        ValueError,
        match=r"mlp_layer_types = \['dense', 'sparse', 'sparse'\]: layers \[1, 2\] are mixtures of "
        r"experts \(first_k_dense_replace = 1, n_routed_experts = 4\)",
    ):
        SparseMLAConfig.from_hf(moe)
    hf = hf_model(layers=1)
    del hf.model.layers[0].mlp  # as a MoE layer has no mlp.gate_proj
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight is missing: expected a dense MLP"):
        DeepseekV32LM.from_hf(hf)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("attention_bias", True, r"attention_bias = True; expected False"),
        ("mlp_bias", True, r"mlp_bias = True; expected False"),
        ("hidden_act", "gelu", r"hidden_act = 'gelu'; expected 'silu'"),
        ("attention_dropout", 0.1, r"attention_dropout = 0.1; expected 0.0"),
        ("num_key_value_heads", 1, r"num_key_value_heads = 1; expected num_attention_heads = 3"),
        (
            "rope_parameters",
            {"rope_theta": 500.0, "rope_type": "linear", "factor": 2.0},
            r"rope_type = 'linear'; expected 'default' or 'yarn'",
        ),
    ],
)
def test_what_the_series_does_not_build_is_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        SparseMLAConfig.from_hf(hf_config(**{field: value}))


def test_a_full_rank_query_is_refused_by_name():
    """transformers' V3.2 always has the low-rank query path (its config refuses None); a
    config that says none is refused by the architecture's file, naming the field."""
    from types import SimpleNamespace

    from mha_lib.models.deepseek_v32 import ARCHITECTURE

    config = hf_config()
    fields = {name: getattr(config, name) for name in config.to_dict()}
    with pytest.raises(ValueError, match=r"q_lora_rank = None; the indexer reads the query's"):
        ARCHITECTURE.hf_options(SimpleNamespace(**{**fields, "q_lora_rank": None}))


def test_bad_input_is_refused():
    hf = hf_model(layers=2, topk=5)
    ours = DeepseekV32LM.from_hf(hf)
    plain = DecoderConfig(V, 8, 1, 2, 2, 4, 8, 100.0, 1e-6, 16)
    with pytest.raises(TypeError, match=r"model is a DeepseekV32LM; expected transformers' Deeps"):
        DeepseekV32LM.from_hf(ours)
    with pytest.raises(ValueError, match=r"config is a 'llama' configuration; expected"):
        from transformers import LlamaConfig

        SparseMLAConfig.from_hf(LlamaConfig())
    with pytest.raises(TypeError, match=r"config must be a SparseMLAConfig; got DecoderConfig"):
        DeepseekV32LM(plain)
    with pytest.raises(ValueError, match=r"index_head_dim = 4 < qk_rope_head_dim = 6"):
        SparseMLAConfig(V, 8, 1, 2, 2, 4, 8, 100.0, 1e-6, 16, qk_rope_head_dim=6, index_head_dim=4)
    with pytest.raises(
        ValueError, match=r"layer_types\[1\] = 'full_attention'; a SparseMLAConfig's"
    ):
        SparseMLAConfig(
            V,
            8,
            2,
            2,
            2,
            4,
            8,
            100.0,
            1e-6,
            16,
            layer_types=("indexed_attention", "full_attention"),
        )
    with pytest.raises(ValueError, match=r"'indexed_attention' one mha_lib.sparse_attention"):
        from mha_lib.nn.decoder import DecoderLM

        DecoderLM(
            DecoderConfig(V, 8, 1, 2, 2, 4, 8, 100.0, 1e-6, 16, layer_types=("indexed_attention",))
        )
    with pytest.raises(ValueError, match=r"q_lora_rank = None: the indexer reads MLA's query"):
        SparseMLA(8, 2, 4, 2, 2, 2, None, 2, 4, 3)
    with pytest.raises(ValueError, match=r"a sparse-MLA model has no sink cache"):
        ours.new_sink_cache(1, window=4)
    with pytest.raises(ValueError, match=r"need_weights: a sparse-MLA layer does not record"):
        ours(ids_of(1, 3), need_weights=True)
    with pytest.raises(ValueError, match=r"head_mask: a sparse-MLA layer does not scale its heads"):
        ours(ids_of(1, 3), head_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"layer = 2; expected 0 <= layer < num_layers = 2"):
        ours.topk_indices(ids_of(1, 3), 2)
    attn = ours.layers[0].self_attn
    with pytest.raises(
        ValueError, match=r"x has shape \(1, 3, 20\); expected \(B, n, C\) with C = 21"
    ):
        attn(torch.zeros(1, 3, 20))
    with pytest.raises(TypeError, match=r"cache must be a SparseMLACache; got MLACache"):
        attn(torch.zeros(1, 3, 21), cache=MLACache())
    cache = ours.new_cache(1, 6)
    with torch.no_grad():
        ours(ids_of(1, 5), cache)
    with pytest.raises(ValueError, match=r"input_ids has batch 2; the cache was made for 1"):
        ours(ids_of(2, 1), cache)
    with pytest.raises(
        ValueError, match=r"5 cached \+ 2 new tokens = 7 do not fit the cache's max_len = 6"
    ):
        ours(ids_of(1, 2), cache)
    assert cache.length == 5 and [len(c.index) for c in cache.layers] == [5, 5]  # nothing stored
    with pytest.raises(ValueError, match=r"length = 6; the cache holds 5 tokens"):
        cache.layers[0].truncate(6)
