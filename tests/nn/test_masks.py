"""mha_lib.nn.masks: the mask zoo as boolean masks, as SDPA masks and as FlexAttention
mask_mods and score_mods, ALiBi's slopes, and the test that catches an inverted mask."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mha_lib
from mha_lib.nn import (
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    bottom_right_causal_mask,
    bottom_right_causal_mask_mod,
    causal_mask_mod,
    document_mask,
    document_mask_mod,
    flash_attention,
    leaks_future,
    mask_from_mask_mod,
    prefix_lm_mask,
    prefix_lm_mask_mod,
    sliding_window_mask,
    sliding_window_mask_mod,
)
from mha_lib.nn.masks import (
    bottom_right_causal_tensor,
    bottom_right_window_mask_mod,
    bottom_right_window_tensor,
    softcap_score_mod,
)
from mha_lib.testing import assert_close
from tests.nn.nn_inputs import qkv, randn

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


def test_the_torch_mask_is_the_numpy_one_and_puts_the_queries_last():
    assert bottom_right_causal_tensor(2, 4).tolist() == [[True, True, True, False], [True] * 4]
    for n, m in ((1, 1), (3, 7), (5, 5)):
        mask = bottom_right_causal_tensor(n, m)
        assert mask.dtype == torch.bool
        assert np.array_equal(mask.numpy(), bottom_right_causal_mask(n, m))


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


# --- a sliding layer's window and Gemma 2's soft cap (notebook 15) -------------------------------


@pytest.mark.parametrize(("n", "m", "window"), [(9, 9, 4), (3, 11, 5), (1, 9, 9), (4, 6, 1)])
def test_the_bottom_right_window_is_the_window_for_the_last_n_queries(n, m, window):
    mask = bottom_right_window_tensor(n, m, window)  # (n, m)
    assert torch.equal(mask, torch.from_numpy(sliding_window_mask(m, window))[m - n :])
    assert torch.equal(mask, mask_from_mask_mod(bottom_right_window_mask_mod(n, m, window), n, m))
    assert (mask.sum(-1) <= window).all() and mask[:, -1].tolist() == [False] * (n - 1) + [True]


def test_the_soft_cap_keeps_small_scores_and_bounds_large_ones():
    cap = softcap_score_mod(5.0)
    s = torch.tensor([-1e4, -5.0, -0.01, 0.0, 0.01, 5.0, 1e4], dtype=torch.float64)
    zero = torch.tensor(0)
    capped = cap(s, zero, zero, zero, zero)
    assert (capped.abs() <= 5.0).all() and float(capped[-1]) == 5.0  # never beyond ±cap
    assert_close(capped[2:5], s[2:5], rtol=1e-5, atol=0)  # near 0, nearly the identity
    assert_close(capped, 5.0 * torch.tanh(s / 5.0), rtol=0, atol=0)
    assert torch.equal(capped.argsort(), s.argsort())  # the order of the scores is kept


# --- bad input -----------------------------------------------------------------------------------

q4 = torch.zeros(1, 2, 5, 4)
k4 = torch.zeros(1, 2, 6, 4)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: bottom_right_causal_mask_mod(5, 3), ValueError, "expected n <= m"),
        (lambda: bottom_right_causal_mask(5, 3), ValueError, "expected n <= m"),
        (lambda: sliding_window_mask(5, 0), ValueError, "window must be at least 1"),
        (lambda: prefix_lm_mask(5, 6), ValueError, "prefix_len must lie in [0, N]"),
        (lambda: document_mask([0.5, 1.0]), TypeError, "doc_ids must be"),
        (lambda: alibi_slopes(0), ValueError, "num_heads must be at least 1"),
        (lambda: leaks_future(lambda x: x, torch.zeros(3, 4)), ValueError, "expected (B, N, C)"),
        (lambda: bottom_right_window_tensor(4, 6, 0), ValueError, "window must be at least 1"),
        (lambda: softcap_score_mod(0), ValueError, "cap = 0; expected a positive number"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
