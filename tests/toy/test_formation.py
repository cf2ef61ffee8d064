"""Tests of `mha_lib.toy.formation`: the strip and the slider draw the saved snapshot of the step
asked for, on the fixed 0-1 scale, and bad input is named."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from mha_lib.toy.formation import draw_step, formation_explorer, formation_strip, nearest_steps

STEPS = [0, 10, 20, 30]
NAMES = ["layer 0 head 0", "layer 1 head 1"]


def patterns() -> np.ndarray:
    """(S, k, N, N) random rows summing to 1, different at every step."""
    scores = np.random.default_rng(0).standard_normal((len(STEPS), len(NAMES), 5, 5)) * 2
    e = np.exp(scores)
    return e / e.sum(-1, keepdims=True)


def shown(fig) -> list[np.ndarray]:
    """The matrices drawn in the figure's heatmap panels, in drawing order."""
    return [np.asarray(ax.images[0].get_array()) for ax in fig.axes if ax.images]


def test_draw_step_draws_the_snapshot_of_that_step():
    P = patterns()
    for i, step in enumerate(STEPS):
        fig = draw_step(step, STEPS, P, NAMES, curve=np.linspace(3, 1, 30))
        drawn = shown(fig)
        assert len(drawn) == len(NAMES)
        for k in range(len(NAMES)):
            np.testing.assert_array_equal(drawn[k], P[i, k])
        assert f"after {step} training steps" in fig._suptitle.get_text()
        clim = [ax.images[0].get_clim() for ax in fig.axes if ax.images]
        assert all(c == (0.0, 1.0) for c in clim)  # a fixed scale, never rescaled per step
        plt.close(fig)
    with pytest.raises(ValueError, match="saved steps"):
        draw_step(15, STEPS, P, NAMES)


def test_the_slider_callback_draws_the_chosen_step():
    P = patterns()
    causal = np.tril(np.ones((5, 5), dtype=bool))
    explorer = formation_explorer(STEPS, P, NAMES, mask=causal)
    slider = explorer.children[0]
    assert list(slider.options) == STEPS and slider.value == 0
    for i, step in enumerate(STEPS):
        fig = explorer.f(step)  # the callback, called directly
        # the snapshot of that step, masked cells blank (NaN, drawn grey)
        np.testing.assert_array_equal(shown(fig)[1], np.where(causal, P[i, 1], np.nan))
        plt.close(fig)
    slider.value = 20  # moving the slider runs the callback for the new step
    np.testing.assert_array_equal(shown(explorer.result)[0], np.where(causal, P[2, 0], np.nan))
    plt.close("all")


def test_formation_strip_lays_out_heads_by_steps():
    P = patterns()
    fig = formation_strip(STEPS, P, NAMES, show=[0, 20, 30], curve=np.linspace(3, 1, 30))
    drawn = shown(fig)
    assert len(drawn) == 2 * 3
    for r in range(2):
        for c, i in enumerate((0, 2, 3)):
            np.testing.assert_array_equal(drawn[3 * r + c], P[i, r])
    curve_ax = next(ax for ax in fig.axes if ax.lines and not ax.images)
    marks = sorted(line.get_xdata()[0] for line in curve_ax.lines[1:])
    assert marks == [0, 20, 30]
    plt.close(fig)
    with pytest.raises(ValueError, match="saved steps"):
        formation_strip(STEPS, P, NAMES, show=[5])


def test_bad_input_is_named():
    P = patterns()
    with pytest.raises(ValueError, match="patterns has shape"):
        draw_step(0, STEPS, P[0], NAMES)
    with pytest.raises(ValueError, match="steps has 3 entries"):
        draw_step(0, STEPS[:3], P, NAMES)
    with pytest.raises(ValueError, match="names"):
        draw_step(0, STEPS, P, NAMES[:1])


def test_nearest_steps():
    assert nearest_steps(STEPS, [-5, 12, 14, 100]) == [0, 10, 30]
