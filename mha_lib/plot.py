"""Attention heatmaps, drawn the same way in every notebook.

Rows are queries (the token that looks), columns are keys (the tokens it
looks at); each row of an attention-weight matrix sums to 1. Small matrices
get their values written in the cells. `plot_pixel_heads` draws, for an
image whose pixels are the tokens (notebook 07), one query pixel's weights
laid out on the pixel grid, one small map per head. Imported explicitly
(`from mha_lib.plot import plot_attention, plot_heads`) so that
`import mha_lib` stays free of matplotlib.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

ANNOTATE_UP_TO = 12  # write the numbers into the cells up to this many tokens


def _draw(ax, A, x_tokens, y_tokens, title, vmin, vmax, cmap, annotate):
    A = np.asarray(A, dtype=float)
    if A.ndim != 2:
        raise ValueError(f"A has shape {A.shape}; expected a matrix (N, M)")
    im = ax.imshow(A, cmap=cmap, vmin=vmin, vmax=vmax)
    N, M = A.shape
    for tokens, n, set_ticks, set_labels in (
        (y_tokens, N, ax.set_yticks, ax.set_yticklabels),
        (x_tokens, M, ax.set_xticks, ax.set_xticklabels),
    ):
        if tokens is not None:
            if len(tokens) != n:
                raise ValueError(f"got {len(tokens)} token labels for an axis of length {n}")
            set_ticks(range(n))
            set_labels(tokens)
    if x_tokens is not None:
        ax.tick_params(axis="x", labelrotation=90)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = max(N, M) <= ANNOTATE_UP_TO
    if annotate:
        lo, hi = (A.min(), A.max()) if vmin is None or vmax is None else (vmin, vmax)
        mid = (lo + hi) / 2
        for i in range(N):
            for j in range(M):
                ax.text(
                    j,
                    i,
                    f"{A[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if A[i, j] > mid else "black",
                )
    return im


def plot_attention(
    A,
    tokens=None,
    key_tokens=None,
    title=None,
    ax=None,
    vmin=0.0,
    vmax=1.0,
    cmap="viridis",
    annotate=None,
    colorbar=True,
):
    """Heatmap of one attention matrix A (N, M): rows = queries, columns = keys.

    tokens label the rows (and the columns, unless key_tokens is given).
    For raw scores rather than weights pass vmin=None, vmax=None.
    Returns the Axes.
    """
    if ax is None:
        size = 1.0 + 0.45 * max(np.shape(A)[-1], 4)
        _, ax = plt.subplots(figsize=(size + 1.2, size))
    keys = key_tokens if key_tokens is not None else tokens
    im = _draw(ax, A, keys, tokens, title, vmin, vmax, cmap, annotate)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_heads(W, tokens=None, titles=None, suptitle=None, ncols=4, vmin=0.0, vmax=1.0):
    """Grid of heatmaps, one per head. W: (h, N, M) attention weights.

    Returns the Figure.
    """
    W = np.asarray(W)
    if W.ndim != 3:
        raise ValueError(f"W has shape {W.shape}; expected per-head weights (h, N, M)")
    h = W.shape[0]
    ncols = min(ncols, h)
    nrows = -(-h // ncols)
    side = 1.0 + 0.35 * max(W.shape[-1], 4)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(side * ncols + 1.0, side * nrows),
        squeeze=False,
        layout="constrained",
    )
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")
            continue
        title = titles[i] if titles is not None else f"head {i}"
        im = _draw(ax, W[i], tokens, tokens, title, vmin, vmax, "viridis", False)
        if i % ncols:
            ax.set_ylabel("")
            ax.set_yticklabels([])
    fig.colorbar(im, ax=list(axes.flat), fraction=0.02, pad=0.01)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_pixel_heads(
    W, query=None, image_box=None, titles=None, suptitle=None, ncols=None, vmin=0.0, vmax=1.0
):
    """Grid of small maps, one per head, of one query pixel's weights over an image.

    W: (h, rows, cols), head i's attention weights laid out on the pixel grid
    (row 0 at the top). query: (row, col) of the query pixel, outlined in
    white; image_box: (row, col, height, width) of the image inside a padded
    grid, outlined with a dashed line. Returns the Figure.
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 3:
        raise ValueError(f"W has shape {W.shape}; expected per-head maps (h, rows, cols)")
    h, rows, cols = W.shape
    ncols = min(ncols or int(np.ceil(np.sqrt(h))), h)
    nrows = -(-h // ncols)
    side = 0.6 + 0.22 * max(rows, cols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(side * ncols + 1.0, side * nrows + 0.4),
        squeeze=False,
        layout="constrained",
    )
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")
            continue
        im = ax.imshow(W[i], cmap="viridis", vmin=vmin, vmax=vmax)
        if query is not None:
            ax.add_patch(
                plt.Rectangle(
                    (query[1] - 0.5, query[0] - 0.5), 1, 1, fill=False, ec="white", lw=1.5
                )
            )
        if image_box is not None:
            r0, c0, height, width = image_box
            ax.add_patch(
                plt.Rectangle(
                    (c0 - 0.5, r0 - 0.5), width, height, fill=False, ec="white", lw=0.8, ls="--"
                )
            )
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(titles[i] if titles is not None else f"head {i}", fontsize=9)
    fig.colorbar(im, ax=list(axes.flat), fraction=0.03, pad=0.02, label="attention weight")
    if suptitle:
        fig.suptitle(suptitle)
    return fig
