"""Schematic figures of multi-head attention, drawn with matplotlib only.

Shown in notebook 03:
- `multi_head_dataflow()`: X -> per-head projections -> scores -> softmax ->
  weighted values -> concatenation -> W_O, with the shape of every array;
- `head_split(N, h, d)`: how (B, N, h*d) becomes (B, N, h, d) and then
  (B, h, N, d), which features go to which head, and what a reshape without
  the transpose does instead (it mixes tokens).

Shown in notebook 03b:
- `one_vs_two_heads_task(n_tok, query)`: the task one head cannot solve and two
  heads can: two heads fetch the previous and the first token into their own
  halves; one head puts one mix into both.

All return a matplotlib Figure and need no network and no files, so they
render the same in JupyterLab, on GitHub and on Binder. Imported explicitly
(`from mha_lib.diagrams import ...`) so that `import mha_lib` stays free of
matplotlib.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
GREY = "#7f7f7f"


def _tint(colour: str, amount: float) -> tuple[float, float, float]:
    """`colour` mixed with white: amount 0 keeps it, 1 gives white."""
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def _box(ax, x, y, w, h, title, shape, colour, fontsize=11.5):
    """A rounded box centred at (x, y): a title line and a shape line below it."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=_tint(colour, 0.82),
            edgecolor=colour,
            linewidth=1.4,
        )
    )
    ax.text(x, y + 0.12, title, ha="center", va="center", fontsize=fontsize)
    ax.text(x, y - 0.18, shape, ha="center", va="center", fontsize=fontsize - 1.5, color="0.25")


def _arrow(ax, start, end, colour="0.35", rad=0.0):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=11,
            color=colour,
            linewidth=1.1,
            shrinkA=1,
            shrinkB=1,
            connectionstyle=f"arc3,rad={rad}",
        )
    )


# x positions of the data-flow diagram's columns, and its middle line
_FLOW_X = {"X": 0.85, "qkv": 3.2, "S": 6.0, "A": 9.0, "head": 11.85, "cat": 13.85, "W_O": 15.7}
_FLOW_X["out"] = 17.55
_FLOW_MID = 3.15
_BOX_W, _BOX_H, _S_W, _A_W = 2.15, 0.66, 2.5, 2.9  # box sizes: Q/K/V, height, scores, softmax


def _flow_lane(ax, yc: float, i: str, colour: str) -> None:
    """One head's lane: Q, K, V -> scores -> softmax -> weighted values -> concatenation."""
    x = _FLOW_X
    ax.text(
        x["qkv"] - _BOX_W / 2, yc + 1.2, f"head {i}", color=colour, fontsize=12, fontweight="bold"
    )
    y_q, y_k, y_v = yc + 0.8, yc, yc - 0.8
    _box(ax, x["qkv"], y_q, _BOX_W, _BOX_H, f"$Q^{i} = X W_Q^{i}$", "(N, d_k)", colour)
    _box(ax, x["qkv"], y_k, _BOX_W, _BOX_H, f"$K^{i} = X W_K^{i}$", "(M, d_k)", colour)
    _box(ax, x["qkv"], y_v, _BOX_W, _BOX_H, f"$V^{i} = X W_V^{i}$", "(M, d_v)", colour)
    for y in (y_q, y_k, y_v):
        _arrow(ax, (x["X"] + 0.75, _FLOW_MID + (y - _FLOW_MID) * 0.12), (x["qkv"] - _BOX_W / 2, y))
    y_s = (y_q + y_k) / 2
    score = f"$S^{i} = Q^{i} K^{{{i}\\top}} / \\sqrt{{d_k}}$"
    _box(ax, x["S"], y_s, _S_W, _BOX_H, score, "(N, M)", colour)
    soft = f"$A^{i} = \\mathrm{{softmax}}(S^{i})$"
    _box(ax, x["A"], y_s, _A_W, _BOX_H, soft, "(N, M), rows sum to 1", colour)
    head = f"$\\mathrm{{head}}_{i} = A^{i} V^{i}$"
    _box(ax, x["head"], yc, 2.0, _BOX_H, head, "(N, d_v)", colour)
    right = x["qkv"] + _BOX_W / 2
    _arrow(ax, (right, y_q), (x["S"] - _S_W / 2, y_s + 0.12))
    _arrow(ax, (right, y_k), (x["S"] - _S_W / 2, y_s - 0.12))
    _arrow(ax, (x["S"] + _S_W / 2, y_s), (x["A"] - _A_W / 2, y_s))
    _arrow(ax, (x["A"] + _A_W / 2, y_s), (x["head"] - 1.0, yc + 0.12))
    _arrow(ax, (right, y_v), (x["head"] - 1.0, yc - 0.12))
    side = 0.25 if yc > _FLOW_MID else -0.25
    _arrow(ax, (x["head"] + 1.0, yc), (x["cat"] - 0.8, _FLOW_MID + side))


