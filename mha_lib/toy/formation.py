"""Watch a head form: attention patterns saved during training, drawn as a strip of figures
and as a slider over the saved steps (notebook 06).

`training.train` saves the snapshots (`record`, `record_steps`). Here they arrive as
`steps` (S,), the saved training steps in increasing order, and `patterns` (S, k, N, N): at
each saved step, the attention weights of k heads on one probe sequence (rows = queries,
columns = keys, as everywhere in the series).
- `formation_strip`: a static figure, one row per head and one column per chosen step, under
  the loss curve with the chosen steps marked;
- `draw_step`: the k patterns of one saved step side by side (and the loss curve with that
  step marked): the slider's callback, a plain function;
- `formation_explorer`: an `ipywidgets` slider over the saved steps that calls `draw_step`.
Every panel is drawn with `plot.plot_attention` on the fixed 0-1 colour scale, so a pattern
that sharpens looks sharper, never rescaled. Masked cells (`mask`, True = may attend) are drawn
plain light grey rather than hatched: a strip has dozens of panels, and hatching each blocked
cell would make it slow to draw.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..plot import plot_attention

__all__ = ["draw_step", "formation_explorer", "formation_strip", "nearest_steps"]


def _check(steps, patterns, names) -> tuple[list[int], np.ndarray]:
    steps = [int(s) for s in steps]
    patterns = np.asarray(patterns, dtype=float)
    if patterns.ndim != 4 or patterns.shape[-1] != patterns.shape[-2]:
        raise ValueError(f"patterns has shape {patterns.shape}; expected (S, k, N, N)")
    if len(steps) != patterns.shape[0] or steps != sorted(set(steps)):
        raise ValueError(
            f"steps has {len(steps)} entries; expected S = {patterns.shape[0]} increasing steps, "
            "one per saved pattern"
        )
    if len(names) != patterns.shape[1]:
        raise ValueError(f"got {len(names)} names for k = {patterns.shape[1]} heads")
    return steps, patterns


MASKED = "0.85"  # the colour of a blocked cell, as plot.MASK_FACE
WEIGHTS = plt.get_cmap("viridis").with_extremes(bad=MASKED)


def _panel(ax, A: np.ndarray, mask) -> None:
    """One pattern on the 0-1 scale, blocked cells grey (NaN drawn in the colour map's 'bad')."""
    if mask is not None:
        A = np.where(np.broadcast_to(np.asarray(mask, dtype=bool), A.shape), A, np.nan)
    plot_attention(A, ax=ax, annotate=False, colorbar=False, cmap=WEIGHTS)


def _label(mask) -> str:
    return "attention weight" + ("\n(grey = masked)" if mask is not None else "")


def nearest_steps(steps: Sequence[int], wanted: Sequence[float]) -> list[int]:
    """For each wanted step, the nearest saved one (duplicates removed, in order)."""
    steps = np.asarray(steps)
    picked = [int(steps[np.abs(steps - w).argmin()]) for w in wanted]
    return sorted(set(picked))


def _curve(ax, curve, marks, curve_label):
    """The loss curve (one value per step from step 1) with vertical lines at `marks`."""
    ax.plot(np.arange(1, len(curve) + 1), curve, color="C1", label=curve_label)
    for s in marks:
        ax.axvline(s, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss")
    ax.legend(loc="upper right", fontsize=8)


def draw_step(
    step: int,
    steps: Sequence[int],
    patterns,
    names: Sequence[str],
    curve: Sequence[float] | None = None,
    curve_label: str = "loss",
    mask=None,
):
    """Draw the k saved patterns of training step `step` (one of `steps`) side by side, and,
    with `curve`, the loss curve with that step marked. Returns the Figure."""
    steps, patterns = _check(steps, patterns, names)
    if step not in steps:
        raise ValueError(f"step = {step!r}; expected one of the saved steps {steps}")
    current = patterns[steps.index(step)]  # (k, N, N)
    k = len(names)
    rows = 2 if curve is not None else 1
    fig = plt.figure(figsize=(2.6 * k + 1.0, 2.9 * rows), layout="constrained")
    grid = fig.add_gridspec(rows, k)
    for i in range(k):
        ax = fig.add_subplot(grid[rows - 1, i])
        _panel(ax, current[i], mask)
        ax.set_title(names[i], fontsize=9)
        if i:
            ax.set_ylabel("")
    fig.colorbar(
        fig.axes[-1].images[0],
        ax=fig.axes[-k:],
        fraction=0.03,
        label=_label(mask),
    )
    if curve is not None:
        _curve(fig.add_subplot(grid[0, :]), curve, [step], curve_label)
    fig.suptitle(f"after {step} training steps")
    return fig


def formation_strip(
    steps: Sequence[int],
    patterns,
    names: Sequence[str],
    show: Sequence[int],
    curve: Sequence[float] | None = None,
    curve_label: str = "loss",
    mask=None,
    suptitle: str | None = None,
):
    """One row per head, one column per step in `show` (saved steps), under the loss curve
    with those steps marked. Returns the Figure."""
    steps, patterns = _check(steps, patterns, names)
    if any(s not in steps for s in show):
        raise ValueError(f"show = {list(show)}; every step must be one of the saved steps {steps}")
    k, cols = len(names), len(show)
    top = 1 if curve is not None else 0
    fig = plt.figure(figsize=(1.7 * cols + 1.6, 1.7 * k + 2.4 * top), layout="constrained")
    grid = fig.add_gridspec(k + top, cols, height_ratios=[1.4] * top + [1.0] * k)
    for r in range(k):
        for c, s in enumerate(show):
            ax = fig.add_subplot(grid[top + r, c])
            _panel(ax, patterns[steps.index(s), r], mask)
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_xlabel(f"step {s}" if r == k - 1 else "")
            ax.set_ylabel(names[r] if c == 0 else "", fontsize=8)
    fig.colorbar(
        fig.axes[-1].images[0],
        ax=fig.axes[top:],
        fraction=0.03,
        label=_label(mask),
    )
    if curve is not None:
        _curve(fig.add_subplot(grid[0, :]), curve, show, curve_label)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def formation_explorer(
    steps: Sequence[int],
    patterns,
    names: Sequence[str],
    curve: Sequence[float] | None = None,
    curve_label: str = "loss",
    mask=None,
):
    """A slider over the saved steps; moving it redraws `draw_step` for the chosen step.

    Returns an `ipywidgets.interactive` (its `.f` is the callback, its first child the slider).
    """
    import ipywidgets as widgets  # only here: the rest of the library does not need it

    steps, patterns = _check(steps, patterns, names)

    def show(step: int):
        fig = draw_step(step, steps, patterns, names, curve, curve_label, mask)
        plt.show()
        return fig

    slider = widgets.SelectionSlider(
        options=steps, value=steps[0], description="step", continuous_update=False
    )
    return widgets.interactive(show, step=slider)
