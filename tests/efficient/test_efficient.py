"""mha_lib.efficient: each efficient form equals the plain definition, and bad input is refused."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mha_lib
from mha_lib.efficient import (
    GroupedQueryAttention,
    KVCache,
    TileStats,
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    bottom_right_causal_mask,
    bottom_right_causal_mask_mod,
    cached_attention,
    causal_mask_mod,
    document_mask,
    document_mask_mod,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    grouped_query_attention,
    hbm_bytes,
    leaks_future,
    mask_from_mask_mod,
    naive_attention,
    prefix_lm_mask,
    prefix_lm_mask_mod,
    repeat_kv,
    saved_for_backward_bytes,
    sliding_window_mask,
    sliding_window_mask_mod,
)
from mha_lib.pytorch import MultiHeadAttention

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


# --- FlashAttention ------------------------------------------------------------------------------


def assert_flash_equals_sdpa(B, h, N, M, d_k, d_v, block_q, block_k, causal, dtype, seed):
    q, k, v = qkv(B, h, N, M, d_k, d_v, seed, dtype, requires_grad=True)
    o, lse = flash_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, h, N, d_v)
    tol = TOL[dtype]
    torch.testing.assert_close(o, ref, rtol=tol, atol=tol)
    scores = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(d_k)  # (B, h, N, M)
    if causal:
        scores = scores.masked_fill(torch.ones(N, M, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), rtol=tol, atol=tol)
    do = randn(B, h, N, d_v, seed=seed + 3, dtype=dtype)
    grads = torch.autograd.grad(o, (q, k, v), do)
    grads_ref = torch.autograd.grad(ref, (q, k, v), do)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, rtol=tol, atol=tol)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 2),  # B
    st.integers(1, 3),  # h
    st.integers(1, 20),  # N
    st.integers(1, 20),  # M
    st.integers(1, 5),  # d_k
    st.integers(1, 5),  # d_v
    st.integers(1, 8),  # block_q
    st.integers(1, 8),  # block_k
    st.booleans(),
    st.sampled_from(DTYPES),
    seeds,
)
def test_flash_equals_sdpa_random_shapes(B, h, N, M, d_k, d_v, bq, bk, causal, dtype, seed):
    assert_flash_equals_sdpa(B, h, N, M, d_k, d_v, bq, bk, causal, dtype, seed)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("N", "M", "block_q", "block_k"),
    [
        (1, 1, 64, 64),  # one query, one key
        (1, 37, 64, 16),  # one query
        (37, 1, 16, 64),  # one key
        (64, 64, 16, 16),  # multiples of the blocks
        (100, 37, 64, 16),  # N, M not multiples, N > M
        (37, 100, 16, 64),  # N < M
        (5, 7, 1, 1),  # blocks of one row / one key
    ],
)
def test_flash_equals_sdpa_edge_sizes(N, M, block_q, block_k, causal, dtype):
    assert_flash_equals_sdpa(2, 2, N, M, 8, 6, block_q, block_k, causal, dtype, seed=0)


def test_flash_one_head_and_d_equal_one():
    assert_flash_equals_sdpa(1, 1, 9, 11, 1, 1, 4, 3, True, torch.float32, seed=5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("N", "M"), [(5, 7), (7, 5), (1, 3)])
def test_flash_backward_gradcheck(N, M, causal):
    q, k, v = qkv(1, 2, N, M, 3, 2, seed=1, dtype=torch.float64, requires_grad=True)

    def output(q, k, v):
        return flash_attention(q, k, v, is_causal=causal, block_q=2, block_k=3)[0]

    assert torch.autograd.gradcheck(output, (q, k, v))


def test_flash_forward_and_backward_functions_match_the_autograd_function():
    q, k, v = qkv(1, 2, 10, 12, 4, 3, seed=2, dtype=torch.float64, requires_grad=True)
    o, lse = flash_attention_forward(q.detach(), k.detach(), v.detach(), True, 4, 5)
    do = randn(1, 2, 10, 3, seed=9)
    grads = flash_attention_backward(do, q.detach(), k.detach(), v.detach(), o, lse, True, 4, 5)
    o_ref, _ = flash_attention(q, k, v, True, 4, 5)
    torch.testing.assert_close(o, o_ref.detach())
    for g, g_ref in zip(grads, torch.autograd.grad(o_ref, (q, k, v), do)):
        torch.testing.assert_close(g, g_ref)


# --- FlashAttention with a mask_mod --------------------------------------------------------------


def zoo_mask_mods(N, M, seed):
    """(name, mask_mod, (N, M) bool mask) for every mask of the zoo at these sizes."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.integers(0, 3, size=max(N, M)))  # packed documents, in order
    n_prefix = int(rng.integers(0, M + 1))
    window = int(rng.integers(1, 5))
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]  # written from each definition
    mods = [
        ("none", None, np.ones((N, M), dtype=bool)),
        ("causal", causal_mask_mod, j <= i),
        ("window", sliding_window_mask_mod(window), (j <= i) & (i - j < window)),
        ("document", document_mask_mod(torch.from_numpy(ids)), ids[:N, None] == ids[None, :M]),
        ("prefix-LM", prefix_lm_mask_mod(n_prefix), (j <= i) | (j < n_prefix)),
    ]
    if N <= M:
        mods.append(("bottom-right", bottom_right_causal_mask_mod(N, M), j <= i + M - N))
    return mods


