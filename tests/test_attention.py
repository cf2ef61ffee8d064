"""Unit and property tests of `mha_lib.attention` (notebooks 01-02): softmax, scaled dot-product
attention, unweighted self-attention; and `import mha_lib` stays numpy-only."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_lib import (
    multi_head_attention,
    multi_head_attention_loop,
    scaled_dot_product_attention,
    self_attention,
    softmax,
)
from tests.numpy_inputs import naive_attention, weights

settings.register_profile("series", max_examples=60, deadline=None)
settings.load_profile("series")


# --- softmax ---------------------------------------------------------------------------


def test_softmax_known_values():
    p = softmax(np.array([0.0, np.log(3.0)]))
    np.testing.assert_allclose(p, [0.25, 0.75])


@given(
    st.integers(1, 6),
    st.integers(1, 8),
    st.floats(-50, 50),
    st.integers(0, 2**32 - 1),
)
def test_softmax_rows_sum_to_one_and_shift_invariant(rows, cols, shift, seed):
    x = np.random.default_rng(seed).normal(scale=10, size=(rows, cols))
    p = softmax(x)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    assert np.all(p >= 0)
    np.testing.assert_allclose(softmax(x + shift), p, atol=1e-12)


def test_softmax_float32_large_logits_do_not_overflow():
    x = np.array([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4]], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise"):
        p = softmax(x)
    assert p.dtype == np.float32
    np.testing.assert_allclose(p, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)


def test_softmax_other_axis():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(softmax(x, axis=0), softmax(x.T).T)


def test_softmax_fully_masked_row_is_zero_not_nan():
    p = softmax(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]))
    np.testing.assert_array_equal(p, [[0.0, 0.0], [1.0, 0.0]])


# --- scaled dot-product attention ------------------------------------------------------------


def test_sdpa_matches_formula_and_shapes():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 7, 4)), rng.normal(size=(2, 7, 3))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 5, 3) and w.shape == (2, 5, 7)
    np.testing.assert_allclose(out, naive_attention(q, k, v), atol=1e-12)
    np.testing.assert_allclose(w.sum(-1), 1.0)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_masked_positions_get_zero_weight(N, M, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(N, 3)), rng.normal(size=(M, 3)), rng.normal(size=(M, 2))
    mask = rng.random((N, M)) < 0.5
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert np.all(w[~mask] == 0)
    has_key = mask.any(-1)
    np.testing.assert_allclose(w[has_key].sum(-1), 1.0)
    # the documented rule for a row with nothing to attend to: zero weights, zero output
    assert np.all(w[~has_key] == 0) and np.all(out[~has_key] == 0)
    assert not np.isnan(out).any()


def test_masked_keys_do_not_change_the_output():
    """Blocking a key is the same as deleting it."""
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    mask = np.array([True, True, False, True, False, True])
    out, _ = scaled_dot_product_attention(q, k, v, mask)  # (6,) broadcasts to (4, 6)
    np.testing.assert_allclose(out, naive_attention(q, k[mask], v[mask]), atol=1e-12)


def test_float32_in_float32_out_and_float64_works():
    rng = np.random.default_rng(2)
    x32 = rng.normal(size=(5, 8)).astype(np.float32)
    out, w = scaled_dot_product_attention(x32, x32, x32)
    assert out.dtype == np.float32 and w.dtype == np.float32
    out64, _ = scaled_dot_product_attention(x32.astype(np.float64), x32, x32)
    assert out64.dtype == np.float64
    np.testing.assert_allclose(out, out64, rtol=1e-5, atol=1e-6)
    assert self_attention(x32)[0].dtype == np.float32
    Ws = weights(rng, 8, 2, 4, 4, np.float32)
    assert multi_head_attention(x32, *Ws, 2).dtype == np.float32
    assert multi_head_attention_loop(x32, *Ws, 2).dtype == np.float32


def test_float32_large_inputs_stay_finite():
    x = np.full((4, 16), 100.0, dtype=np.float32)
    x[0] = -100.0
    out, w = self_attention(x)  # scores of ±1e4 after scaling
    assert np.isfinite(out).all() and np.isfinite(w).all()


def test_integer_input_is_promoted_to_float():
    out, _ = self_attention([[1, 0], [0, 1]])
    assert out.dtype == np.float64


# --- self-attention ----------------------------------------------------------------------


def test_self_attention_is_the_unweighted_formula():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 5))
    out, w = self_attention(X)
    np.testing.assert_allclose(out, naive_attention(X, X, X), atol=1e-12)
    assert w.shape == (6, 6)
    np.testing.assert_allclose(w.sum(-1), 1.0)


@given(st.integers(2, 8), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_self_attention_is_permutation_equivariant(N, C, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, C))
    perm = rng.permutation(N)
    out, w = self_attention(X)
    out_p, w_p = self_attention(X[perm])
    np.testing.assert_allclose(out_p, out[perm], atol=1e-10)
    np.testing.assert_allclose(w_p, w[np.ix_(perm, perm)], atol=1e-12)


@given(st.integers(2, 8), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_raw_self_attention_score_bound(N, C, seed):
    """S_ij <= max(S_ii, S_jj) for S = X Xᵀ (the statement notebook 01 proves)."""
    X = np.random.default_rng(seed).normal(scale=3, size=(N, C))
    S = X @ X.T
    d = np.diag(S)
    assert np.all(S <= np.maximum(d[:, None], d[None, :]) + 1e-9)


def test_import_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, mha_lib, mha_lib.exercises; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
