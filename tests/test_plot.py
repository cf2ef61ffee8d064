"""Tests of the heatmap helpers in `mha_lib.plot`: masks, colour limits, colour bar labels."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from mha_lib import causal_mask, softmax
from mha_lib.plot import plot_attention, plot_heads


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def hatched(ax):
    """The hatched rectangles drawn for blocked cells."""
    return [p for p in ax.patches if p.get_hatch()]


def colorbar_of(ax):
    return ax.images[0].colorbar


def test_defaults_are_unchanged_fixed_scale_no_hatching():
    A = softmax(np.random.default_rng(0).normal(size=(5, 5)))
    ax = plot_attention(A, list("abcde"))
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert hatched(ax) == []
    assert colorbar_of(ax).ax.get_ylabel() == "weight"
    assert len(ax.texts) == 25  # small matrix: every value written in its cell


def test_mask_hatches_exactly_the_blocked_cells_and_writes_no_number_there():
    N = 5
    mask = causal_mask(N)  # True = may attend
    A = np.where(mask, 1.0, 0.0) / mask.sum(axis=1, keepdims=True)
    ax = plot_attention(A, list("abcde"), mask=mask)
    patches = hatched(ax)
    assert len(patches) == (~mask).sum() == 10
    corners = {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in patches}  # (col, row)
    assert corners == {(j, i) for i, j in zip(*np.nonzero(~mask))}
    assert len(ax.texts) == mask.sum()  # numbers only in the allowed cells
    assert "hatched grey = masked" in colorbar_of(ax).ax.get_ylabel()


def test_colour_limits_follow_the_data_when_asked_and_ignore_masked_cells():
    rng = np.random.default_rng(1)
    A = 0.06 + 0.06 * rng.random((6, 6))  # weights between 0.06 and 0.12
    ax = plot_attention(A, vmin=None, vmax=None)
    lo, hi = ax.images[0].get_clim()
    assert (lo, hi) == (A.min(), A.max())
    label = colorbar_of(ax).ax.get_ylabel()
    assert label == f"weight\n(colour scaled to data: {A.min():.2f}–{A.max():.2f})"
    mask = np.ones((6, 6), bool)
    mask[:, 0] = False
    A_masked = A.copy()
    A_masked[:, 0] = 0.0  # a blocked weight is 0 but must not stretch the scale
    ax2 = plot_attention(A_masked, vmin=None, vmax=None, mask=mask)
    assert ax2.images[0].get_clim() == (A[:, 1:].min(), A[:, 1:].max())


def test_scores_label_and_one_sided_scaling():
    S = np.arange(9.0).reshape(3, 3) - 4
    ax = plot_attention(S, vmin=None, vmax=None, label="score")
    assert ax.images[0].get_clim() == (-4.0, 4.0)
    assert colorbar_of(ax).ax.get_ylabel().startswith("score\n(colour scaled to data")
    ax2 = plot_attention(S, vmin=0.0, vmax=None)
    assert ax2.images[0].get_clim() == (0.0, 4.0)


def test_plot_heads_shares_one_data_scale_and_hatches_every_head():
    rng = np.random.default_rng(2)
    N, M, h = 4, 7, 3
    W = softmax(rng.normal(size=(h, N, M)))
    mask = np.ones((N, M), bool)
    mask[:, -2:] = False
    W = np.where(mask, W, 0.0)
    fig = plot_heads(
        W, list("abcd"), key_tokens=list("pqrstuv"), vmin=None, vmax=None, mask=mask, ncols=3
    )
    axes = [ax for ax in fig.axes if ax.images]
    assert len(axes) == h
    lo, hi = W[:, mask].min(), W[:, mask].max()
    for ax in axes:
        assert ax.images[0].get_clim() == (lo, hi)  # the one colour bar is true for every head
        assert len(hatched(ax)) == (~mask).sum()
        assert [t.get_text() for t in ax.get_xticklabels()] == list("pqrstuv")
    label = axes[-1].images[0].colorbar.ax.get_ylabel()  # one bar, made from the last head
    assert "colour scaled to data" in label and "masked" in label


def test_plot_heads_default_scale_is_zero_to_one():
    W = np.full((2, 3, 3), 1 / 3)
    fig = plot_heads(W)
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in fig.axes if ax.images)


def test_bad_mask_is_rejected():
    A = np.eye(3)
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        plot_attention(A, mask=np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 3\); expected .* \(3, 3\)"):
        plot_attention(A, mask=np.ones((2, 3), bool))


@pytest.mark.parametrize("blank", [np.nan, -np.inf])
def test_masked_cells_written_as_nan_or_minus_inf_are_drawn_masked(blank):
    """A bias shown only where allowed (NaN elsewhere): the colour scale is the finite
    values', the blank cells are hatched, and no cell says "nan"."""
    N = 5
    allowed = causal_mask(N)
    i, j = np.arange(N)[:, None], np.arange(N)[None, :]
    bias = 0.25 * (j - i)  # an ALiBi-like bias: 0 on the diagonal, -1 at the far corner
    A = np.where(allowed, bias, blank)
    ax = plot_attention(A, list("abcde"), vmin=None, vmax=None)
    assert ax.images[0].get_clim() == (-1.0, 0.0)
    label = colorbar_of(ax).ax.get_ylabel()
    assert "nan" not in label and "inf" not in label
    assert "colour scaled to data: -1.00–0.00" in label and "hatched grey = masked" in label
    assert len(hatched(ax)) == (~allowed).sum()
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == allowed.sum() and not any("nan" in t or "inf" in t for t in texts)
    # with an explicit mask as well, and in plot_heads
    ax2 = plot_attention(A, vmin=None, vmax=None, mask=np.ones((N, N), bool))
    assert ax2.images[0].get_clim() == (-1.0, 0.0) and len(hatched(ax2)) == (~allowed).sum()
    fig = plot_heads(np.stack([A, 2 * A]), vmin=None, vmax=None)
    axes = [ax for ax in fig.axes if ax.images]
    assert all(ax.images[0].get_clim() == (-2.0, 0.0) for ax in axes)
    assert all(len(hatched(ax)) == (~allowed).sum() for ax in axes)


def test_a_matrix_that_is_all_nan_still_draws():
    ax = plot_attention(np.full((3, 3), np.nan), vmin=None, vmax=None)
    lo, hi = ax.images[0].get_clim()
    assert np.isfinite([lo, hi]).all() and lo < hi
    assert len(hatched(ax)) == 9


def test_annotations_are_readable_on_dark_and_light_cells():
    # viridis: low values are dark purple (white text), high values bright yellow (black text)
    A = np.array([[0.02, 0.98], [0.5, 0.5]])
    ax = plot_attention(A, tokens=["a", "b"], annotate=True)
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours["0.02"] == "white" and colours["0.98"] == "black"
    plt.close(ax.figure)
    ax = plot_attention(A, tokens=["a", "b"], annotate=True, cmap="Blues")  # dark = high here
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    assert colours["0.02"] == "black" and colours["0.98"] == "white"
    plt.close(ax.figure)
