"""mha_lib.efficient.sink_cache and cache_cost: the rolling cache with sinks equals full attention
under the sink + window mask, its memory stays fixed, and every cache's bytes equal the formula."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.efficient import sliding_window_mask
from mha_lib.efficient.cache_cost import CacheConfig, cache_bytes
from mha_lib.efficient.sink_cache import (
    SinkKVCache,
    sink_cached_attention,
    sink_window_mask,
    slot_of,
)
from mha_lib.positions import rope


def test_slot_arithmetic():
    assert [slot_of(t, 2, 3) for t in range(9)] == [0, 1, 2, 3, 4, 2, 3, 4, 2]
    assert [slot_of(t, 0, 4) for t in range(6)] == [0, 1, 2, 3, 0, 1]


def test_mask_is_the_window_plus_the_sink_columns():
    m = sink_window_mask(7, 3, 2)
    assert np.array_equal(sink_window_mask(7, 3, 0), sliding_window_mask(7, 3))
    assert m[6].tolist() == [True, True, False, False, True, True, True]
    assert not np.triu(m, 1).any()


@pytest.mark.parametrize("S, W, h, h_kv", [(2, 3, 4, 2), (0, 4, 2, 2), (4, 2, 3, 1), (1, 1, 2, 1)])
def test_decoding_with_the_rolling_cache_equals_masked_full_attention(S, W, h, h_kv):
    g = torch.Generator().manual_seed(S * 10 + W)
    B, N, d = 2, 13, 5
    q = torch.randn(B, h, N, d, generator=g, dtype=torch.float64)
    k = torch.randn(B, h_kv, N, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, h_kv, N, d, generator=g, dtype=torch.float64)
    mask = torch.from_numpy(sink_window_mask(N, W, S))
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    cache = SinkKVCache(B, h_kv, d, window=W, num_sinks=S, dtype=torch.float64)
    nbytes = cache.nbytes
    for t in range(N):
        o = sink_cached_attention(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], cache)
        torch.testing.assert_close(o, full[:, :, t : t + 1], rtol=0, atol=1e-12)
        assert cache.positions() == np.flatnonzero(mask[t].numpy()).tolist()
        assert len(cache) == min(t + 1, S + W) and cache.nbytes == nbytes


def test_streaming_positions_keep_window_offsets_and_move_the_sinks():
    """Rotating the cached keys by their place in the cache (StreamingLLM) gives the window keys
    the same scores as text positions would (RoPE sees offsets only), and the sinks others."""
    g = torch.Generator().manual_seed(0)
    S, W, N, d = 2, 3, 10, 8
    q = torch.randn(1, 1, N, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, N, d, generator=g, dtype=torch.float64)
    cache = SinkKVCache(1, 1, d, window=W, num_sinks=S, dtype=torch.float64)
    for t in range(N):
        cache.append(k[:, :, t : t + 1], k[:, :, t : t + 1])
    keys, _ = cache.keys_values()  # (1, 1, S + W, d) in text order
    text = torch.tensor(cache.positions())
    places = torch.tensor(cache.cache_positions())
    q_text = rope(q[:, :, -1:], torch.tensor([N - 1]))
    q_place = rope(q[:, :, -1:], torch.tensor([S + W - 1]))
    by_text = (q_text @ rope(keys, text).transpose(-2, -1))[0, 0, 0]
    by_place = (q_place @ rope(keys, places).transpose(-2, -1))[0, 0, 0]
    torch.testing.assert_close(by_place[S:], by_text[S:])
    assert not torch.allclose(by_place[:S], by_text[:S])


def test_bad_input_is_refused():
    cache = SinkKVCache(1, 2, 4, window=3, num_sinks=1)
    with pytest.raises(ValueError, match="one token at a time"):
        cache.append(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match="window"):
        SinkKVCache(1, 2, 4, window=0)


def test_sink_cache_nbytes_equals_the_windowed_formula():
    cfg = CacheConfig("t", "test", 1, num_heads=4, num_kv_heads=2, head_dim=8, window=6,
                      bytes_per_number=4)  # fmt: skip
    cache = SinkKVCache(2, 2, 8, window=6, num_sinks=3)
    for N in (9, 100, 10_000):
        assert cache.nbytes == cache_bytes(cfg, N, batch=2, num_sinks=3)