def assert_flash_with_mask_mod_equals_sdpa(B, h, N, M, d, bq, bk, dtype, seed):
    q, k, v = qkv(B, h, N, M, d, d + 1, seed, dtype, requires_grad=True)
    do = randn(B, h, N, d + 1, seed=seed + 3, dtype=dtype)
    tol = TOL[dtype]
    for name, mod, mask in zoo_mask_mods(N, M, seed):
        stats = TileStats()
        o, lse = flash_attention(q, k, v, block_q=bq, block_k=bk, mask_mod=mod, stats=stats)
        attn_mask = torch.from_numpy(mask)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, h, N, d_v)
        torch.testing.assert_close(o, ref, rtol=tol, atol=tol, msg=name)
        assert torch.isfinite(o).all(), name
        scores = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(d)  # (B, h, N, M)
        expected_lse = torch.logsumexp(scores.masked_fill(~attn_mask, -math.inf), dim=-1)
        torch.testing.assert_close(lse, expected_lse, rtol=tol, atol=tol, msg=name)
        for g, g_ref in zip(
            torch.autograd.grad(o, (q, k, v), do), torch.autograd.grad(ref, (q, k, v), do)
        ):
            assert torch.isfinite(g).all(), name
            torch.testing.assert_close(g, g_ref, rtol=tol, atol=tol, msg=name)
        nq, nk = -(-N // bq), -(-M // bk)
        padded = np.zeros((nq * bq, nk * bk), dtype=bool)
        padded[:N, :M] = mask
        live = padded.reshape(nq, bq, nk, bk).any(axis=(1, 3))  # (nq, nk) tiles with a True
        assert (stats.visited, stats.skipped) == (live.sum(), (~live).sum()), name


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 2),  # B
    st.integers(1, 2),  # h
    st.integers(1, 17),  # N
    st.integers(1, 17),  # M
    st.integers(1, 4),  # d
    st.integers(1, 6),  # block_q
    st.integers(1, 6),  # block_k
    st.sampled_from(DTYPES),
    seeds,
)
def test_flash_with_every_mask_of_the_zoo_equals_sdpa_with_the_explicit_mask(
    B, h, N, M, d, bq, bk, dtype, seed
):
    assert_flash_with_mask_mod_equals_sdpa(B, h, N, M, d, bq, bk, dtype, seed % 2**31)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("N", "M", "bq", "bk"), [(16, 16, 4, 4), (5, 23, 2, 8), (23, 5, 8, 2)])
def test_flash_with_mask_mods_fixed_sizes(N, M, bq, bk, dtype):
    assert_flash_with_mask_mod_equals_sdpa(2, 2, N, M, 4, bq, bk, dtype, seed=11)


def test_is_causal_is_the_causal_mask_mod():
    q, k, v = qkv(1, 2, 11, 7, 3, 3, seed=4, dtype=torch.float64)
    a, b = TileStats(), TileStats()
    o1, l1 = flash_attention(q, k, v, True, 4, 2, stats=a)
    o2, l2 = flash_attention(q, k, v, False, 4, 2, mask_mod=causal_mask_mod, stats=b)
    assert torch.equal(o1, o2) and torch.equal(l1, l2) and a == b


