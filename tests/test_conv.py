"""attention_conv2d: a k×k convolution computed by k² attention heads (mha_lib.conv)."""

import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mha_lib.conv import (
    KAPPA,
    attention_conv2d,
    conv_weight_to_attention,
    grid_positions,
    kernel_shifts,
    macs_attention,
    macs_construction,
    macs_conv,
    relative_position_scores,
)

matplotlib.use("Agg")

TOL = {torch.float32: 1e-4, torch.float64: 1e-8}  # the tolerances in the docstring


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max |out − ref| / max |ref|, the error measure of attention_conv2d's docstring."""
    return ((out - ref).abs().max() / ref.abs().max()).item()


def random_conv(seed, B, C_in, C_out, k, H, W, dtype):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(B, C_in, H, W, generator=gen, dtype=dtype)
    weight = torch.randn(C_out, C_in, k, k, generator=gen, dtype=dtype)
    bias = torch.randn(C_out, generator=gen, dtype=dtype)
    return x, weight, bias


# Sizes stay small: the scores hold k²·(H·W)·(H+2r)(W+2r) numbers per image
# (k = 5, 9×6: 25·54·130 ≈ 0.18 M, under 2 MB in float64).
CASES = [
    # (B, C_in, C_out, k, H, W)
    (1, 1, 1, 1, 1, 1),
    (2, 3, 4, 1, 5, 4),
    (1, 1, 1, 3, 1, 1),
    (2, 3, 4, 3, 6, 5),
    (1, 2, 5, 3, 1, 7),
    (3, 4, 2, 3, 8, 3),
    (1, 2, 3, 5, 1, 1),
    (2, 3, 2, 5, 9, 6),
    (1, 1, 3, 5, 4, 7),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("B", "C_in", "C_out", "k", "H", "W"), CASES)
