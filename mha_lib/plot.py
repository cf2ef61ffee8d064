"""Attention heatmaps, drawn the same way in every notebook.

Rows are queries (the token that looks), columns are keys (the tokens it
looks at); each row of an attention-weight matrix sums to 1. Small matrices
get their values written in the cells. Two options keep a picture honest:
- colours on a fixed 0-1 scale, or scaled to the data (vmin=None,
  vmax=None), and the colour bar says which;
- `mask` (numpy convention, True = may attend): blocked cells are drawn
  hatched grey, so a masked position never looks like a weight of zero;
  cells that hold NaN or -inf (a common way to mark masked entries of a
  bias or of scores) are drawn the same way and left out of the colour scale.
`plot_pixel_heads` draws, for an image whose pixels are the tokens
(notebook 07), one query pixel's weights laid out on the pixel grid, one
small map per head. Imported explicitly
(`from mha_lib.plot import plot_attention, plot_heads`) so that
`import mha_lib` stays free of matplotlib.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

ANNOTATE_UP_TO = 12  # write the numbers into the cells up to this many tokens
MASK_FACE = "0.85"  # light grey behind the hatching of a blocked cell
MASK_HATCH = "///"


def _as_mask(mask, A: np.ndarray) -> np.ndarray | None:
    """`mask` as a boolean array of exactly A's shape (True = may attend), or None.

    Cells of A that are NaN or -inf count as masked too.
    """
    shape = A.shape
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(
                f"mask must be a boolean array (True = may attend); got dtype {mask.dtype}"
            )
        try:
            mask = np.broadcast_to(mask, shape)
        except ValueError:
            raise ValueError(
                f"mask has shape {mask.shape}; expected a shape that broadcasts to {shape}"
            ) from None
    blank = np.isnan(A) | np.isneginf(A)  # masked entries written into the data
    if blank.any():
        mask = ~blank if mask is None else mask & ~blank
    return mask


def _colour_limits(A: np.ndarray, vmin, vmax, mask) -> tuple[float, float, bool]:
    """(lo, hi, scaled): the colour limits; None takes the data's (unmasked) min or max."""
    shown = A if mask is None else A[mask]
    if shown.size == 0:
        shown = np.zeros(1)
    scaled = vmin is None or vmax is None
    lo = float(np.min(shown)) if vmin is None else float(vmin)
    hi = float(np.max(shown)) if vmax is None else float(vmax)
    if hi <= lo:  # a constant matrix: widen so that the colours stay defined
        lo, hi = lo - 0.5, hi + 0.5
    return lo, hi, scaled


def colorbar_label(label: str, lo: float, hi: float, scaled: bool, masked: bool) -> str:
    """The colour bar's text, e.g. 'weight (colour scaled to data: 0.06–0.12)' on two lines."""
    parts = [f"colour scaled to data: {lo:.2f}–{hi:.2f}"] if scaled else []
    if masked:
        parts.append("hatched grey = masked")
    return label + "\n(" + ";\n".join(parts) + ")" if parts else label


def _text_colour(im, value: float) -> str:
    """Black on light cells, white on dark ones, whatever the colour map."""
    r, g, b, _ = im.cmap(im.norm(value))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _draw(ax, A, x_tokens, y_tokens, title, lo, hi, cmap, annotate, mask=None):
    A = np.asarray(A, dtype=float)
    if A.ndim != 2:
        raise ValueError(f"A has shape {A.shape}; expected a matrix (N, M)")
    im = ax.imshow(A, cmap=cmap, vmin=lo, vmax=hi)
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
    if mask is not None:
        for i, j in zip(*np.nonzero(~mask)):
            ax.add_patch(
                Rectangle(
                    (j - 0.5, i - 0.5),
                    1,
                    1,
                    facecolor=MASK_FACE,
                    edgecolor="0.55",
                    hatch=MASK_HATCH,
                    linewidth=0,
                    label="masked",
                )
            )
    if annotate is None:
        annotate = max(N, M) <= ANNOTATE_UP_TO
    if annotate:
        for i in range(N):
            for j in range(M):
                if mask is not None and not mask[i, j]:
                    continue  # a blocked cell shows its hatching, not a number
                ax.text(
                    j,
                    i,
                    f"{A[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color=_text_colour(im, A[i, j]),
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
    mask=None,
    label="weight",
):
    """Heatmap of one attention matrix A (N, M): rows = queries, columns = keys.

    tokens label the rows (and the columns, unless key_tokens is given).
    vmin=None and/or vmax=None scale the colours to the data (for raw scores,
    or weights that span a small range); the colour bar then says so.
    mask (N, M) bool, True = may attend: blocked cells are hatched grey, and
    so are cells of A that are NaN or -inf (left out of the colour scale).
    label names the colour bar's quantity ("weight", "score").
    Returns the Axes.
    """
    A = np.asarray(A, dtype=float)
    if ax is None:
        size = 1.0 + 0.45 * max(np.shape(A)[-1], 4)
        _, ax = plt.subplots(figsize=(size + 1.2, size))
    mask = _as_mask(mask, A)
    lo, hi, scaled = _colour_limits(A, vmin, vmax, mask)
    keys = key_tokens if key_tokens is not None else tokens
    im = _draw(ax, A, keys, tokens, title, lo, hi, cmap, annotate, mask)
    if colorbar:
        cb = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        cb.set_label(colorbar_label(label, lo, hi, scaled, mask is not None))
    return ax