def test_flash_skips_fully_masked_tiles_in_both_passes():
    """Causal N = M = 64 in tiles of 16: the 4 x 4 grid keeps its 10 tiles on or below the
    diagonal; a window of 16 keeps the 4 diagonal tiles and the 3 below them."""
    q, k, v = qkv(1, 1, 64, 64, 4, 4, seed=5, dtype=torch.float64)
    for mod, visited in ((causal_mask_mod, 10), (sliding_window_mask_mod(16), 7)):
        forward, backward = TileStats(), TileStats()
        o, lse = flash_attention_forward(q, k, v, False, 16, 16, mod, forward)
        flash_attention_backward(torch.ones_like(o), q, k, v, o, lse, False, 16, 16, mod, backward)
        assert forward == backward == TileStats(visited=visited, skipped=16 - visited)
        assert forward.total == 16 and forward.sparsity == (16 - visited) / 16
    calls = []

    def spy(b, h, q_idx, kv_idx):
        calls.append((int(q_idx.min()), int(kv_idx.min())))
        return kv_idx <= q_idx

    flash_attention(q, k, v, block_q=32, block_k=32, mask_mod=spy)
    assert calls == [(0, 0), (0, 32), (32, 0), (32, 32)]  # evaluated once per tile


def test_flash_rows_with_nothing_to_attend_give_zeros_and_zero_gradients():
    q, k, v = qkv(1, 2, 6, 8, 3, 2, seed=6, dtype=torch.float64, requires_grad=True)

    def mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx % 3 != 0)  # rows 0 and 3 see nothing

    o, lse = flash_attention(q, k, v, block_q=2, block_k=3, mask_mod=mod)
    assert (o[:, :, [0, 3]] == 0).all() and torch.isneginf(lse[:, :, [0, 3]]).all()
    assert torch.isfinite(o).all()
    dq, dk, dv = torch.autograd.grad(o.sum(), (q, k, v))
    assert (dq[:, :, [0, 3]] == 0).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, block_q=2, block_k=3, mask_mod=mod)[0], (q, k, v)
    )