def _flow_merge(ax) -> None:
    """The concatenation (h column blocks side by side), W_O and the output."""
    x, y, cw, ch = _FLOW_X["cat"], _FLOW_MID, 1.6, 1.0
    blocks = [(HEAD_COLOURS[0], "1"), ("0.75", "…"), (HEAD_COLOURS[1], "h")]
    for b, (colour, label) in enumerate(blocks):
        left = x - cw / 2 + b * cw / 3
        ax.add_patch(
            Rectangle(
                (left, y - ch / 2),
                cw / 3,
                ch,
                facecolor=_tint(colour, 0.6),
                edgecolor="0.3",
                linewidth=1.0,
            )
        )
        ax.text(left + cw / 6, y, label, ha="center", va="center")
    ax.text(x, y + ch / 2 + 0.15, "Concat", ha="center", va="bottom", fontsize=11.5)
    ax.text(x, y - ch / 2 - 0.12, "(N, h·d_v)", ha="center", va="top", fontsize=10)
    _arrow(ax, (x + cw / 2, y), (_FLOW_X["W_O"] - 0.8, y))
    _box(ax, _FLOW_X["W_O"], y, 1.6, 1.0, "$\\times\\, W_O$", "(h·d_v, C)", GREY, fontsize=13)
    _arrow(ax, (_FLOW_X["W_O"] + 0.8, y), (_FLOW_X["out"] - 0.75, y))
    _box(ax, _FLOW_X["out"], y, 1.5, 1.0, "output", "(N, C)", GREY, fontsize=12)


def multi_head_dataflow(figsize=(14.0, 6.4)) -> Figure:
    """The data flow of one multi-head attention layer, every array with its shape.

    Two head lanes are drawn (head 1 and head h); the heads in between do the
    same. Self-attention: K and V come from X and M = N. Cross-attention:
    K and V come from a second sequence X_kv (M, C_kv). Returns the Figure.
    """
    fig, ax = plt.subplots(figsize=figsize)
    ax.set(xlim=(-0.1, 18.4), ylim=(-0.45, 6.6))
    ax.axis("off")
    _box(ax, _FLOW_X["X"], _FLOW_MID, 1.5, 1.0, "$X$", "(N, C)", GREY, fontsize=13)
    _flow_lane(ax, 4.8, "1", HEAD_COLOURS[0])
    _flow_lane(ax, 1.5, "h", HEAD_COLOURS[1])
    for x in (_FLOW_X["qkv"], _FLOW_X["head"]):
        ax.text(x, _FLOW_MID, "⋮", ha="center", va="center", fontsize=20, color="0.45")
    ax.text(
        (_FLOW_X["qkv"] + _FLOW_X["head"]) / 2,
        _FLOW_MID,
        "heads 2 … h−1: the same steps, each with its own weights",
        ha="center",
        va="center",
        fontsize=10.5,
        color="0.4",
    )
    _flow_merge(ax)
    ax.text(
        9.2,
        6.55,
        "Multi-head attention: each head projects $X$ its own way and attends; "
        "$W_O$ mixes the heads",
        ha="center",
        va="top",
        fontsize=13.5,
    )
    ax.text(
        9.2,
        -0.4,
        "Self-attention: K and V come from X, so M = N.   Cross-attention: K and V come from a "
        "second sequence $X_{kv}$ (M, C_kv),\nwith $W_K^h$ (C_kv, d_k) and $W_V^h$ (C_kv, d_v); "
        "the queries, and so the N rows of the output, still come from X.",
        ha="center",
        va="bottom",
        fontsize=10.5,
        color="0.3",
    )
    return fig


