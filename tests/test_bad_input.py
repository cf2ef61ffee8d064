"""Bad input gets a clear error that names the argument, the shape it got and the shape it needs."""

import numpy as np
import pytest

from mha_lib import (
    causal_mask,
    multi_head_attention,
    multi_head_attention_loop,
    padding_mask,
    scaled_dot_product_attention,
    self_attention,
    softmax,
)

rng = np.random.default_rng(0)
C, h, d_k, d_v, N = 6, 2, 3, 3, 5
X = rng.normal(size=(N, C))
W_q, W_k = rng.normal(size=(C, h * d_k)), rng.normal(size=(C, h * d_k))
W_v, W_o = rng.normal(size=(C, h * d_v)), rng.normal(size=(h * d_v, C))
q, k, v = rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))

MHA_CASES = [
    # (kwargs overriding the good ones, exception, regex the message must match)
    (
        {"X": rng.normal(size=(C,))},
        ValueError,
        r"X has shape \(6,\); expected \(N, C\) or \(B, N, C\)",
    ),
    ({"X": rng.normal(size=(1, 2, N, C))}, ValueError, r"X has shape \(1, 2, 5, 6\); expected"),
    (
        {"W_q": rng.normal(size=(C + 1, h * d_k))},
        ValueError,
        r"W_q has shape \(7, 6\); expected \(C, h\*d_k\) with C = 6 from X",
    ),
    (
        {"W_k": rng.normal(size=(h * d_k,))},
        ValueError,
        r"W_k has shape \(6,\); expected \(C, h\*d_k\)",
    ),
    (
        {"W_v": rng.normal(size=(C - 1, h * d_v))},
        ValueError,
        r"W_v has shape \(5, 6\); expected \(C, h\*d_v\)",
    ),
    (
        {"W_k": rng.normal(size=(C, 4))},
        ValueError,
        r"W_k has shape \(6, 4\); expected \(6, 6\), the shape of W_q",
    ),
    (
        {"W_o": rng.normal(size=(h * d_v + 1, C))},
        ValueError,
        r"W_o has shape \(7, 6\); expected \(h\*d_v, C\) with h\*d_v = 6",
    ),
    # X with its tokens as columns: the weights agree with each other, so X is named (00, cell 9)
    (
        {"X": X.T},
        ValueError,
        r"X has shape \(6, 5\); expected \(N, C\), one token per row: W_q, W_k, W_v and W_o "
        r"are for 6 features, and X has 6 rows, so X looks transposed .*: pass X\.T$",
    ),
    (
        {"X": X[None].transpose(0, 2, 1)},
        ValueError,
        r"X has shape \(1, 6, 5\); expected \(B, N, C\), .*: pass X\.transpose\(0, 2, 1\)$",
    ),
    # ... but a W_q whose rows happen to equal N is still W_q's fault
    (
        {"W_q": rng.normal(size=(N, h * d_k))},
        ValueError,
        r"W_q has shape \(5, 6\); expected \(C, h\*d_k\) with C = 6 from X",
    ),
    ({"num_heads": 4}, ValueError, r"num_heads = 4 does not divide the width of W_q, 6"),
    ({"num_heads": 0}, ValueError, r"num_heads must be at least 1; got 0"),
    ({"num_heads": 2.0}, TypeError, r"num_heads must be an int; got float"),
    ({"mask": np.ones((N, N))}, TypeError, r"mask must be a boolean array .* got dtype float64"),
    (
        {"mask": np.ones((N, N + 1), bool)},
        ValueError,
        r"mask has shape \(5, 6\); expected a shape that broadcasts to \(2, 5, 5\)",
    ),
    (
        {"mask": np.ones((3, N, N), bool)},
        ValueError,
        r"mask has shape \(3, 5, 5\); expected .* \(2, 5, 5\)",
    ),
    ({"X": np.array([["a"] * C] * N)}, TypeError, r"X must hold real numbers; got dtype <U1"),
    (
        {"W_o": np.ones((h * d_v, C), dtype=complex)},
        TypeError,
        r"W_o must hold real numbers; got dtype complex128",
    ),
]


@pytest.mark.parametrize("fn", [multi_head_attention, multi_head_attention_loop])
@pytest.mark.parametrize(("override", "exc", "match"), MHA_CASES)
def test_multi_head_attention_rejects(fn, override, exc, match):
    args = {"X": X, "W_q": W_q, "W_k": W_k, "W_v": W_v, "W_o": W_o, "num_heads": h} | override
    with pytest.raises(exc, match=match):
        fn(**args)


def test_batched_mask_with_wrong_batch_size():
    Xb = rng.normal(size=(3, N, C))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 1, 5, 5\); .* \(3, 2, 5, 5\)"):
        multi_head_attention(Xb, W_q, W_k, W_v, W_o, h, mask=np.ones((2, 1, N, N), bool))


C_kv, M = 4, 7
X_kv = rng.normal(size=(M, C_kv))
W_k_x, W_v_x = rng.normal(size=(C_kv, h * d_k)), rng.normal(size=(C_kv, h * d_v))