@pytest.mark.parametrize(("N", "M"), [(3, 7), (7, 7), (4, 4)])
def test_flash_gradcheck_with_the_bottom_right_and_document_masks(N, M):
    q, k, v = qkv(1, 2, N, M, 3, 2, seed=7, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([0, 0, 1, 1, 1, 2, 2])[:M]
    for mod in (bottom_right_causal_mask_mod(N, M), document_mask_mod(ids)):
        assert torch.autograd.gradcheck(
            lambda q, k, v, mod=mod: flash_attention(q, k, v, block_q=2, block_k=3, mask_mod=mod)[
                0
            ],
            (q, k, v),
        )


def test_flash_mask_mod_may_depend_on_batch_and_head():
    q, k, v = qkv(2, 3, 9, 9, 4, 4, seed=8, dtype=torch.float64)

    def per_head_window(b, h, q_idx, kv_idx):  # head h looks back h + 1 tokens, batch 1 also
        return (kv_idx <= q_idx) & ((q_idx - kv_idx <= h) | (b == 1))  # all of the past

    o, _ = flash_attention(q, k, v, block_q=4, block_k=4, mask_mod=per_head_window)
    i, j = torch.arange(9)[:, None], torch.arange(9)[None, :]
    h = torch.arange(3)[:, None, None]
    mask = torch.stack([(j <= i) & (i - j <= h), (j <= i).expand(3, 9, 9)])  # (B, h, N, M)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(o, ref)


def test_a_chunk_against_a_cache_through_flash_attention():
    """Prefill 6 tokens into a cache, then a chunk of 3 through flash with the bottom-right
    mask_mod: equal to full causal attention over all 9 tokens, and to cached_attention."""
    q, k, v = qkv(1, 2, 9, 9, 4, 4, seed=9, dtype=torch.float64)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (1, 2, 9, 4)
    cache = KVCache(1, 2, 9, 4, dtype=torch.float64)
    cache.append(k[:, :, :6], v[:, :, :6])
    expected = cached_attention(q[:, :, 6:], k[:, :, 6:], v[:, :, 6:], cache)
    k_all, v_all = cache.k[:, :, :9], cache.v[:, :, :9]
    chunk, _ = flash_attention(
        q[:, :, 6:], k_all, v_all, block_q=2, block_k=4, mask_mod=bottom_right_causal_mask_mod(3, 9)
    )
    torch.testing.assert_close(chunk, full[:, :, 6:])
    torch.testing.assert_close(chunk, expected)
    top_left, _ = flash_attention(q[:, :, 6:], k_all, v_all, True, 2, 4)
    assert (top_left - full[:, :, 6:]).abs().max() > 1e-3


def test_flash_keeps_linear_memory_for_backward_naive_quadratic():
    def kept(fn, N):
        q, k, v = qkv(1, 2, N, N, 16, 16, seed=0, dtype=torch.float32, requires_grad=True)
        return saved_for_backward_bytes(lambda: fn(q, k, v))

    def flash(q, k, v):
        return flash_attention(q, k, v, is_causal=True)[0]

    def naive(q, k, v):
        return naive_attention(q, k, v, is_causal=True)

    # flash: q, k, v, o (each N·16 floats per head) and lse (N floats per head), exactly
    for N in (128, 256):
        assert kept(flash, N) == 2 * (4 * N * 16 + N) * 4
    assert kept(naive, 512) / kept(naive, 256) > 3.5  # the N×N weights dominate
    assert kept(naive, 512) >= 2 * 512 * 512 * 4


def test_naive_attention_equals_sdpa():
    q, k, v = qkv(2, 3, 7, 9, 4, 5, seed=3, dtype=torch.float64)
    for causal in (False, True):
        torch.testing.assert_close(
            naive_attention(q, k, v, causal),
            F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        )


# --- grouped-query attention ---------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 2),  # B
    st.sampled_from([(1, 1), (2, 1), (4, 2), (6, 3), (4, 4), (3, 1)]),  # (h, h_kv)
    st.integers(1, 9),  # N
    st.integers(1, 9),  # M
    st.integers(1, 4),  # d_k
    st.integers(1, 4),  # d_v
    st.booleans(),
    st.sampled_from(DTYPES),
    seeds,
)
def test_gqa_equals_sdpa_enable_gqa_and_repetition(B, heads, N, M, d_k, d_v, causal, dtype, seed):
    h, h_kv = heads
    q = randn(B, h, N, d_k, seed=seed, dtype=dtype)
    k = randn(B, h_kv, M, d_k, seed=seed + 1, dtype=dtype)
    v = randn(B, h_kv, M, d_v, seed=seed + 2, dtype=dtype)
    out = grouped_query_attention(q, k, v, is_causal=causal)  # (B, h, N, d_v)
    tol = TOL[dtype]
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, sdpa, rtol=tol, atol=tol)
    g = h // h_kv
    repeated = F.scaled_dot_product_attention(
        q, repeat_kv(k, g), repeat_kv(v, g), is_causal=causal
    )  # plain multi-head attention on repeated heads
    torch.testing.assert_close(out, repeated, rtol=tol, atol=tol)
    for i in range(h):  # query head i uses key/value head i // g
        torch.testing.assert_close(repeat_kv(k, g)[:, i], k[:, i // g])


def test_gqa_with_a_fully_masked_row_gives_zeros():
    q, k, v = qkv(1, 2, 3, 4, 2, 2, seed=0, dtype=torch.float64)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out = grouped_query_attention(q, k[:, :1], v[:, :1], mask=mask)
    assert (out[:, :, 1] == 0).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("bias", [False, True])
def test_gqa_module_with_all_kv_heads_equals_multi_head_attention(bias):
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 4, bias=bias).double()
    gqa = GroupedQueryAttention.from_mha(mha)
    assert gqa.num_kv_heads == gqa.num_heads == 4
    x = randn(2, 7, 12, seed=1)
    for causal in (False, True):
        torch.testing.assert_close(gqa(x, is_causal=causal), mha(x, is_causal=causal)[0])


def test_mqa_module_shares_one_key_value_head():
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 1).double()
    assert m.k_proj.weight.shape == (4, 16) and m.v_proj.weight.shape == (4, 16)  # (d, C)
    x = randn(2, 6, 16, seed=2)
    q = m.q_proj(x).view(2, 6, 4, 4).transpose(1, 2)  # (B, h, N, d)
    k = m.k_proj(x).view(2, 6, 1, 4).transpose(1, 2)  # (B, 1, N, d)
    v = m.v_proj(x).view(2, 6, 1, 4).transpose(1, 2)
    heads = grouped_query_attention(q, k, v, is_causal=True)  # (B, h, N, d)
    expected = m.out_proj(heads.transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(m(x, is_causal=True), expected)


@pytest.mark.parametrize("h_kv", [1, 2, 8])
def test_kv_cache_memory_shrinks_by_the_group_size(h_kv):
    cache = GroupedQueryAttention(64, 8, h_kv).new_cache(batch_size=3, max_len=50)
    assert cache.nbytes == 2 * 3 * h_kv * 50 * 8 * 4  # 2·B·h_kv·N·d float32 numbers
    assert cache.k.shape == (3, h_kv, 50, 8)


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


# --- masks ---------------------------------------------------------------------------------------


def brute(N, M, rule):
    return np.array([[rule(i, j) for j in range(M)] for i in range(N)])


@pytest.mark.parametrize("N", [1, 2, 7])
@pytest.mark.parametrize("window", [1, 2, 3, 10])
def test_sliding_window_mask(N, window):
    expected = brute(N, N, lambda i, j: i - window < j <= i)
    np.testing.assert_array_equal(sliding_window_mask(N, window), expected)
    mod = mask_from_mask_mod(sliding_window_mask_mod(window), N, N).numpy()
    np.testing.assert_array_equal(mod, expected)
    assert sliding_window_mask(N, window).sum(axis=1).max() == min(N, window)


@pytest.mark.parametrize("N", [1, 6])
@pytest.mark.parametrize("prefix_len", [0, 1, 3])
def test_prefix_lm_mask(N, prefix_len):
    prefix_len = min(prefix_len, N)
    expected = brute(N, N, lambda i, j: j <= i or j < prefix_len)
    np.testing.assert_array_equal(prefix_lm_mask(N, prefix_len), expected)
    np.testing.assert_array_equal(
        mask_from_mask_mod(prefix_lm_mask_mod(prefix_len), N, N).numpy(), expected
    )
    if prefix_len == 0:
        np.testing.assert_array_equal(prefix_lm_mask(N, 0), mha_lib.causal_mask(N))


def test_document_mask():
    ids = [0, 0, 0, 1, 1, 2]
    expected = brute(6, 6, lambda i, j: ids[i] == ids[j])
    np.testing.assert_array_equal(document_mask(ids), expected)
    mod = mask_from_mask_mod(document_mask_mod(torch.tensor(ids)), 6, 6).numpy()
    np.testing.assert_array_equal(mod, expected)
    np.testing.assert_array_equal(mask_from_mask_mod(causal_mask_mod, 5, 5), mha_lib.causal_mask(5))


def reference_alibi_slopes(h):
    """The rule of Press et al., written from its description: for a power of two n the
    slopes start at 2^(-8/n) and each is the previous times 2^(-8/n); otherwise the slopes of
    the largest power of two p below h, then the 1st, 3rd, 5th ... slopes of 2p's rule."""

    def powers(n):
        start = 2.0 ** (-8.0 / n)
        out = [start]
        while len(out) < n:
            out.append(out[-1] * start)
        return out

    p = 1
    while 2 * p <= h:
        p *= 2
    return powers(p) + powers(2 * p)[::2][: h - p]


@pytest.mark.parametrize("h", range(1, 33))
def test_alibi_slopes_follow_the_reference_rule(h):
    slopes = alibi_slopes(h)
    assert slopes.shape == (h,)
    np.testing.assert_allclose(slopes, reference_alibi_slopes(h), rtol=1e-12, atol=0)
    assert len(set(slopes.tolist())) == h and np.all((slopes > 0) & (slopes < 1))


def test_alibi_slopes_known_values():
    np.testing.assert_allclose(alibi_slopes(8), [2.0**-k for k in range(1, 9)])
    np.testing.assert_allclose(alibi_slopes(6), [0.25, 0.0625, 2**-6, 2**-8, 0.5, 0.125])
    np.testing.assert_allclose(
        np.round(alibi_slopes(6), 4), [0.25, 0.0625, 0.0156, 0.0039, 0.5, 0.125]
    )
    np.testing.assert_allclose(alibi_slopes(1), [2**-8])
    assert not np.allclose(alibi_slopes(6), 2.0 ** (-8 * np.arange(1, 7) / 6))  # not 2^(-8k/h)


def test_alibi_bias():
    bias = alibi_bias(4, 5, 2)  # (h, N, M)
    expected = np.array(
        [[[s * (j - i) for j in range(5)] for i in range(4)] for s in (1 / 16, 1 / 256)]
    )
    np.testing.assert_allclose(bias, expected)


@pytest.mark.parametrize(
    "mask",
    [
        mha_lib.causal_mask(7),
        sliding_window_mask(7, 3),
        document_mask([0, 0, 1, 1, 1, 2, 2]),
        document_mask([0, 0, 1, 1, 1, 2, 2]) & mha_lib.causal_mask(7),
        prefix_lm_mask(7, 3),
    ],
)
def test_numpy_mask_as_sdpa_attn_mask_equals_numpy_core(mask):
    q, k, v = qkv(1, 2, 7, 7, 4, 3, seed=4, dtype=torch.float64)
    expected, _ = mha_lib.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), mask)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(mask))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_alibi_as_sdpa_float_mask_equals_numpy_core_scores():
    q, k, v = qkv(1, 4, 6, 6, 3, 2, seed=5, dtype=torch.float64)
    bias = alibi_bias(6, 6, 4)  # (h, N, M)
    keep = mha_lib.causal_mask(6)
    float_mask = np.where(keep, bias, -np.inf)  # (h, N, N)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(float_mask))
    scores = q.numpy() @ k.numpy().swapaxes(-1, -2) / math.sqrt(3) + bias  # (1, h, N, N)
    weights = mha_lib.softmax(np.where(keep, scores, -np.inf))
    np.testing.assert_allclose(out.numpy(), weights @ v.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("N, M", [(3, 7), (1, 5), (4, 4), (6, 9)])
def test_bottom_right_mask_is_torchs_causal_lower_right(N, M):
    # notebook 08 §8 compares with this mask written out; torch's own is here (importing
    # torch.nn.attention.bias loads torch's compiler stack, which the notebook avoids)
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = qkv(2, 3, N, M, 4, 4, seed=11, dtype=torch.float64)
    ours, _ = flash_attention(
        q, k, v, block_q=2, block_k=3, mask_mod=bottom_right_causal_mask_mod(N, M)
    )
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(N, M))
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    written_out = torch.ones(N, M, dtype=torch.bool).tril(M - N)  # the notebook's form
    assert torch.equal(torch.from_numpy(bottom_right_causal_mask(N, M)), written_out)