def test_equals_conv2d_with_zero_padding(B, C_in, C_out, k, H, W, dtype):
    x, weight, bias = random_conv(H * 100 + W * 10 + k, B, C_in, C_out, k, H, W, dtype)
    ref = F.conv2d(x, weight, bias, padding=k // 2)  # (B, C_out, H, W)
    out = attention_conv2d(x, weight, bias)
    assert out.shape == ref.shape == (B, C_out, H, W)
    assert out.dtype == dtype
    assert rel_error(out, ref) <= TOL[dtype]
    out_nobias = attention_conv2d(x, weight)
    assert rel_error(out_nobias, F.conv2d(x, weight, padding=k // 2)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_default_kappa_meets_the_tolerance_with_margin(dtype):
    x, weight, bias = random_conv(0, 2, 3, 3, 3, 7, 6, dtype)
    ref = F.conv2d(x, weight, bias, padding=1)
    assert KAPPA == 40.0
    err = rel_error(attention_conv2d(x, weight, bias), ref)
    assert err <= TOL[dtype] / 100  # rounding only: ~1e-7 (float32), ~1e-16 (float64)


def test_error_falls_like_exp_minus_kappa():
    x, weight, bias = random_conv(1, 1, 2, 3, 3, 6, 6, torch.float64)
    ref = F.conv2d(x, weight, bias, padding=1)
    kappas = np.arange(4.0, 15.0)
    errs = np.array([rel_error(attention_conv2d(x, weight, bias, kappa=a), ref) for a in kappas])
    assert np.all(np.diff(errs) < 0)
    slope = np.polyfit(kappas, np.log(errs), 1)[0]
    assert abs(slope + 1) < 0.1
    # too small an kappa misses both tolerances
    assert rel_error(attention_conv2d(x, weight, bias, kappa=5.0), ref) > 1e-3


def test_without_padding_the_border_is_wrong_at_every_kappa():
    x, weight, _ = random_conv(2, 1, 2, 3, 3, 6, 7, torch.float64)
    ref = F.conv2d(x, weight, padding=1)  # (1, 3, 6, 7)
    for kappa in (KAPPA, 1000.0):
        out = attention_conv2d(x, weight, kappa=kappa, pad=False)
        err = (out - ref).abs().amax(dim=(0, 1))  # (H, W)
        assert torch.all(err[1:-1, 1:-1] < 1e-12)  # interior pixels: right
        border = torch.ones_like(err, dtype=torch.bool)
        border[1:-1, 1:-1] = False
        assert torch.all(err[border] > 1e-3)  # every border pixel: wrong
        # the nearest pixel inside is the clamped position: replicate padding
        rep = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), weight)
        assert rel_error(out, rep) < 1e-12


def test_projections_carry_the_kernel():
    C_out, C_in, k = 3, 2, 3
    weight = torch.randn(C_out, C_in, k, k, dtype=torch.float64)
    W_v, W_o = conv_weight_to_attention(weight)
    h, d_v = k * k, C_out
    assert W_v.shape == (C_in, h * d_v) and W_o.shape == (h * d_v, C_out)
    for i in range(k):
        for j in range(k):
            head = i * k + j
            W_vh = W_v[:, head * d_v : (head + 1) * d_v]  # (C_in, d_v)
            W_oh = W_o[head * d_v : (head + 1) * d_v]  # (d_v, C_out)
            torch.testing.assert_close(W_vh @ W_oh, weight[:, :, i, j].T)


def test_shifts_positions_and_scores():
    assert kernel_shifts(1).tolist() == [[0, 0]]
    s3 = kernel_shifts(3)
    assert s3.shape == (9, 2)
    assert s3[0].tolist() == [-1, -1] and s3[1].tolist() == [-1, 0] and s3[5].tolist() == [0, 1]
    pos = grid_positions(2, 3)
    assert pos.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert grid_positions(1, 1, offset=2).tolist() == [[-2, -2]]
    S = relative_position_scores(pos, pos, torch.tensor([[0, 1]]), kappa=2.0)  # (1, 6, 6)
    assert S.shape == (1, 6, 6)
    # query (0, 0) with shift (0, 1): peak 0 at key (0, 1); key (1, 1) is 1 unit² away
    assert S[0, 0, 1] == 0.0 and S[0, 0, 4] == -2.0 and S[0, 0, 0] == -2.0
    assert S[0, 0, 5] == -2.0 * (1 + 1)


def test_gradients_flow_like_conv2d():
    x, weight, bias = random_conv(3, 1, 2, 2, 3, 4, 5, torch.float64)
    for t in (x, weight, bias):
        t.requires_grad_(True)
    attention_conv2d(x, weight, bias).square().sum().backward()
    grads = [t.grad.clone() for t in (x, weight, bias)]
    for t in (x, weight, bias):
        t.grad = None
    F.conv2d(x, weight, bias, padding=1).square().sum().backward()
    for g, t in zip(grads, (x, weight, bias)):
        torch.testing.assert_close(g, t.grad, rtol=1e-8, atol=1e-10)


# --- bad input ---------------------------------------------------------------------------------

x0 = torch.zeros(2, 3, 5, 4)
w0 = torch.zeros(4, 3, 3, 3)


@pytest.mark.parametrize(
    ("kwargs", "error", "phrases"),
    [
        ({"x": np.zeros((2, 3, 5, 4))}, TypeError, ["x must be a torch.Tensor", "ndarray"]),
        ({"x": torch.zeros(2, 3, 5, 4, dtype=torch.int64)}, TypeError, ["x", "torch.int64"]),
        ({"x": torch.zeros(3, 5, 4)}, ValueError, ["x has shape (3, 5, 4)", "(B, C_in, H, W)"]),
        ({"x": torch.zeros(2, 3, 0, 4)}, ValueError, ["x has shape (2, 3, 0, 4)", "at least 1"]),
        ({"weight": [[1.0]]}, TypeError, ["weight must be a torch.Tensor", "list"]),
        (
            {"weight": torch.zeros(4, 3, 3, 3, dtype=torch.int32)},
            TypeError,
            ["weight", "torch.int32"],
        ),
        (
            {"weight": torch.zeros(4, 3, 2, 2)},
            ValueError,
            ["weight has shape (4, 3, 2, 2)", "odd kernel size", "k = 2"],
        ),
        (
            {"weight": torch.zeros(4, 3, 3, 5)},
            ValueError,
            ["weight has shape (4, 3, 3, 5)", "(C_out, C_in, k, k)", "square"],
        ),
        (
            {"weight": torch.zeros(4, 3, 3)},
            ValueError,
            ["weight has shape (4, 3, 3)", "(C_out, C_in, k, k)"],
        ),
        (
            {"weight": torch.zeros(4, 2, 3, 3)},
            ValueError,
            ["weight has shape (4, 2, 3, 3)", "C_in = 3", "x of shape (2, 3, 5, 4)"],
        ),
        (
            {"weight": torch.zeros(4, 3, 3, 3, dtype=torch.float64)},
            TypeError,
            ["weight has dtype torch.float64", "x has dtype torch.float32"],
        ),
        ({"bias": torch.zeros(5)}, ValueError, ["bias has shape (5,)", "(C_out,) = (4,)"]),
        ({"bias": torch.zeros(1, 4)}, ValueError, ["bias has shape (1, 4)", "(C_out,) = (4,)"]),
        ({"bias": np.zeros(4)}, TypeError, ["bias must be a torch.Tensor", "ndarray"]),
        (
            {"bias": torch.zeros(4, dtype=torch.float64)},
            TypeError,
            ["bias has dtype torch.float64", "x has dtype torch.float32"],
        ),
        ({"kappa": "40"}, TypeError, ["kappa must be a real number", "str"]),
        ({"kappa": True}, TypeError, ["kappa must be a real number", "bool"]),
        ({"kappa": 0.0}, ValueError, ["kappa must be positive and finite", "0.0"]),
        ({"kappa": -1}, ValueError, ["kappa must be positive and finite", "-1"]),
        ({"kappa": math.inf}, ValueError, ["kappa must be positive and finite", "inf"]),
        ({"kappa": math.nan}, ValueError, ["kappa must be positive and finite", "nan"]),
        ({"pad": 1}, TypeError, ["pad must be True or False", "int"]),
    ],
)
def test_bad_input_names_the_argument_and_shapes(kwargs, error, phrases):
    args = {"x": x0, "weight": w0, "bias": None, "kappa": KAPPA, "pad": True} | kwargs
    with pytest.raises(error) as info:
        attention_conv2d(**args)
    for phrase in phrases:
        assert phrase in str(info.value), (phrase, str(info.value))


def test_never_nan_even_for_huge_kappa():
    x, weight, bias = random_conv(4, 1, 2, 2, 3, 5, 5, torch.float32)
    out = attention_conv2d(x, weight, bias, kappa=1e30)
    assert torch.isfinite(out).all()
    assert rel_error(out, F.conv2d(x, weight, bias, padding=1)) <= TOL[torch.float32]


def test_plot_pixel_heads_draws_one_map_per_head():
    import matplotlib.pyplot as plt

    from mha_lib.plot import plot_pixel_heads

    maps = np.random.default_rng(0).random((9, 5, 6))
    fig = plot_pixel_heads(maps, query=(2, 3), image_box=(1, 1, 3, 4))
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 9
    assert list(images[0].get_xticks()) == list(range(6))  # the axes count pixels
    assert images[0].get_ylabel() == "row" and images[-1].get_xlabel() == "column"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"W has shape \(5, 6\)"):
        plot_pixel_heads(maps[0])


@pytest.mark.parametrize(
    "side, C, k, heads", [(8, 16, 3, 4), (16, 16, 3, 4), (5, 6, 3, 3), (7, 4, 5, 2)]
)
def test_cost_formulas_equal_torchs_flop_count(side, C, k, heads):
    # notebook 07 §6's three formulas, against the matrix products torch actually runs
    # (FlopCounterMode counts 2 FLOPs per multiply-add); not run in the notebook, since
    # importing it brings torch's compiler into the kernel
    from torch.utils.flop_counter import FlopCounterMode

    from mha_lib.pytorch import MultiHeadAttention

    def flops(fn):
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()

    torch.manual_seed(0)
    img = torch.randn(1, C, side, side)  # (1, C, H, W)
    w = torch.randn(C, C, k, k)
    tokens = img.flatten(2).transpose(1, 2)  # (1, N, C)
    mha = MultiHeadAttention(C, heads, bias=False, batch_first=True)
    assert flops(lambda: F.conv2d(img, w, padding=k // 2)) == 2 * macs_conv(side, C, k)
    assert flops(lambda: mha(tokens, need_weights=True)) == 2 * macs_attention(side, C, heads)
    assert flops(lambda: attention_conv2d(img, w)) == 2 * macs_construction(side, C, k)
