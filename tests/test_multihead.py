"""Unit and property tests of `mha_lib.multihead` (notebook 03): the per-head loop equals the
vectorised form, masks, cross-attention, and both against `torch.nn.MultiheadAttention`."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mha_lib
from mha_lib import (
    causal_mask,
    multi_head_attention,
    multi_head_attention_loop,
    padding_mask,
)
from tests.numpy_inputs import naive_attention, weights

settings.register_profile("series", max_examples=60, deadline=None)
settings.load_profile("series")


# --- multi-head ------------------------------------------------------------------------


@given(
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_loop_equals_vectorised(B, N, h, d_k, d_v, seed):
    rng = np.random.default_rng(seed)
    C = 5
    X = rng.normal(size=(B, N, C))
    Ws = weights(rng, C, h, d_k, d_v)
    mask = rng.random((B, 1, N, N)) < 0.7
    a, wa = multi_head_attention(X, *Ws, h, mask=mask, return_weights=True)
    b, wb = multi_head_attention_loop(X, *Ws, h, mask=mask, return_weights=True)
    assert a.shape == (B, N, C) and wa.shape == (B, h, N, N)
    np.testing.assert_allclose(a, b, atol=1e-10)
    np.testing.assert_allclose(wa, wb, atol=1e-12)


def test_vectorised_blocks_agree_with_one_block(monkeypatch):
    """Working through blocks of query rows gives the same result as one big block."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(2, 37, 6))
    Ws = weights(rng, 6, 3, 2, 2)
    mask = causal_mask(37)
    whole = multi_head_attention(X, *Ws, 3, mask=mask)
    monkeypatch.setattr(mha_lib.multihead, "SCRATCH_BYTES", 2 * 3 * 37 * 8 * 5)  # 5 rows
    np.testing.assert_allclose(multi_head_attention(X, *Ws, 3, mask=mask), whole, atol=1e-12)


@given(st.integers(1, 7), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_one_head_is_single_head_attention(N, d, seed):
    rng = np.random.default_rng(seed)
    C = 4
    X = rng.normal(size=(N, C))
    W_q, W_k, W_v, W_o = weights(rng, C, 1, d, d)
    expected = naive_attention(X @ W_q, X @ W_k, X @ W_v) @ W_o
    np.testing.assert_allclose(multi_head_attention(X, W_q, W_k, W_v, W_o, 1), expected, atol=1e-9)


def test_multi_head_is_equivariant_to_token_order():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(7, 8))
    Ws = weights(rng, 8, 4, 2, 3)
    perm = rng.permutation(7)
    np.testing.assert_allclose(
        multi_head_attention(X[perm], *Ws, 4), multi_head_attention(X, *Ws, 4)[perm], atol=1e-10
    )


def test_textbook_example_shapes():
    """X (2, 3), W_q, W_k, W_v (3, 6), W_o (6, 3), two heads: the classic toy example."""
    rng = np.random.default_rng(42)
    X = rng.random((2, 3))
    W_q, W_k, W_v, W_o = (
        rng.random((3, 6)),
        rng.random((3, 6)),
        rng.random((3, 6)),
        rng.random((6, 3)),
    )
    out = multi_head_attention(X, W_q, W_k, W_v, W_o, 2)
    assert out.shape == (2, 3)
    heads = [
        naive_attention(X @ q, X @ k, X @ v)
        for q, k, v in zip(np.split(W_q, 2, 1), np.split(W_k, 2, 1), np.split(W_v, 2, 1))
    ]
    np.testing.assert_allclose(out, np.concatenate(heads, 1) @ W_o, atol=1e-12)


def test_causal_mask_blocks_the_future():
    m = causal_mask(4)
    assert m.dtype == bool and m.shape == (4, 4)
    np.testing.assert_array_equal(m, np.tril(np.ones((4, 4), bool)))
    rng = np.random.default_rng(6)
    X = rng.normal(size=(5, 4))
    Ws = weights(rng, 4, 2, 2, 2)
    _, w = multi_head_attention(X, *Ws, 2, mask=causal_mask(5), return_weights=True)
    assert np.all(np.triu(w, k=1) == 0)
    # changing the last token does not change the outputs of earlier tokens
    X2 = X.copy()
    X2[-1] += 10
    a = multi_head_attention(X, *Ws, 2, mask=causal_mask(5))
    b = multi_head_attention(X2, *Ws, 2, mask=causal_mask(5))
    np.testing.assert_allclose(a[:-1], b[:-1], atol=1e-12)


