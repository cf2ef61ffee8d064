"""mha_lib.efficient.cache_cost (notebook 11): bytes per token of a cache, checked against what
the caches hold, and the published configurations with their sources."""

import pytest

from mha_lib.efficient.cache_cost import (
    MODELS,
    CacheConfig,
    beyond_native,
    cache_bytes,
    cache_config,
    cache_numbers_per_token,
)
from mha_lib.nn.kv_cache import KVCache, SinkKVCache


def test_kv_cache_nbytes_equals_the_formula():
    for h_kv in (8, 2, 1):
        cfg = CacheConfig(
            "t", "test", 1, num_heads=8, num_kv_heads=h_kv, head_dim=16, bytes_per_number=4
        )
        assert KVCache(3, h_kv, 50, 16).nbytes == cache_bytes(cfg, 50, batch=3)
        assert cfg.attention == {8: "MHA", 2: "GQA", 1: "MQA"}[h_kv]


def test_published_configurations():
    assert cache_numbers_per_token(MODELS["Llama-2-7B"]) == 8192  # 2 x 32 x 128
    assert cache_numbers_per_token(MODELS["DeepSeek-V3"]) == 576  # 512 + 64
    assert cache_bytes(MODELS["Llama-2-7B"], 4096) == 2 * 2**30  # 2 GiB at 4k, bfloat16
    assert cache_bytes(MODELS["Mistral-7B"], 32_768) == cache_bytes(MODELS["Mistral-7B"], 4096)
    assert {m.attention for m in MODELS.values()} == {"MHA", "MQA", "GQA", "MLA"}
    with pytest.raises(ValueError, match="kind"):
        cache_numbers_per_token(CacheConfig("t", "test", 1, kind="other"))


# the training contexts the papers and model cards state (checked by hand against them):
# Llama 2 4096 (Touvron et al. 2023), Falcon-7B 2048 (model card), Llama 3 8192, Mistral 7B
# context_len 8192 (Jiang et al. 2023, Table 1; its config's max_position_embeddings, 32768, is
# not it), Gemma 2 8192, DeepSeek-V3 128K after two YaRN phases (its config says 163840)
TRAINED_AT = {
    "Llama-2-7B": 4096,
    "Falcon-7B": 2048,
    "Llama-3-8B": 8192,
    "Mistral-7B": 8192,
    "Gemma-2-9B": 8192,
    "DeepSeek-V3": 131_072,
}


def test_native_contexts_mark_the_bills_beyond_them():
    """Each model's native context is the one it was trained on, with its source; 32k tokens
    exceed five of the six (Mistral-7B's window does not make it a 32k model), 128k all but
    DeepSeek-V3."""
    assert {n: m.native_context for n, m in MODELS.items()} == TRAINED_AT
    for m in MODELS.values():
        assert str(m.native_context) in m.source, m.name
    beyond = {n: [beyond_native(m, c) for c in (32_768, 131_072)] for n, m in MODELS.items()}
    assert [n for n, b in beyond.items() if not b[0]] == ["DeepSeek-V3"]
    assert [n for n, b in beyond.items() if not b[1]] == ["DeepSeek-V3"]
    assert not beyond_native(CacheConfig("t", "test", 1), 10**9)  # unknown: never marked


def test_sink_cache_nbytes_equals_the_windowed_formula():
    cfg = CacheConfig(
        "t", "test", 1, num_heads=4, num_kv_heads=2, head_dim=8, window=6, bytes_per_number=4
    )
    cache = SinkKVCache(2, 2, 8, window=6, num_sinks=3)
    for N in (9, 100, 10_000):
        assert cache.nbytes == cache_bytes(cfg, N, batch=2, num_sinks=3)


def test_a_decoders_configuration_is_priced_as_its_cache_holds():
    from mha_lib.distributed.weights import TINY
    from mha_lib.nn.decoder import DecoderLM

    cfg = cache_config(TINY)  # 2 layers, 3 key/value heads of 8, float32
    assert (cfg.attention, cache_numbers_per_token(cfg)) == ("GQA", 2 * 3 * 8)
    assert DecoderLM(TINY).new_cache(2, 10).nbytes == cache_bytes(cfg, 10, batch=2)


def test_a_sparse_attention_indexer_adds_its_key_to_the_mla_bill():
    """DeepSeek-V3.2 caches the indexer's key (D = 128) beside MLA's 512 + 64 numbers; it is kept
    out of notebook 11's table, and an indexer key without MLA is refused by name."""
    from mha_lib.efficient.cache_cost import DEEPSEEK_V32

    assert cache_numbers_per_token(DEEPSEEK_V32) == 512 + 64 + 128
    v3 = MODELS["DeepSeek-V3"]
    assert cache_bytes(DEEPSEEK_V32, 4096) == cache_bytes(v3, 4096) * 704 // 576
    assert DEEPSEEK_V32.name not in MODELS and DEEPSEEK_V32.attention == "MLA"
    with pytest.raises(ValueError, match=r"index_head_dim = 8 with kind 'kv'"):
        cache_numbers_per_token(CacheConfig("t", "test", 1, num_kv_heads=1, index_head_dim=8))