CROSS_CASES = [
    # cross-attention: X (N, C) = (5, 6) queries, X_kv (M, C_kv) = (7, 4) keys and values
    (
        {"X_kv": rng.normal(size=(2, M, C_kv))},
        ValueError,
        r"X_kv has shape \(2, 7, 4\); expected \(M, C_kv\), unbatched like X of shape \(5, 6\)",
    ),
    (
        {"X_kv": rng.normal(size=(C_kv,))},
        ValueError,
        r"X_kv has shape \(4,\); expected \(M, C_kv\)",
    ),
    (
        {"X_kv": X_kv.T},
        ValueError,
        r"X_kv has shape \(4, 7\); expected \(M, C_kv\), one token per row: W_k and W_v are "
        r"for 4 features, and X_kv has 4 rows, so X_kv looks transposed .*: pass X_kv\.T$",
    ),
    (
        {"X": X.T},
        ValueError,
        r"X has shape \(6, 5\); expected \(N, C\), one token per row: W_q and W_o are for 6 ",
    ),
    (
        {"W_k": W_k},
        ValueError,
        r"W_k has shape \(6, 6\); expected \(C_kv, h\*d_k\) with C_kv = 4 from X_kv",
    ),
    (
        {"W_v": W_v},
        ValueError,
        r"W_v has shape \(6, 6\); expected \(C_kv, h\*d_v\) with C_kv = 4 from X_kv",
    ),
    (
        {"W_q": rng.normal(size=(C_kv, h * d_k))},
        ValueError,
        r"W_q has shape \(4, 6\); expected \(C, h\*d_k\) with C = 6 from X",
    ),
    (
        {"W_k": rng.normal(size=(C_kv, 4))},
        ValueError,
        r"W_k has shape \(4, 4\); expected \(4, 6\), \(C_kv, h\*d_k\) with h\*d_k = 6 from W_q",
    ),
    (
        {"mask": np.ones((N, N), bool)},
        ValueError,
        r"mask has shape \(5, 5\); expected a shape that broadcasts to \(2, 5, 7\) \(h, N, M\)",
    ),
    (
        {"X_kv": np.ones((M, C_kv), dtype=complex)},
        TypeError,
        r"X_kv must hold real numbers; got dtype complex128",
    ),
]


@pytest.mark.parametrize("fn", [multi_head_attention, multi_head_attention_loop])
@pytest.mark.parametrize(("override", "exc", "match"), CROSS_CASES)
def test_cross_attention_rejects(fn, override, exc, match):
    args = {
        "X": X,
        "W_q": W_q,
        "W_k": W_k_x,
        "W_v": W_v_x,
        "W_o": W_o,
        "num_heads": h,
        "X_kv": X_kv,
    } | override
    with pytest.raises(exc, match=match):
        fn(**args)


def test_cross_attention_batched_x_kv_needs_the_batch_of_x():
    Xb = rng.normal(size=(3, N, C))
    for bad in (rng.normal(size=(2, M, C_kv)), rng.normal(size=(M, C_kv))):
        with pytest.raises(
            ValueError, match=r"X_kv has shape .*; expected \(B, M, C_kv\) with B = 3"
        ):
            multi_head_attention(Xb, W_q, W_k_x, W_v_x, W_o, h, X_kv=bad)
    with pytest.raises(ValueError, match=r"mask has shape \(3, 1, 5, 5\); .* \(3, 2, 5, 7\)"):
        multi_head_attention(
            Xb,
            W_q,
            W_k_x,
            W_v_x,
            W_o,
            h,
            X_kv=rng.normal(size=(3, M, C_kv)),
            mask=np.ones((3, 1, N, N), bool),
        )


SDPA_CASES = [
    ((q[0], k, v), ValueError, r"q has shape \(3,\); expected \(\.\.\., N, d_k\)"),
    ((q, k[:, :2], v), ValueError, r"k has shape \(5, 2\); expected \(\.\.\., M, d_k\)"),
    ((q, k, v[:4]), ValueError, r"v has shape \(4, 2\); expected \(\.\.\., M, d_v\)"),
    (
        (q[None], k, v),
        ValueError,
        r"k has shape \(5, 3\); expected .* to match q of shape \(1, 4, 3\)",
    ),
    ((q, k, v, np.ones((4, 5), int)), TypeError, r"mask must be a boolean array"),
    (
        (q, k, v, np.ones((5, 4), bool)),
        ValueError,
        r"mask has shape \(5, 4\); expected .* \(4, 5\) \(\.\.\., N, M\)",
    ),
    ((q, k, v, np.ones((2, 4, 5), bool)), ValueError, r"mask has shape \(2, 4, 5\)"),
    ((q, k, [[None, 1]] * 5), TypeError, r"v must hold real numbers; got dtype object"),
]


@pytest.mark.parametrize(("args", "exc", "match"), SDPA_CASES)
def test_scaled_dot_product_attention_rejects(args, exc, match):
    with pytest.raises(exc, match=match):
        scaled_dot_product_attention(*args)


def test_other_functions_reject_bad_input():
    with pytest.raises(ValueError, match=r"X has shape \(4,\); expected \(N, C\)"):
        self_attention(np.ones(4))
    with pytest.raises(TypeError, match=r"x must hold real numbers; got dtype bool"):
        softmax(np.ones(3, bool))
    with pytest.raises(ValueError, match=r"x has shape \(\)"):
        softmax(1.0)
    with pytest.raises(TypeError, match=r"N must be an int; got float"):
        causal_mask(3.0)
    with pytest.raises(ValueError, match=r"N must be at least 1; got 0"):
        causal_mask(0)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, M\] with M = 4; got \[5\]"):
        padding_mask([5], 4)
    with pytest.raises(TypeError, match=r"lengths must be a 1-D array of ints"):
        padding_mask([[1, 2]], 4)
