"""mha_lib.nn.gqa: grouped- and multi-query attention equal SDPA with repeated key/value
heads, and the module with all key/value heads equals multi-head attention."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib.nn import (
    GroupedQueryAttention,
    grouped_query_attention,
    repeat_kv,
)
from mha_lib.nn.gqa import grouped_scores, sdpa_attention
from mha_lib.pytorch import MultiHeadAttention
from tests.nn.nn_inputs import DTYPES, TOL, qkv, randn, seeds

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
    mha = MultiHeadAttention(12, 4, bias=bias, batch_first=True).double()
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


def test_heads_may_have_another_width_than_C_over_h():
    """head_dim given: 3 query heads and 1 key/value head of 8 in a width of 48 (what one rank of
    notebook 14 holds), the same as the written-out grouped attention."""
    torch.manual_seed(0)
    m = GroupedQueryAttention(48, 3, 1, head_dim=8).double()
    assert m.q_proj.weight.shape == (24, 48) and m.out_proj.weight.shape == (48, 24)
    x = randn(2, 5, 48, seed=3)
    q, k, v = m.project(x)  # (2, 3, 5, 8), (2, 1, 5, 8), (2, 1, 5, 8)
    assert q.shape == (2, 3, 5, 8) and k.shape == v.shape == (2, 1, 5, 8)
    heads = grouped_query_attention(q, k, v, is_causal=True)  # (B, h, N, d)
    expected = m.out_proj(heads.transpose(1, 2).reshape(2, 5, 24))
    torch.testing.assert_close(m(x, is_causal=True), expected)
    assert m.new_cache(2, 9).k.shape == (2, 1, 9, 8)


def test_the_forward_takes_an_attention_function_and_a_head_mask():
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2).double()
    x = randn(1, 6, 16, seed=4)
    calls = []

    def attention(q, k, v):  # causal, the queries last: here n = m
        calls.append((q.shape, k.shape))
        return sdpa_attention(q, k, v)

    torch.testing.assert_close(m(x, attention=attention), m(x, is_causal=True))
    assert calls == [((1, 4, 6, 4), (1, 2, 6, 4))]
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0])
    removed = GroupedQueryAttention(16, 4, 2).double()
    removed.load_state_dict(m.state_dict())
    with torch.no_grad():
        removed.out_proj.weight[:, 4:8] = 0  # head 1's columns of W_O
    torch.testing.assert_close(m(x, head_mask=mask, is_causal=True), removed(x, is_causal=True))


def test_qkv_are_the_projections_split_into_heads():
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2).double()
    x = randn(2, 3, 16, seed=5)
    q, k, v = m.qkv(x, torch.arange(3))  # no rotation in this layer: the projections
    torch.testing.assert_close(q, m.q_proj(x).view(2, 3, 4, 4).transpose(1, 2), rtol=0, atol=0)
    torch.testing.assert_close(v, m.v_proj(x).view(2, 3, 2, 4).transpose(1, 2), rtol=0, atol=0)
    torch.testing.assert_close(k, m.project(x)[1], rtol=0, atol=0)


def test_grouped_scores_are_the_scores_against_the_groups_keys():
    q, k, _ = qkv(2, 6, 5, 7, 8, 8, seed=6, dtype=torch.float64)
    k = k[:, :2]  # (2, 2, 7, 8): 3 query heads per key/value head
    scores = grouped_scores(q, k)  # (2, 6, 5, 7)
    for i in range(6):
        expected = q[:, i] @ k[:, i // 3].transpose(-2, -1) / 8**0.5
        torch.testing.assert_close(scores[:, i], expected, rtol=0, atol=1e-12)


# --- bad input -----------------------------------------------------------------------------------

q4 = torch.zeros(1, 2, 5, 4)
k4 = torch.zeros(1, 2, 6, 4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: GroupedQueryAttention(8, 4, 3), ValueError, "num_kv_heads = 3 does not divide"),
        (lambda: GroupedQueryAttention(9, 4, 2), ValueError, "not divisible by num_heads"),
        (lambda: GroupedQueryAttention(8, 4, 0), ValueError, "num_kv_heads must be at least 1"),
        (lambda: GroupedQueryAttention(8, 4, 2, head_dim=0), ValueError, "head_dim must be at"),
        (lambda: GroupedQueryAttention(8, 2, 1)(torch.zeros(1, 3, 6)), ValueError, "C = 8"),
        (lambda: grouped_query_attention(q4, k4[:, :1, :, :3], k4[:, :1]), ValueError, "d_k = 4"),
        (
            lambda: grouped_query_attention(torch.zeros(1, 3, 5, 4), k4, k4),
            ValueError,
            "divisor of q's h = 3",
        ),
        (lambda: repeat_kv(k4, 0), ValueError, "groups must be at least 1"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