def test_flex_attention_runs_the_combined_document_mask_of_notebook_08():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = qkv(1, 4, 11, 11, 8, 8, seed=12, dtype=torch.float32)
    ids = np.array([0] * 6 + [1] * 5)
    mod = flex.and_masks(document_mask_mod(torch.from_numpy(ids)), causal_mask_mod)
    mask = document_mask(ids) & mha_lib.causal_mask(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": the unfused path
        block_mask = flex.create_block_mask(mod, None, None, 11, 11, device="cpu")
        out = flex.flex_attention(q, k, v, block_mask=block_mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(mask))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_flex_attention_eager_on_the_cpu_equals_sdpa():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = qkv(1, 4, 16, 16, 8, 8, seed=6, dtype=torch.float32)
    ids = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)
    masks = {
        "causal": (causal_mask_mod, mha_lib.causal_mask(16)),
        "window": (sliding_window_mask_mod(4), sliding_window_mask(16, 4)),
        "document": (document_mask_mod(ids), document_mask(ids.numpy())),
        "prefix": (prefix_lm_mask_mod(5), prefix_lm_mask(16, 5)),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": the unfused path
        for mod, mask in masks.values():
            block_mask = flex.create_block_mask(mod, None, None, 16, 16, device="cpu")
            out = flex.flex_attention(q, k, v, block_mask=block_mask)
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(mask))
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)

        def alibi_causal(score, b, h, q_idx, kv_idx):
            score = alibi_score_mod(4)(score, b, h, q_idx, kv_idx)
            return torch.where(q_idx >= kv_idx, score, -float("inf"))

        out = flex.flex_attention(q, k, v, score_mod=alibi_causal)
    float_mask = np.where(mha_lib.causal_mask(16), alibi_bias(16, 16, 4), -np.inf)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(float_mask).float())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.skip(
    reason="torch.compile(flex_attention) works on the CPU but compiles for about 20 s on a "
    "2-core machine (C++ code generation), too slow for the test suite; the eager path is tested"
)
def test_flex_attention_compiled_on_the_cpu():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = qkv(1, 2, 16, 16, 8, 8, seed=7, dtype=torch.float32)
    block_mask = flex.create_block_mask(causal_mask_mod, None, None, 16, 16, device="cpu")
    out = torch.compile(flex.flex_attention)(q, k, v, block_mask=block_mask)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