def _cell(ax, x, y, text, face, size=0.9):
    ax.add_patch(Rectangle((x, y), size, size, facecolor=face, edgecolor="white", linewidth=2))
    ax.text(x + size / 2, y + size / 2, text, ha="center", va="center", fontsize=10.5)


def head_split(N: int = 3, h: int = 2, d: int = 2, figsize=(13.5, 6.6)) -> Figure:
    """Which features go to which head, for one sequence of a batch (B = 1 shown).

    Entry 10*t + f is feature f of token t. Colour = the head a feature
    belongs to, shade = the token (darker = earlier). Left: Y = X W_q
    (N, h*d), whose reshape to (N, h, d) only groups the columns by head.
    Top right: the transpose to (h, N, d), every head gets all N tokens.
    Bottom right: a reshape straight to (h, N, d), which fills the heads in
    memory order and mixes tokens. Returns the Figure.
    """
    if h > len(HEAD_COLOURS) or N > 9 or h * d > 10:
        raise ValueError(
            f"head_split draws at most {len(HEAD_COLOURS)} heads, 9 tokens and 10 features; "
            f"got h = {h}, N = {N}, h*d = {h * d}"
        )
    Y = 10 * np.arange(N)[:, None] + np.arange(h * d)[None, :]  # (N, h*d): 10t + f
    right = Y.reshape(N, h, d).transpose(1, 0, 2)  # (h, N, d)
    wrong = Y.reshape(h, N, d)  # (h, N, d): no transpose

    def face(value):
        t, f = divmod(int(value), 10)
        return _tint(HEAD_COLOURS[f // d], 0.15 + 0.6 * t / max(N - 1, 1))

    s = 0.9  # cell size
    label_w = 3.1  # room for the row labels right of a head
    x1 = 1.5  # left edge of the input grid
    xp = x1 + h * d * s + 3.9  # left edge of the two result panels
    y_bot = 0.0  # bottom edge of the lower panel's grids
    y_top = y_bot + N * s + 2.6  # bottom edge of the upper panel's grids
    y_in = (y_bot + y_top + N * s) / 2 + N * s / 2  # top edge of the input grid
    fig, ax = plt.subplots(figsize=figsize)
    ax.set(xlim=(0, xp + h * (d * s + label_w) + 0.7), ylim=(y_bot - 0.9, y_top + N * s + 1.9))
    ax.set_aspect("equal")
    ax.axis("off")

    # left: Y (N, h*d), its columns grouped by head
    for t in range(N):
        ax.text(x1 - 0.15, y_in - (t + 0.5) * s, f"token {t}", ha="right", va="center")
        for f in range(h * d):
            _cell(ax, x1 + f * s, y_in - (t + 1) * s, str(Y[t, f]), face(Y[t, f]), s)
    for i in range(h):
        xa, xb = x1 + i * d * s + 0.08, x1 + (i + 1) * d * s - 0.08
        ax.plot(
            [xa, xa, xb, xb],
            [y_in + 0.1, y_in + 0.25, y_in + 0.25, y_in + 0.1],
            color=HEAD_COLOURS[i],
            linewidth=1.5,
        )
        ax.text(
            (xa + xb) / 2,
            y_in + 0.32,
            f"head {i}",
            ha="center",
            va="bottom",
            color=HEAD_COLOURS[i],
            fontweight="bold",
        )
    x_mid = x1 + h * d * s / 2
    ax.text(
        x_mid,
        y_in + 2.25,
        f"$Y = XW_q$: (B, N, h·d) = (1, {N}, {h * d})",
        ha="center",
        va="top",
        fontsize=11.5,
    )
    ax.text(
        x_mid,
        y_in + 1.7,
        f"reshape to (B, N, h, d) = (1, {N}, {h}, {d})\ngroups the columns by head; moves nothing",
        ha="center",
        va="top",
        fontsize=9.5,
        color="0.3",
    )
    ax.text(
        x_mid,
        y_in - N * s - 0.25,
        "entry 10·t + f = feature f of token t\ncolour = head, shade = token",
        ha="center",
        va="top",
        fontsize=9.5,
        color="0.3",
    )

    def panel(y0, heads, row_label, bad, title):
        for i in range(h):
            x = xp + i * (d * s + label_w)
            ax.text(
                x + d * s / 2,
                y0 + N * s + 0.08,
                f"head {i}",
                ha="center",
                va="bottom",
                fontweight="bold",
                color=HEAD_COLOURS[i],
            )
            for r in range(N):
                for c in range(d):
                    v = heads[i, r, c]
                    _cell(ax, x + c * s, y0 + (N - 1 - r) * s, str(v), face(v), s)
                ax.text(
                    x + d * s + 0.15,
                    y0 + (N - 0.5 - r) * s,
                    row_label(i, r),
                    ha="left",
                    va="center",
                    fontsize=9.5,
                    color="#c0392b" if bad(i, r) else "0.2",
                )
        ax.text(xp, y0 + N * s + 0.7, title, ha="left", va="bottom", fontsize=11.5, linespacing=1.4)

    def tokens_of(i, r):
        return sorted({int(v) // 10 for v in wrong[i, r]})

    def is_mixed(i, r):
        return any(int(v) % 10 // d != i for v in wrong[i, r])

    def wrong_label(i, r):
        owner = int(wrong[i, r, 0]) % 10 // d
        if not is_mixed(i, r):
            return f"token {tokens_of(i, r)[0]}"
        return f"token {tokens_of(i, r)[0]}, but\nhead {owner}'s features ✗"

    panel(
        y_top,
        right,
        lambda i, r: f"token {r}",
        lambda i, r: False,
        f"✓ reshape, then transpose(0, 2, 1, 3) → (B, h, N, d) = (1, {h}, {N}, {d})\n"
        "    every head gets every token, with its own features",
    )
    panel(
        y_bot,
        wrong,
        wrong_label,
        is_mixed,
        f"✗ reshape straight to (B, h, N, d) = (1, {h}, {N}, {d})\n"
        "    same shape, no error, but tokens and heads mixed",
    )
    missing = [t for t in range(N) if t not in {int(v) // 10 for v in wrong[0].ravel()}]
    if missing:
        names = ", ".join(str(t) for t in missing)
        ax.text(
            xp,
            y_bot - 0.25,
            f"head 0 never sees token {names}",
            ha="left",
            va="top",
            fontsize=10,
            color="#c0392b",
        )
    x_from = x1 + h * d * s + 0.3
    _arrow(ax, (x_from, y_in - N * s / 2 + 0.3), (xp - 0.3, y_top + N * s / 2), rad=-0.15)
    _arrow(ax, (x_from, y_in - N * s / 2 - 0.3), (xp - 0.3, y_bot + N * s / 2), rad=0.15)
    return fig


def _token_row(ax, y, n_tok, query, picks, s=0.8):
    """A row of n_tok token boxes c_0 .. c_(N-1) at height y; the query's box outlined, the
    picked tokens tinted with their colours. Returns the x centre of each box."""
    xs = [0.6 + j * (s + 0.25) + s / 2 for j in range(n_tok)]
    for j, x in enumerate(xs):
        face = _tint(picks[j], 0.7) if j in picks else "white"
        edge = "black" if j == query else "0.55"
        ax.add_patch(
            Rectangle(
                (x - s / 2, y),
                s,
                s,
                facecolor=face,
                edgecolor=edge,
                linewidth=2.2 if j == query else 1,
            )
        )
        ax.text(x, y + s / 2, f"$c_{j}$", ha="center", va="center", fontsize=12)
        ax.text(x, y - 0.22, f"pos {j}", ha="center", va="center", fontsize=9, color="0.35")
    ax.text(xs[query], y + s + 0.15, f"token {query}", ha="center", va="bottom", fontsize=10)
    return xs


def one_vs_two_heads_task(n_tok: int = 6, query: int = 4, figsize=(13.0, 5.2)) -> Figure:
    """The task of notebook 03b §4 for one query token i: its target is [c_(i-1), c_0].

    Left: two heads, one looking one step back, one at token 0; W_O routes each head's output
    to its own half of the target. Right: one head, one row of weights; whatever it takes from
    tokens i-1 and 0 is mixed into one vector, and its one value path puts that same mix into
    both halves (the best it can do: half of each). Returns the Figure.
    """
    if not 2 <= query < n_tok or n_tok > 9:
        raise ValueError(
            f"one_vs_two_heads_task needs 2 <= query < n_tok <= 9; got query = {query}, "
            f"n_tok = {n_tok}"
        )
    prev, c0, c1 = query - 1, HEAD_COLOURS[0], HEAD_COLOURS[1]
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    width = 0.6 + n_tok * 1.05 + 0.3
    for ax, title in zip(
        axes,
        (
            "Two heads: each fetches one token, $W_O$ sends each to its own half  ✓",
            "One head: one row of weights, one value path for both halves  ✗",
        ),
    ):
        ax.set(xlim=(0, width), ylim=(-0.3, 5.3))
        ax.axis("off")
        ax.text(width / 2, 5.25, title, ha="center", va="top", fontsize=11.5)
    # two heads
    ax = axes[0]
    xs = _token_row(ax, 3.6, n_tok, query, {prev: c0, 0: c1})
    half_w, y_out = 1.9, 0.4
    x_a, x_b = width / 2 - half_w / 2 - 0.05, width / 2 + half_w / 2 + 0.05
    for x, colour, label in ((x_a, c0, f"$c_{prev}$"), (x_b, c1, "$c_0$")):
        ax.add_patch(
            Rectangle(
                (x - half_w / 2, y_out), half_w, 0.8, facecolor=_tint(colour, 0.7), edgecolor=colour
            )
        )
        ax.text(x, y_out + 0.4, label, ha="center", va="center", fontsize=13)
    _arrow(ax, (xs[prev], 3.25), (x_a, y_out + 0.85), colour=c0, rad=0.1)
    _arrow(ax, (xs[0], 3.25), (x_b, y_out + 0.85), colour=c1, rad=-0.25)
    ax.text(xs[prev] + 0.1, 2.6, "head 0:\none step back", color=c0, fontsize=10, ha="left")
    ax.text(xs[0] - 0.2, 2.3, "head 1:\ntoken 0", color=c1, fontsize=10, ha="left")
    ax.text(
        width / 2,
        y_out - 0.05,
        f"target of token {query}: [what came just before | what came first]",
        ha="center",
        va="top",
        fontsize=10,
        color="0.3",
    )
    # one head
    ax = axes[1]
    xs = _token_row(ax, 3.6, n_tok, query, {prev: GREY, 0: GREY})
    x_mix, y_mix = width / 2, 1.9
    ax.add_patch(
        FancyBboxPatch(
            (x_mix - 1.6, y_mix - 0.3),
            3.2,
            0.6,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=_tint(GREY, 0.8),
            edgecolor=GREY,
        )
    )
    ax.text(
        x_mix,
        y_mix,
        f"$\\frac{{1}}{{2}}c_{prev} + \\frac{{1}}{{2}}c_0$",
        ha="center",
        va="center",
        fontsize=12,
    )
    for j, label in ((prev, "½"), (0, "½")):
        _arrow(ax, (xs[j], 3.25), (x_mix, y_mix + 0.35), colour=GREY)
        ax.text((xs[j] + x_mix) / 2 + 0.15, 2.85, label, fontsize=11, color="0.3")
    for x in (x_a, x_b):
        ax.add_patch(
            Rectangle(
                (x - half_w / 2, y_out), half_w, 0.8, facecolor=_tint(GREY, 0.8), edgecolor=GREY
            )
        )
        ax.text(
            x,
            y_out + 0.4,
            f"$\\frac{{1}}{{2}}c_{prev} + \\frac{{1}}{{2}}c_0$",
            ha="center",
            va="center",
            fontsize=11,
        )
        _arrow(ax, (x_mix, y_mix - 0.35), (x, y_out + 0.85), colour=GREY)
    ax.text(
        width / 2,
        y_out - 0.05,
        "the same mix in both halves: half of the target is lost",
        ha="center",
        va="top",
        fontsize=10,
        color="#c0392b",
    )
    fig.tight_layout()
    return fig