def test_padding_mask_and_fully_masked_sequence():
    m = padding_mask([3, 0], 4)
    assert m.shape == (2, 1, 1, 4)
    np.testing.assert_array_equal(m[:, 0, 0], [[1, 1, 1, 0], [0, 0, 0, 0]])
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2, 4, 6))
    Ws = weights(rng, 6, 3, 2, 2)
    out, w = multi_head_attention(X, *Ws, 3, mask=m, return_weights=True)
    assert np.all(w[0, :, :, 3] == 0)
    assert np.all(out[1] == 0) and np.all(w[1] == 0)  # nothing to attend to: zeros, not NaN
    # padding keys do not influence real tokens
    X2 = X.copy()
    X2[0, 3] = 99.0
    out2 = multi_head_attention(X2, *Ws, 3, mask=m)
    np.testing.assert_allclose(out2[0, :3], out[0, :3], atol=1e-12)


def test_against_torch_multihead_attention():
    """An independent reference: torch.nn.MultiheadAttention with the same weights, bias off."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    C, h, N, B = 16, 4, 9, 3
    ref = torch.nn.MultiheadAttention(C, h, bias=False, batch_first=True)
    X = torch.randn(B, N, C)
    causal = torch.triu(torch.ones(N, N, dtype=torch.bool), 1)  # torch: True = may NOT attend
    with torch.no_grad():
        expected, w_ref = ref(X, X, X, attn_mask=causal, average_attn_weights=False)
    W_q, W_k, W_v = (w.T.numpy() for w in ref.in_proj_weight.detach().chunk(3))  # (C, h*d_k)
    W_o = ref.out_proj.weight.detach().T.numpy()  # (h*d_v, C)
    out, w = multi_head_attention(
        X.numpy(), W_q, W_k, W_v, W_o, h, mask=causal_mask(N), return_weights=True
    )
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(w, w_ref.numpy(), atol=1e-5)


# --- cross-attention: queries from X (N, C), keys and values from X_kv (M, C_kv) ----------


def cross_weights(rng, C, C_kv, h, d_k, d_v):
    """Random W_q (C, h*d_k), W_k (C_kv, h*d_k), W_v (C_kv, h*d_v), W_o (h*d_v, C)."""
    return (
        rng.standard_normal((C, h * d_k)),
        rng.standard_normal((C_kv, h * d_k)),
        rng.standard_normal((C_kv, h * d_v)),
        rng.standard_normal((h * d_v, C)),
    )


def naive_cross(X, X_kv, W_q, W_k, W_v, W_o, h, mask=None):
    """The formula head by head, with X_kv on the key/value side; mask (N, M) or None."""
    heads = []
    for W_qh, W_kh, W_vh in zip(*(np.split(W, h, axis=1) for W in (W_q, W_k, W_v))):
        q, k, v = X @ W_qh, X_kv @ W_kh, X_kv @ W_vh  # (N, d_k), (M, d_k), (M, d_v)
        s = q @ k.T / np.sqrt(q.shape[-1])  # (N, M)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        heads.append((e / e.sum(axis=-1, keepdims=True)) @ v)  # (N, d_v)
    return np.concatenate(heads, axis=1) @ W_o  # (N, C)


@pytest.mark.parametrize("fn", [multi_head_attention, multi_head_attention_loop])
@given(
    st.integers(1, 6),
    st.integers(1, 7),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_cross_attention_matches_formula(fn, N, M, h, d_k, d_v, seed):
    rng = np.random.default_rng(seed)
    C, C_kv = 4, 7  # C_kv != C: the two sides need not have the same width
    X, X_kv = rng.normal(size=(N, C)), rng.normal(size=(M, C_kv))
    Ws = cross_weights(rng, C, C_kv, h, d_k, d_v)
    out, w = fn(X, *Ws, h, X_kv=X_kv, return_weights=True)
    assert out.shape == (N, C) and w.shape == (h, N, M)
    np.testing.assert_allclose(w.sum(-1), 1.0)
    np.testing.assert_allclose(out, naive_cross(X, X_kv, *Ws, h), atol=1e-10)


def test_cross_attention_batched_loop_equals_vectorised_with_mask():
    rng = np.random.default_rng(8)
    B, N, M, C, C_kv, h = 3, 5, 8, 6, 4, 2
    X, X_kv = rng.normal(size=(B, N, C)), rng.normal(size=(B, M, C_kv))
    Ws = cross_weights(rng, C, C_kv, h, 3, 2)
    keep = padding_mask([8, 5, 1], M)  # (B, 1, 1, M)
    a, wa = multi_head_attention(X, *Ws, h, mask=keep, return_weights=True, X_kv=X_kv)
    b, wb = multi_head_attention_loop(X, *Ws, h, mask=keep, return_weights=True, X_kv=X_kv)
    assert a.shape == (B, N, C) and wa.shape == (B, h, N, M)
    np.testing.assert_allclose(a, b, atol=1e-10)
    np.testing.assert_allclose(wa, wb, atol=1e-12)
    assert np.all(wa[1, :, :, 5:] == 0) and np.all(wa[2, :, :, 1:] == 0)
    for i in range(B):  # each sequence on its own, padded keys removed
        n_keys = [8, 5, 1][i]
        np.testing.assert_allclose(a[i], naive_cross(X[i], X_kv[i, :n_keys], *Ws, h), atol=1e-10)


def test_cross_attention_query_rows_are_independent():
    """Changing query row j changes output row j only; changing X_kv changes every row."""
    rng = np.random.default_rng(9)
    N, M, C, C_kv, h = 4, 6, 6, 5, 3
    X, X_kv = rng.normal(size=(N, C)), rng.normal(size=(M, C_kv))
    Ws = cross_weights(rng, C, C_kv, h, 2, 2)
    out = multi_head_attention(X, *Ws, h, X_kv=X_kv)
    X2 = X.copy()
    X2[2] += 1.0
    changed = np.abs(multi_head_attention(X2, *Ws, h, X_kv=X_kv) - out).max(axis=-1)  # (N,)
    assert changed[2] > 1e-3 and np.all(changed[[0, 1, 3]] == 0)
    X_kv2 = X_kv.copy()
    X_kv2[0] += 1.0
    assert np.all(np.abs(multi_head_attention(X, *Ws, h, X_kv=X_kv2) - out).max(-1) > 1e-6)


def test_cross_attention_with_x_kv_equal_to_x_is_self_attention():
    rng = np.random.default_rng(10)
    X = rng.normal(size=(2, 5, 6))
    Ws = weights(rng, 6, 2, 3, 3)
    mask = causal_mask(5)
    np.testing.assert_allclose(
        multi_head_attention(X, *Ws, 2, mask=mask, X_kv=X),
        multi_head_attention(X, *Ws, 2, mask=mask),
        atol=0,
    )


def test_cross_attention_against_torch_with_kdim_vdim():
    """torch.nn.MultiheadAttention(kdim=C_kv, vdim=C_kv), bias off: the same numbers."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    C, C_kv, h, N, M, B = 12, 7, 3, 5, 9, 2
    ref = torch.nn.MultiheadAttention(C, h, bias=False, kdim=C_kv, vdim=C_kv, batch_first=True)
    X, X_kv = torch.randn(B, N, C), torch.randn(B, M, C_kv)
    lengths = torch.tensor([9, 4])
    pad = torch.arange(M)[None, :] >= lengths[:, None]  # (B, M), torch: True = may NOT attend
    with torch.no_grad():
        expected, w_ref = ref(X, X_kv, X_kv, key_padding_mask=pad, average_attn_weights=False)
    W_q = ref.q_proj_weight.detach().T.numpy()  # (C, h*d_k)
    W_k = ref.k_proj_weight.detach().T.numpy()  # (C_kv, h*d_k)
    W_v = ref.v_proj_weight.detach().T.numpy()  # (C_kv, h*d_v)
    W_o = ref.out_proj.weight.detach().T.numpy()  # (h*d_v, C)
    keep = padding_mask(lengths.numpy(), M)  # (B, 1, 1, M), numpy: True = may attend
    for fn in (multi_head_attention, multi_head_attention_loop):
        out, w = fn(
            X.numpy(), W_q, W_k, W_v, W_o, h, mask=keep, return_weights=True, X_kv=X_kv.numpy()
        )
        assert out.shape == (B, N, C) and w.shape == (B, h, N, M)
        np.testing.assert_allclose(out, expected.numpy(), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(w, w_ref.numpy(), atol=1e-5)