# --- the classic mask inversion ------------------------------------------------------------------


def test_perturb_the_future_catches_the_inverted_mask():
    x = randn(1, 6, 4, seed=8)
    N = 6
    inverted = torch.ones(N, N, dtype=torch.bool).triu(1)  # True above the diagonal

    def attend(mask=None, is_causal=False):
        def fn(x):
            q = x[:, None]  # (B, 1, N, C): one head
            return F.scaled_dot_product_attention(q, q, q, attn_mask=mask, is_causal=is_causal)[
                :, 0
            ]

        return fn

    assert leaks_future(attend(mask=inverted), x)
    assert leaks_future(attend(), x)  # no mask at all
    assert not leaks_future(attend(mask=~inverted), x)
    assert not leaks_future(attend(is_causal=True), x)
    assert not leaks_future(
        lambda x: flash_attention(x[:, None], x[:, None], x[:, None], True, 2, 2)[0][:, 0], x
    )
    # and the reference test catches it too
    q = x[:, None]
    wrong = F.scaled_dot_product_attention(q, q, q, attn_mask=inverted)
    expected, _ = mha_lib.scaled_dot_product_attention(
        q.numpy(), q.numpy(), q.numpy(), mha_lib.causal_mask(N)
    )
    assert not np.allclose(wrong.numpy(), expected)
    assert torch.isfinite(wrong).all()  # nothing errors, no NaN: the last row is all zeros
    assert (wrong[0, 0, -1] == 0).all()