def _panel_grid(n: int, ncols: int, width: float, height: float, extra_height: float = 0.0):
    """A figure with n panels of width x height inches in rows of ncols, spare panels hidden.

    One more inch on the right holds the shared colour bar. Returns (fig, axes (nrows, ncols)).
    """
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(width * ncols + 1.0, height * nrows + extra_height),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes


def plot_heads(
    W,
    tokens=None,
    titles=None,
    suptitle=None,
    ncols=4,
    vmin=0.0,
    vmax=1.0,
    mask=None,
    annotate=False,
    key_tokens=None,
    label="weight",
):
    """Grid of heatmaps, one per head. W: (h, N, M) attention weights.

    All heads share one colour scale and one colour bar: 0-1 by default,
    the data's range over all heads with vmin=None, vmax=None.
    mask broadcasts to (h, N, M), True = may attend: blocked cells hatched grey.
    key_tokens label the columns when they differ from the rows (N != M).
    Returns the Figure.
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 3:
        raise ValueError(f"W has shape {W.shape}; expected per-head weights (h, N, M)")
    h = W.shape[0]
    mask = _as_mask(mask, W)
    lo, hi, scaled = _colour_limits(W, vmin, vmax, mask)
    keys = key_tokens if key_tokens is not None else tokens
    width = 1.4 + 0.35 * max(W.shape[2], 5)  # inches per panel: M keys across, and a title
    height = 2.0 + 0.35 * max(W.shape[1], 4)  # N queries down, plus titles and tick labels
    fig, axes = _panel_grid(h, min(ncols, h), width, height)
    for i, ax in enumerate(axes.flat[:h]):
        title = titles[i] if titles is not None else f"head {i}"
        m = None if mask is None else mask[i]
        im = _draw(ax, W[i], keys, tokens, title, lo, hi, "viridis", annotate, m)
        if i % ncols:
            ax.set_ylabel("")
            ax.set_yticklabels([])
    cb = fig.colorbar(im, ax=list(axes.flat), fraction=0.02, pad=0.01)
    cb.set_label(colorbar_label(label, lo, hi, scaled, mask is not None))
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
    grid, outlined with a dashed line. The axes count pixels: rows from the top,
    columns from the left. Returns the Figure.
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 3:
        raise ValueError(f"W has shape {W.shape}; expected per-head maps (h, rows, cols)")
    h, rows, cols = W.shape
    side = 0.6 + 0.22 * max(rows, cols)
    ncols = min(ncols or int(np.ceil(np.sqrt(h))), h)
    fig, axes = _panel_grid(h, ncols, side, side, extra_height=0.4)
    for i, ax in enumerate(axes.flat[:h]):
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
        step = 2 if max(rows, cols) > 6 else 1  # pixel coordinates, every other one on big grids
        ax.set_xticks(range(0, cols, step))
        ax.set_yticks(range(0, rows, step))
        ax.tick_params(labelsize=6, length=2, pad=1)
        row, col = divmod(i, ncols)
        if col == 0:
            ax.set_ylabel("row", fontsize=7)
        if row == axes.shape[0] - 1 or i + ncols >= h:  # the lowest panel of its column
            ax.set_xlabel("column", fontsize=7)
        ax.set_title(titles[i] if titles is not None else f"head {i}", fontsize=9)
    fig.colorbar(im, ax=list(axes.flat), fraction=0.03, pad=0.02, label="attention weight")
    if suptitle:
        fig.suptitle(suptitle)
    return fig
