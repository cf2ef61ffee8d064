"""mha_lib.nn.kv_cache: decoding with the cache equals full causal attention; a chunk needs the
bottom-right causal mask; the rolling cache with sinks equals full attention under the sink +
window mask, and its memory stays fixed."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha_lib
from mha_lib.nn.gqa import GroupedQueryAttention
from mha_lib.nn.kv_cache import (
    DecoderCache,
    KVCache,
    SinkKVCache,
    cached_attention,
    sink_cached_attention,
    slot_of,
)
from mha_lib.nn.masks import (
    bottom_right_causal_mask,
    bottom_right_window_tensor,
    sink_window_mask,
    sliding_window_mask,
)
from mha_lib.positions import rope
from tests.nn.nn_inputs import DTYPES, TOL, randn, seeds

# --- KV cache ------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 2),  # B
    st.sampled_from([(1, 1), (2, 1), (4, 2), (4, 4)]),  # (h, h_kv)
    st.integers(1, 12),  # N
    st.sampled_from(DTYPES),
    seeds,
    st.data(),
)
def test_decoding_with_the_cache_equals_full_causal_attention(B, heads, N, dtype, seed, data):
    h, h_kv = heads
    torch.manual_seed(seed % 1000)
    m = GroupedQueryAttention(4 * h, h, h_kv).to(dtype)
    x = randn(B, N, 4 * h, seed=seed, dtype=dtype)
    full = m(x, is_causal=True)  # (B, N, C)
    tol = TOL[dtype]
    # token by token
    cache = m.new_cache(B, N)
    steps = [m(x[:, t : t + 1], cache=cache) for t in range(N)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=tol, atol=tol)
    # in random chunks
    cuts = sorted(data.draw(st.sets(st.integers(1, N - 1), max_size=3)) if N > 1 else set())
    bounds = [0, *cuts, N]
    cache = m.new_cache(B, N)
    chunks = [m(x[:, a:b], cache=cache) for a, b in itertools.pairwise(bounds)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, rtol=tol, atol=tol)
    assert cache.length == N


def test_a_chunk_needs_the_bottom_right_causal_mask():
    torch.manual_seed(0)
    m = GroupedQueryAttention(8, 2, 2).double()
    x = randn(1, 9, 8, seed=0)
    full = m(x, is_causal=True)
    cache = m.new_cache(1, 9)
    m(x[:, :5], cache=cache)
    q = m.q_proj(x[:, 5:]).view(1, 4, 2, 4).transpose(1, 2)  # (B, h, 4, d)
    k, v = cache.k[:, :, :5], cache.v[:, :, :5]
    k_new = m.k_proj(x[:, 5:]).view(1, 4, 2, 4).transpose(1, 2)
    v_new = m.v_proj(x[:, 5:]).view(1, 4, 2, 4).transpose(1, 2)
    k_all, v_all = torch.cat([k, k_new], dim=2), torch.cat([v, v_new], dim=2)  # (B, h, 9, d)

    def out(heads):
        return m.out_proj(heads.transpose(1, 2).reshape(1, 4, 8))

    right = F.scaled_dot_product_attention(
        q, k_all, v_all, attn_mask=torch.from_numpy(bottom_right_causal_mask(4, 9))
    )
    torch.testing.assert_close(out(right), full[:, 5:])
    top_left = F.scaled_dot_product_attention(q, k_all, v_all, is_causal=True)  # wrong here
    assert (out(top_left) - full[:, 5:]).abs().max() > 1e-3
    torch.testing.assert_close(
        out(cached_attention(q, k_new, v_new, cache)), full[:, 5:]
    )  # what the module does


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 6), (3, 6), (6, 6), (4, 9)])
def test_bottom_right_causal_mask_definition(n, m):
    mask = bottom_right_causal_mask(n, m)
    expected = np.array([[j <= m - n + i for j in range(m)] for i in range(n)])
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(bottom_right_causal_mask(m, m), mha_lib.causal_mask(m))
    np.testing.assert_array_equal(mask, mha_lib.causal_mask(m)[m - n :])  # the last n rows


def test_kv_cache_truncate_and_full():
    cache = KVCache(1, 2, 4, 3)
    k = torch.ones(1, 2, 3, 3)
    cache.append(k, k)
    cache.truncate(1)
    ks, _ = cache.append(2 * k, 2 * k)
    assert ks.shape == (1, 2, 4, 3) and (ks[:, :, 1:] == 2).all()
    with pytest.raises(ValueError, match="do not fit"):
        cache.append(k[:, :, :1], k[:, :, :1])


# --- bad input -----------------------------------------------------------------------------------

q4 = torch.zeros(1, 2, 5, 4)
k4 = torch.zeros(1, 2, 6, 4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: KVCache(1, 2, 0, 4), ValueError, "max_len must be at least 1"),
        (lambda: KVCache(1, 2, 8, 4).append(k4[:, :1], k4[:, :1]), ValueError, "h_kv = 2"),
        (
            lambda: cached_attention(torch.zeros(1, 3, 6, 4), k4, k4, KVCache(1, 2, 8, 4)),
            ValueError,
            "multiple of the cache's h_kv = 2",
        ),
        (
            lambda: cached_attention(torch.zeros(1, 2, 2, 4), k4, k4, KVCache(1, 2, 8, 4)),
            ValueError,
            "q has 2 new tokens",
        ),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


# --- the rolling cache with sinks (notebook 11) -------------------------------------------------


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


# --- what a decoder layer asks of a cache --------------------------------------------------------


def test_a_kv_cache_update_rotates_at_the_positions_then_stores():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 3, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 3, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 3, 8, generator=g, dtype=torch.float64)
    cache = KVCache(1, 2, 10, 8, dtype=torch.float64)
    cache.append(k[:, :, :1], v[:, :, :1])  # one token seen before: the next are at 1, 2
    positions = torch.tensor([1, 2])
    q2, k2, v2 = cache.update(q[:, :, 1:], k[:, :, 1:], v[:, :, 1:], positions, rope)
    torch.testing.assert_close(q2, rope(q[:, :, 1:], positions), rtol=0, atol=0)
    torch.testing.assert_close(k2[:, :, 1:], rope(k[:, :, 1:], positions), rtol=0, atol=0)
    torch.testing.assert_close(v2, v, rtol=0, atol=0)
    assert cache.seen == cache.length == 3 and not cache.rolling
    cache.check(1, 7)
    with pytest.raises(ValueError, match=r"3 cached \+ 8 new tokens = 11 do not fit"):
        cache.check(1, 8)
    with pytest.raises(ValueError, match="input_ids has batch 2; the cache was made for 1"):
        cache.check(2, 1)


@pytest.mark.parametrize("rope_positions", ["cache", "original"])
def test_a_sink_cache_update_rotates_where_it_says(rope_positions):
    """At its places in the cache (StreamingLLM: the keys stored as projected) or at its text
    positions (the keys stored rotated); the values as given, in text order."""
    g = torch.Generator().manual_seed(2)
    S, W, N, d = 1, 2, 6, 8
    q = torch.randn(1, 2, N, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, N, d, generator=g, dtype=torch.float64)
    cache = SinkKVCache(1, 1, d, W, S, rope_positions=rope_positions, dtype=torch.float64)
    for t in range(N):
        qt, kt, vt = cache.update(
            q[:, :, t : t + 1], k[:, :, t : t + 1], k[:, :, t : t + 1], torch.tensor([t]), rope
        )
    kept = cache.positions()  # [0, 4, 5]
    places = torch.tensor(cache.cache_positions())  # [0, 1, 2]
    where_q, where_k = (
        (places[-1:], places)
        if rope_positions == "cache"
        else (torch.tensor([N - 1]), torch.tensor(kept))
    )
    torch.testing.assert_close(qt, rope(q[:, :, -1:], where_q), rtol=0, atol=1e-12)
    torch.testing.assert_close(kt, rope(k[:, :, kept], where_k), rtol=0, atol=1e-12)
    torch.testing.assert_close(vt, k[:, :, kept], rtol=0, atol=0)
    assert kept == [0, 4, 5] and cache.rolling and cache.seen == N
    with pytest.raises(ValueError, match="one token at a time"):
        cache.check(1, 2)
    with pytest.raises(ValueError, match="cannot be truncated"):
        cache.truncate(2)
    with pytest.raises(ValueError, match="rope_positions = 'text'"):
        SinkKVCache(1, 1, d, W, S, rope_positions="text")


def test_a_decoder_cache_is_one_entry_per_layer():
    layers = [KVCache(2, 1, 5, 4), KVCache(2, 1, 5, 4)]
    cache = DecoderCache(layers)
    for c in layers:
        c.append(torch.zeros(2, 1, 3, 4), torch.zeros(2, 1, 3, 4))
    assert cache.length == 3 and not cache.rolling
    assert cache.nbytes == 2 * layers[0].nbytes
    cache.check(2, 2)
    with pytest.raises(ValueError, match="do not fit"):
        cache.check(2, 3)
    cache.truncate(1)
    assert [c.length for c in layers] == [1, 1]
    assert DecoderCache([SinkKVCache(1, 1, 4, 2)]).rolling
    with pytest.raises(TypeError, match="a non-empty list of per-layer caches"):
        DecoderCache([])


@pytest.mark.parametrize("chunks", [[13], [4, 9], [6, 1, 1, 5], [1] * 13, [9, 4]])
def test_a_sliding_layers_cache_takes_chunks_past_its_window(chunks):
    """No sinks, keys at their text positions (Gemma 3's sliding layers, notebook 15): a prompt
    longer than the window, then chunks or single tokens; each chunk's queries attend to the
    keys the cache held and their own under the window mask, as one masked pass over all."""
    g = torch.Generator().manual_seed(3)
    W, N, d = 5, 13, 8
    q = torch.randn(1, 2, N, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, N, d, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, N, d, generator=g, dtype=torch.float64)
    full = F.scaled_dot_product_attention(
        rope(q, torch.arange(N)),
        rope(k, torch.arange(N)),
        v,
        attn_mask=torch.from_numpy(sliding_window_mask(N, W)),
        enable_gqa=True,
    )
    cache = SinkKVCache(1, 1, d, W, 0, rope_positions="original", dtype=torch.float64)
    assert cache.takes_chunks
    out, t = [], 0
    for n in chunks:
        cache.check(1, n)
        pos = torch.arange(t, t + n)
        qt, kt, vt = cache.update(q[:, :, pos], k[:, :, pos], v[:, :, pos], pos, rope)
        m = kt.shape[2]
        assert m == (min(t, W) + n if n > 1 else min(t + 1, W))  # what it held, then the chunk
        mask = bottom_right_window_tensor(n, m, W)
        out.append(F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True))
        t += n
    torch.testing.assert_close(torch.cat(out, dim=2), full, rtol=0, atol=1e-12)
    assert cache.positions() == list(range(N - W, N)) and cache.seen == N
    kept, _ = cache.keys_values()
    torch.testing.assert_close(kept, rope(k, torch.arange(N))[:, :, N - W :], rtol=0, atol=1e-12)


def test_a_cache_with_sinks_or_at_cache_places_takes_one_token_at_a_time():
    for S, where in ((1, "original"), (0, "cache")):
        cache = SinkKVCache(1, 1, 4, 3, S, rope_positions=where)
        assert not cache.takes_chunks
        with pytest.raises(ValueError, match="one token at a time"):
            cache.check(1, 2)