# --- bad input -----------------------------------------------------------------------------------

q4 = torch.zeros(1, 2, 5, 4)
k4 = torch.zeros(1, 2, 6, 4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: flash_attention(q4[0], k4, k4), ValueError, "q has shape"),
        (lambda: flash_attention(q4, k4[..., :3], k4), ValueError, "d_k = 4"),
        (lambda: flash_attention(q4, k4, k4[:, :, :5]), ValueError, "v has shape"),
        (lambda: flash_attention(q4, k4[:, :1], k4[:, :1]), ValueError, "h = 2"),
        (lambda: flash_attention(q4, k4, k4, block_q=0), ValueError, "block_q must be at least 1"),
        (lambda: flash_attention(q4, k4, k4, block_k=2.0), TypeError, "block_k must be an int"),
        (lambda: flash_attention(q4.long(), k4, k4), TypeError, "floating-point"),
        (lambda: flash_attention(q4, k4.double(), k4), TypeError, "k is torch.float64"),
        (lambda: flash_attention(q4, k4, k4, is_causal=1), TypeError, "is_causal"),
        (lambda: flash_attention(q4[:, :, :0], k4, k4), ValueError, "at least one token"),
        (
            lambda: flash_attention(q4, k4, k4, is_causal=True, mask_mod=causal_mask_mod),
            ValueError,
            "give one of them",
        ),
        (lambda: flash_attention(q4, k4, k4, mask_mod="causal"), TypeError, "mask_mod must be a"),
        (
            lambda: flash_attention(q4, k4, k4, mask_mod=lambda b, h, i, j: (j <= i).float()),
            TypeError,
            "mask_mod must return a bool tensor",
        ),
        (
            lambda: flash_attention(q4, k4, k4, mask_mod=lambda b, h, i, j: torch.ones(3, 3) > 0),
            ValueError,
            "mask_mod returned shape (3, 3)",
        ),
        (lambda: flash_attention(q4, k4, k4, stats={}), TypeError, "stats must be a TileStats"),
        (lambda: bottom_right_causal_mask_mod(5, 3), ValueError, "expected n <= m"),
        (lambda: GroupedQueryAttention(8, 4, 3), ValueError, "num_kv_heads = 3 does not divide"),
        (lambda: GroupedQueryAttention(9, 4, 2), ValueError, "not divisible by num_heads"),
        (lambda: GroupedQueryAttention(8, 4, 0), ValueError, "num_kv_heads must be at least 1"),
        (lambda: GroupedQueryAttention(8, 2, 1)(torch.zeros(1, 3, 6)), ValueError, "C = 8"),
        (lambda: grouped_query_attention(q4, k4[:, :1, :, :3], k4[:, :1]), ValueError, "d_k = 4"),
        (
            lambda: grouped_query_attention(torch.zeros(1, 3, 5, 4), k4, k4),
            ValueError,
            "divisor of q's h = 3",
        ),
        (lambda: repeat_kv(k4, 0), ValueError, "groups must be at least 1"),
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
        (lambda: bottom_right_causal_mask(5, 3), ValueError, "expected n <= m"),
        (lambda: sliding_window_mask(5, 0), ValueError, "window must be at least 1"),
        (lambda: prefix_lm_mask(5, 6), ValueError, "prefix_len must lie in [0, N]"),
        (lambda: document_mask([0.5, 1.0]), TypeError, "doc_ids must be"),
        (lambda: alibi_slopes(0), ValueError, "num_heads must be at least 1"),
        (lambda: leaks_future(lambda x: x, torch.zeros(3, 4)), ValueError, "expected (B, N, C)"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


# ---------------------------------------------------------------------------- HBM bytes


def test_hbm_bytes_by_hand():
    """N = M = 32, d = 16, tiles of 16 × 16, float16, one head, counted by hand."""
    # naive: S = Q Kᵀ reads 2·32·16, writes 32·32; softmax reads and writes 32·32;
    # O = P V reads 32·32 + 32·16, writes 32·16
    assert hbm_bytes(32, 32, 16, "naive") == (1024 + 1024 + 1024 + 1024 + 1024 + 1024) * 2
    # tiled: 2 programs, each Q 16·16 once, K and V 16·16 per key tile (2 each), O 16·16;
    # L: 32 floats of 4 bytes
    q_o = 2 * (256 + 256)
    assert hbm_bytes(32, 32, 16, "tiled") == (q_o + 2 * 2 * 2 * 256) * 2 + 32 * 4
    # causal: program 0 visits 1 key tile, program 1 visits 2
    assert hbm_bytes(32, 32, 16, "tiled", "top_left") == (q_o + 3 * 2 * 256) * 2 + 32 * 4
    # a partial last block moves its live rows only: N = 20, M = 24 -> Q, O 20 rows; keys
    # 16 + 8 per program, 2 programs
    expected = (2 * 20 * 16 + 2 * 2 * 24 * 16) * 4 + 20 * 4
    assert hbm_bytes(20, 24, 16, "tiled", bytes_per_number=4) == expected
    # bottom right, N = 40 > M = 16 (offset -24): rows 0..15 see no key, so the first
    # program loads no K or V tile; the other two load the one key tile
    expected = (2 * 40 * 16 + 2 * 2 * 16 * 16) * 2 + 40 * 4
    assert hbm_bytes(40, 16, 16, "tiled", "bottom_right") == expected


def test_hbm_bytes_grows_as_n_squared_over_the_query_block():
    """K and V are read once per query block: the tiled count is about 2 N² d / block_q
    numbers, the naive one about 4 N²; at N = 4096, d = 64 the blocks decide which wins."""
    naive = hbm_bytes(4096, 4096, 64, "naive")
    assert naive == (4 * 4096 * 64 + 4 * 4096**2) * 2
    big = hbm_bytes(4096, 4096, 64, "tiled", block_q=128, block_k=64)
    small = hbm_bytes(4096, 4096, 64, "tiled", block_q=16, block_k=16)
    assert 3.9 < naive / big < 4.0 and 1.9 < small / naive < 2.0
    assert hbm_bytes(4096, 4096, 64, "tiled", "top_left", 128, 64) < 0.55 * big


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(N=0, M=4, d=16), "N must be a positive int"),
        (dict(N=4, M=4, d=16, form="fused"), "form must be one of"),
        (dict(N=4, M=4, d=16, causal=True), "causal must be None"),
        (dict(N=4, M=4, d=16, block_q=2.0), "block_q must be a positive int"),
    ],
)
def test_hbm_bytes_refuses_bad_input(kwargs, words):
    with pytest.raises(ValueError, match=words):
        hbm_bytes(**kwargs)


def hbm_line():
    """The count notebooks 08 and 09 both print, computed here from the same function."""
    naive = hbm_bytes(4096, 4096, 64, "naive")
    big = hbm_bytes(4096, 4096, 64, "tiled", block_q=128, block_k=64)
    small = hbm_bytes(4096, 4096, 64, "tiled", block_q=16, block_k=16)
    return (
        f"one head, N = 4096, d = 64, float16: naive {naive / 2**20:.1f} MiB; tiled, "
        f"128 × 64 tiles {big / 2**20:.1f} MiB ({naive / big:.1f} times fewer); "
        f"16 × 16 tiles {small / 2**20:.1f} MiB ({small / naive:.1f} times more)"
    )


def test_notebooks_08_and_09_state_the_same_byte_count():
    """Issue 22: one count of the bytes, from one function, in both notebooks."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for name in ("08_efficient_attention", "09_flash_attention_triton"):
        cells = json.loads((root / "notebooks" / f"{name}.ipynb").read_text())["cells"]
        printed = [
            line
            for cell in cells
            if cell["cell_type"] == "code"
            for out in cell["outputs"]
            for line in "".join(out.get("text", "")).splitlines()
        ]
        assert hbm_line() in printed, name
