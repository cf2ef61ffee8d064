"""Schematic figures of multi-head attention, drawn with matplotlib only.

Shown in notebook 02:
- `single_head_dataflow()`: X -> X W_Q, X W_K, X W_V -> scores -> softmax ->
  weights -> weights times V, one head, with the shape of every array.

Shown in notebook 03:
- `multi_head_dataflow()`: X -> per-head projections -> scores -> softmax ->
  weighted values -> concatenation -> W_O, with the shape of every array;
- `head_split(N, h, d)`: how (B, N, h*d) becomes (B, N, h, d) and then
  (B, h, N, d), which features go to which head, and what a reshape without
  the transpose does instead (it mixes tokens).

Shown in notebook 00:
- `roadmap()`: the core path 01 -> 02 -> 03 -> 03b -> 04, what each adds.

Shown in notebook 01:
- `recurrence_vs_attention(n)`: a recurrent network's chain of states against
  self-attention's all-to-all reads, drawn from `dependency_graph(layer, n)`,
  whose `sequential_steps` and `hops` the notebook counts;
- `diagonal_counterexample(X, i, j)`: the tokens of a small X (C = 1 or 2) as
  arrows, and why α_ij can exceed both α_ii and α_jj.

Shown in notebook 04:
- `transformer_blocks()`: a post-LN and a pre-LN Transformer block side by side, the
  residual stream, where each LayerNorm sits, attention and the feed-forward network.

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

from itertools import pairwise

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


# notebook 00: the core path, one box per notebook
_ROADMAP = [
    ("01", "Self-attention\nwithout weights", "softmax(XXᵀ/√C) X:\nthe plainest attention"),
    ("02", "Attention\nwith weights", "learned W_Q, W_K, W_V\nand why 1/√d_k"),
    ("03", "Multi-head\nattention", "h heads at once,\nthen W_O: the layer"),
    ("03b", "What heads\nbuy", "tasks two heads solve\nand one head cannot"),
    ("04", "The layer\nin PyTorch", "a drop-in for\nnn.MultiheadAttention"),
]


def roadmap(figsize=(14.0, 3.5)) -> Figure:
    """The core path 01 -> 02 -> 03 -> 03b -> 04, what each notebook adds, and what follows.

    numpy notebooks in blue, the torch one in orange; 05-18 in a dashed box at
    the end. Returns the Figure.
    """
    fig, ax = plt.subplots(figsize=figsize)
    ax.set(xlim=(-0.2, 17.4), ylim=(-1.15, 2.35))
    ax.axis("off")
    w, h, step = 2.5, 1.25, 2.95
    for k, (number, title, adds) in enumerate(_ROADMAP):
        x = 1.3 + k * step
        colour = HEAD_COLOURS[1] if number == "04" else HEAD_COLOURS[0]
        ax.add_patch(
            FancyBboxPatch(
                (x - w / 2, 0.35),
                w,
                h,
                boxstyle="round,pad=0.02,rounding_size=0.1",
                facecolor=_tint(colour, 0.82),
                edgecolor=colour,
                linewidth=1.4,
            )
        )
        ax.text(x, 0.35 + h - 0.2, number, ha="center", va="center", fontsize=13, weight="bold")
        ax.text(x, 0.35 + 0.45, title, ha="center", va="center", fontsize=10.5)
        ax.text(x, 0.05, adds, ha="center", va="top", fontsize=9.5, color="0.3")
        ax.text(
            x,
            -0.95,
            "torch" if number == "04" else "numpy",
            ha="center",
            va="center",
            fontsize=9,
            color=colour,
        )
        if k:
            _arrow(ax, (x - step + w / 2, 0.35 + h / 2), (x - w / 2, 0.35 + h / 2))
    x = 1.3 + len(_ROADMAP) * step - 0.15
    ax.add_patch(
        FancyBboxPatch(
            (x - 1.05, 0.35),
            2.1,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.1",
            facecolor="white",
            edgecolor=GREY,
            linewidth=1.2,
            linestyle="--",
        )
    )
    _arrow(ax, (x - step + 0.15 + w / 2, 0.35 + h / 2), (x - 1.05, 0.35 + h / 2), colour=GREY)
    ax.text(x, 0.35 + h - 0.2, "05–18", ha="center", va="center", fontsize=13, color="0.35")
    ax.text(x, 0.35 + 0.45, "real models", ha="center", va="center", fontsize=10.5, color="0.35")
    ax.text(
        x,
        0.05,
        "these parts at work\n(the README's table)",
        ha="center",
        va="top",
        fontsize=9.5,
        color="0.4",
    )
    ax.text(
        8.6,
        2.3,
        "The core path: each notebook adds one piece to the layer, and 04 makes it a PyTorch "
        "module",
        ha="center",
        va="top",
        fontsize=13,
    )
    return fig


# notebook 01 §4: who reads whom in a recurrent network and in self-attention
def dependency_graph(layer: str, n: int) -> tuple[list[list[int]], np.ndarray]:
    """(depends_on, reads) of a left-to-right recurrent network or of self-attention.

    depends_on[t]: the outputs that output t must wait for. reads (n, n) bool:
    reads[i, j] is True when position j reads position i directly. "rnn": h_t
    reads h_{t-1} and waits for it. "attention": every output reads every input
    and waits for no other output.
    """
    if layer == "rnn":
        return [[t - 1] if t else [] for t in range(n)], np.eye(n, k=1, dtype=bool)
    if layer == "attention":
        return [[] for _ in range(n)], ~np.eye(n, dtype=bool)
    raise ValueError(f"layer must be 'rnn' or 'attention'; got {layer!r}")


def sequential_steps(depends_on: list[list[int]]) -> int:
    """Rounds of work when output t can start only after the outputs in depends_on[t]."""
    round_of: list[int] = []
    for deps in depends_on:  # dependencies point backwards: one pass suffices
        round_of.append(1 + max((round_of[s] for s in deps), default=0))
    return max(round_of)


def hops(reads: np.ndarray) -> np.ndarray:
    """(n, n): hops[i, j] = fewest edges for information at position i to reach position j.

    Breadth first: the positions reached in k + 1 hops read one reached in k
    hops. np.inf where j is never reached.
    """
    n = len(reads)
    H = np.full((n, n), np.inf)  # (n, n)
    reach = np.eye(n, dtype=bool)  # (n, n): reached in 0 hops
    H[reach] = 0
    for k in range(1, n):
        new = reach | ((reach.astype(int) @ reads.astype(int)) > 0)  # one more hop
        H[new & ~reach] = k
        reach = new
    return H


def recurrence_vs_attention(n: int = 6, figsize=(13.5, 4.6)) -> Figure:
    """Left: a recurrent network's chain h_1 -> ... -> h_n; right: self-attention's
    all-to-all reads. Both drawn from `dependency_graph`; the way from token 1 to
    the last position in red, with its number of hops from `hops`. Returns the Figure.
    """
    if not 2 <= n <= 9:
        raise ValueError(f"recurrence_vs_attention draws 2 to 9 tokens; got n = {n}")
    red = "#c0392b"
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    for ax, layer in zip(axes, ("rnn", "attention")):
        depends_on, reads = dependency_graph(layer, n)
        H = hops(reads)
        ax.set(xlim=(0.3, n + 0.7), ylim=(-0.75, 2.75))
        ax.axis("off")
        for t in range(n):
            x = t + 1
            ax.text(
                x,
                0,
                f"$x_{{{t + 1}}}$",
                ha="center",
                va="center",
                fontsize=12,
                bbox={"boxstyle": "round", "facecolor": "0.93", "edgecolor": GREY},
            )
            top = f"$h_{{{t + 1}}}$" if layer == "rnn" else f"$y_{{{t + 1}}}$"
            ax.text(
                x,
                1.6,
                top,
                ha="center",
                va="center",
                fontsize=12,
                bbox={
                    "boxstyle": "round",
                    "facecolor": _tint(HEAD_COLOURS[0], 0.8),
                    "edgecolor": HEAD_COLOURS[0],
                },
            )
        on_path = set()  # the edges of the way from position 0 to position n - 1
        if layer == "rnn":
            on_path = {(t, t + 1) for t in range(n - 1)} | {("x", 0)}
        else:
            on_path = {("x0", n - 1)}
        for t in range(n):  # every output reads its own token
            colour = red if ("x", t) in on_path else "0.55"
            _arrow(ax, (t + 1, 0.28), (t + 1, 1.32), colour=colour)
        for i, j in zip(*np.nonzero(reads)):
            if layer == "rnn":  # state i -> state j, along the top row
                colour = red if (i, j) in on_path else "0.55"
                _arrow(ax, (i + 1.3, 1.6), (j + 0.7, 1.6), colour=colour)
            else:  # input i -> output j
                colour = red if ("x" + str(i), j) in on_path else "0.8"
                _arrow(ax, (i + 1, 0.28), (j + 1, 1.32), colour=colour)
        if layer == "rnn":
            title = (
                f"Recurrence: {sequential_steps(depends_on)} steps one after another;\n"
                f"what $x_1$ put into $h_1$ reaches $h_{{{n}}}$ after {H[0, n - 1]:.0f} "
                "updates (red)"
            )
        else:
            title = (
                f"Self-attention: {sequential_steps(depends_on)} step, all outputs at once;\n"
                f"$x_1$ reaches $y_{{{n}}}$ in {H[0, n - 1]:.0f} hop (red), like every pair"
            )
        ax.text((n + 1) / 2, 2.7, title, ha="center", va="top", fontsize=12)
        ax.text((n + 1) / 2, -0.6, "tokens", ha="center", va="center", fontsize=10, color="0.35")
    return fig


def _softmax_rows(S: np.ndarray) -> np.ndarray:
    e = np.exp(S - S.max(axis=1, keepdims=True))  # (n, n)
    return e / e.sum(axis=1, keepdims=True)


def diagonal_counterexample(X, i: int = 0, j: int = 1, figsize=(13.5, 5.0)) -> Figure:
    """Why α_ij > max(α_ii, α_jj) can happen: the tokens of X (n, C), C = 1 or 2, as arrows.

    Left: each token x_k as an arrow (for C = 1 the tokens lie on one line, so
    each gets its own lane). Row i's score S_ik = |x_i| times the shadow of x_k
    on x_i's line: x_j's shadow passes x_i's tip, so S_ij > S_ii. In row j, the
    token m with the largest score S_jm > S_jj takes most of row j's weight.
    Right: the weights of rows i and j, softmax(XXᵀ/√C), α_ij in red. Returns the Figure.
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] not in (1, 2) or len(X) > 8:
        raise ValueError(f"diagonal_counterexample draws X (n ≤ 8, C = 1 or 2); got {X.shape}")
    n, C = X.shape
    S = X @ X.T  # (n, n)
    A = _softmax_rows(S / np.sqrt(C))  # (n, n)
    m = int(np.argmax(A[j]))  # the token that takes row j's weight
    col_i, col_j, red = HEAD_COLOURS[0], HEAD_COLOURS[1], "#c0392b"
    fig, (ax, bx) = plt.subplots(1, 2, figsize=figsize, width_ratios=(1.25, 1))
    if C == 1:  # one line: token k on lane -k, the shadow on x_i's line is x_k itself
        starts = np.stack([np.zeros(n), -np.arange(n, dtype=float)], axis=1)  # (n, 2)
        ends = starts + np.stack([X[:, 0], np.zeros(n)], axis=1)  # (n, 2)
        for row, colour in ((i, col_i), (j, col_j)):
            tip = X[row, 0]
            ax.axvline(tip, color=colour, ls="--", lw=1.2)
            ax.text(tip, 0.55, f"tip of $x_{row}$", color=colour, ha="center", fontsize=10)
        ax.set(ylim=(-n + 0.4, 1.0), yticks=[])
        ax.set_xlabel("the one feature (C = 1): every token lies on this line, drawn on its lane")
    else:  # the plane: arrows from the origin, row i's shadows on x_i's line
        starts = np.zeros((n, 2))
        ends = X
        for row, other, colour in ((i, j, col_i), (j, m, col_j)):
            u = X[row] / np.linalg.norm(X[row])  # (2,): x_row's direction
            reach = max(np.linalg.norm(X[row]), X[other] @ u) * 1.15
            ax.plot([0, reach * u[0]], [0, reach * u[1]], color=colour, ls="--", lw=1.0)
            foot = (X[other] @ u) * u  # (2,): the shadow of x_other on x_row's line
            ax.plot([X[other, 0], foot[0]], [X[other, 1], foot[1]], color=colour, ls=":", lw=1.2)
            ax.plot(*foot, "o", color=colour, ms=5)
        ax.set_aspect("equal")
        ax.set(xlabel="feature 1", ylabel="feature 2")
    for k in range(n):
        colour = col_i if k == i else col_j if k == j else "0.3"
        ax.add_patch(
            FancyArrowPatch(
                starts[k], ends[k], arrowstyle="-|>", mutation_scale=16, color=colour, linewidth=2
            )
        )
        ax.text(*(ends[k] + [0.08, 0.12]), f"$x_{k}$", color=colour, fontsize=12)
    lo, hi = min(starts[:, 0].min(), ends[:, 0].min()), max(starts[:, 0].max(), ends[:, 0].max())
    ax.set_xlim(lo - 0.4, hi + 0.6)
    if C == 2:
        ax.set_ylim(min(0, X[:, 1].min()) - 0.4, X[:, 1].max() + 0.6)
    ax.set_title(
        f"Row {i}: $x_{j}$ reaches past $x_{i}$'s tip, so $S_{{{i}{j}}}$ = {S[i, j]:g} > "
        f"$S_{{{i}{i}}}$ = {S[i, i]:g}\nRow {j}: $x_{m}$ reaches past $x_{j}$'s tip, "
        f"$S_{{{j}{m}}}$ = {S[j, m]:g} > $S_{{{j}{j}}}$ = {S[j, j]:g}",
        fontsize=11.5,
    )
    width = 0.38
    for r, (row, colour) in enumerate(((i, col_i), (j, col_j))):
        xs = np.arange(n) + (r - 0.5) * width
        bars = bx.bar(
            xs,
            A[row],
            width,
            color=_tint(colour, 0.35),
            edgecolor=colour,
            label=f"row {row}: $\\alpha_{{{row}k}}$",
        )
        for k in range(n):
            if (row, k) in ((i, i), (j, j), (i, j)):
                face = red if (row, k) == (i, j) else colour
                bars[k].set_facecolor(face)
                bx.text(
                    xs[k],
                    A[row, k] + 0.015,
                    f"{A[row, k]:.3f}",
                    ha="center",
                    fontsize=9.5,
                    color=face,
                )
    bx.axhline(
        max(A[i, i], A[j, j]),
        color="0.4",
        ls="--",
        lw=1,
        label=f"max($\\alpha_{{{i}{i}}}$, $\\alpha_{{{j}{j}}}$)",
    )
    bx.set(
        xticks=range(n), xticklabels=[f"key {k}" for k in range(n)], ylabel="weight", ylim=(0, 1.08)
    )
    bx.legend(loc="upper left")
    bx.set_title(
        f"$\\alpha_{{{i}{j}}}$ = {A[i, j]:.3f} (red) is above both diagonals: "
        f"$\\alpha_{{{i}{i}}}$ = {A[i, i]:.3f}, $\\alpha_{{{j}{j}}}$ = {A[j, j]:.3f}",
        fontsize=11.5,
    )
    fig.suptitle(
        "A token can get more weight from another token than from itself: the other one is longer "
        "and points the same way",
        fontsize=13,
    )
    fig.tight_layout()
    return fig


# x positions of the one-head diagram's columns, and its middle line
_ONE_X = {"X": 0.85, "qkv": 4.45, "S": 7.55, "A": 10.75, "out": 13.75}
_ONE_MID = 1.9


def single_head_dataflow(figsize=(13.0, 4.6)) -> Figure:
    """The data flow of one attention head (notebook 02), every array with its shape.

    X (N, C) is projected three ways, by W_Q, W_K (C, d_k) and W_V (C, d_v); the
    queries are scored against the keys, a softmax turns each row of scores into
    weights, and the weights average the values. Drawn with the boxes and colours
    of `multi_head_dataflow`, whose lanes are this figure once per head. Returns
    the Figure.
    """
    x, mid, colour = _ONE_X, _ONE_MID, HEAD_COLOURS[0]
    fig, ax = plt.subplots(figsize=figsize)
    ax.set(xlim=(-0.1, 14.9), ylim=(-0.2, 4.35))
    ax.axis("off")

    def word(xc, top, text):  # a plain-words label above a box
        ax.text(xc, top + 0.06, text, ha="center", va="bottom", fontsize=9, color="0.4")

    _box(ax, x["X"], mid, 1.5, 1.0, "$X$", "(N, C)", GREY, fontsize=13)
    word(x["X"], mid + 0.5, "the tokens")
    y_q, y_k, y_v = mid + 1.0, mid, mid - 1.0
    rows = [
        (y_q, "$Q = X W_Q$", "(N, d_k)", "$W_Q$: (C, d_k)", "queries"),
        (y_k, "$K = X W_K$", "(N, d_k)", "$W_K$: (C, d_k)", "keys"),
        (y_v, "$V = X W_V$", "(N, d_v)", "$W_V$: (C, d_v)", "values"),
    ]
    start, left = x["X"] + 0.75, x["qkv"] - _BOX_W / 2
    for y, title, shape, weight, name in rows:
        _box(ax, x["qkv"], y, _BOX_W, _BOX_H, title, shape, colour)
        word(x["qkv"], y + _BOX_H / 2, name)
        _arrow(ax, (start, mid + (y - mid) * 0.15), (left, y))
        below = y < mid  # the arrow to V falls: its label goes under it
        ax.text(
            left - 0.12,
            y - 0.1 if below else y + 0.1,
            weight,
            ha="right",
            va="top" if below else "bottom",
            fontsize=9.5,
            color=colour,
        )
    y_s = (y_q + y_k) / 2
    _box(ax, x["S"], y_s, _S_W, _BOX_H, "$S = Q K^{\\top} / \\sqrt{d_k}$", "(N, N)", colour)
    soft = "$A = \\mathrm{softmax}(S)$"
    _box(ax, x["A"], y_s, _A_W, _BOX_H, soft, "(N, N), rows sum to 1", colour)
    _box(ax, x["out"], mid, 2.0, _BOX_H, "$\\mathrm{head} = A V$", "(N, d_v)", colour)
    word(x["S"], y_s + _BOX_H / 2, "scores")
    word(x["A"], y_s + _BOX_H / 2, "weights")
    word(x["out"], mid + _BOX_H / 2, "output")
    right = x["qkv"] + _BOX_W / 2
    _arrow(ax, (right, y_q), (x["S"] - _S_W / 2, y_s + 0.12))
    _arrow(ax, (right, y_k), (x["S"] - _S_W / 2, y_s - 0.12))
    _arrow(ax, (x["S"] + _S_W / 2, y_s), (x["A"] - _A_W / 2, y_s))
    _arrow(ax, (x["A"] + _A_W / 2, y_s), (x["out"] - 1.0, mid + 0.12))
    _arrow(ax, (right, y_v), (x["out"] - 1.0, mid - 0.12))
    ax.text(
        7.4,
        4.3,
        "One attention head: queries are scored against keys, a softmax turns each row of "
        "scores into weights,\nand each token's output is the weighted average of the values",
        ha="center",
        va="top",
        fontsize=12.5,
    )
    ax.text(
        7.4,
        -0.15,
        "Self-attention: queries, keys and values all come from the N tokens of X; row i of A "
        "says how much token i takes from each token j.\nMulti-head attention (notebook 03) "
        "runs h such heads side by side, each with its own $W_Q^h$, $W_K^h$, $W_V^h$, "
        "and mixes their outputs with $W_O$.",
        ha="center",
        va="bottom",
        fontsize=10,
        color="0.3",
    )
    return fig


# x positions of a block diagram's residual stream and of its sublayer branch
_STREAM_X, _BRANCH_X = 1.6, 4.7
_LN_COLOUR, _ATTN_COLOUR, _FF_COLOUR = HEAD_COLOURS[2], HEAD_COLOURS[0], HEAD_COLOURS[1]
_SUBLAYERS = {  # title, what it does
    "LN": ("LayerNorm", "each token: mean 0, var 1; γ, β", _LN_COLOUR),
    "MHA": ("multi-head attention", "mixes information across tokens", _ATTN_COLOUR),
    "FF": ("feed-forward", "each token alone: E → F → E", _FF_COLOUR),
}


def _sublayer(ax, x: float, y: float, kind: str) -> None:
    title, note, colour = _SUBLAYERS[kind]
    _box(ax, x, y, 2.9, 0.72, title, note, colour, fontsize=10.5)


def _plus(ax, y: float) -> None:
    """The residual sum on the stream: a circled +."""
    ax.add_patch(
        plt.Circle(
            (_STREAM_X, y), 0.22, facecolor="white", edgecolor="0.2", linewidth=1.4, zorder=2
        )
    )
    ax.text(_STREAM_X, y, "+", ha="center", va="center", fontsize=13, fontweight="bold", zorder=4)


def _branch(ax, y_from: float, y_plus: float, boxes: list[tuple[float, str]]) -> None:
    """A sublayer branch: off the stream at y_from, through `boxes` (y, kind), back at y_plus."""
    ax.plot([_STREAM_X, _BRANCH_X], [y_from, y_from], color="0.35", linewidth=1.1)
    _arrow(ax, (_BRANCH_X, y_from), (_BRANCH_X, boxes[0][0] - 0.36))
    for (y_a, _), (y_b, _) in pairwise(boxes):
        _arrow(ax, (_BRANCH_X, y_a + 0.36), (_BRANCH_X, y_b - 0.36))
    for y, kind in boxes:
        _sublayer(ax, _BRANCH_X, y, kind)
    top = boxes[-1][0] + 0.36
    ax.plot([_BRANCH_X, _BRANCH_X], [top, y_plus], color="0.35", linewidth=1.1)
    _arrow(ax, (_BRANCH_X, y_plus), (_STREAM_X + 0.22, y_plus))


def _stream(ax) -> None:
    """The residual stream: one thick arrow up the left, drawn under every box and sum."""
    ax.add_patch(
        FancyArrowPatch(
            (_STREAM_X, 0.3),
            (_STREAM_X, 9.9),
            arrowstyle="-|>",
            mutation_scale=16,
            color="0.2",
            linewidth=2.6,
            shrinkA=0,
            shrinkB=0,
            zorder=0.5,
        )
    )


def _block_panel(ax, norm_first: bool) -> None:
    ax.set(xlim=(-0.2, 6.6), ylim=(-0.9, 11.4))
    ax.axis("off")
    _stream(ax)
    ax.text(_STREAM_X, 0.0, "x  (B, N, E)", ha="center", va="center", fontsize=11)
    ax.text(_STREAM_X, 10.2, "output  (B, N, E)", ha="center", va="center", fontsize=11)
    ax.text(
        _STREAM_X - 0.45,
        5.6,
        "residual stream",
        ha="center",
        va="center",
        rotation=90,
        fontsize=9.5,
        color="0.3",
    )
    if norm_first:
        # x + MHA(LN(x)), then x + FF(LN(x)): the stream passes through sums only
        _branch(ax, 1.1, 3.9, [(2.0, "LN"), (3.1, "MHA")])
        _plus(ax, 3.9)
        _branch(ax, 5.0, 7.8, [(5.9, "LN"), (7.0, "FF")])
        _plus(ax, 7.8)
        title = "pre-LN (GPT-2)\n$x \\leftarrow x + \\mathrm{MHA}(\\mathrm{LN}(x))$,  "
        title += "$x \\leftarrow x + \\mathrm{FF}(\\mathrm{LN}(x))$"
        note = "the stream meets only sums: from x to the output,\nnothing normalises it "
        note += "(GPT-2 adds one LayerNorm\nafter its last block)"
    else:
        # LN(x + MHA(x)), then LN(x + FF(x)): a LayerNorm sits on the stream after each sum
        _branch(ax, 1.1, 2.7, [(1.9, "MHA")])
        _plus(ax, 2.7)
        _sublayer(ax, _STREAM_X, 3.8, "LN")
        _branch(ax, 5.0, 6.6, [(5.8, "FF")])
        _plus(ax, 6.6)
        _sublayer(ax, _STREAM_X, 7.7, "LN")
        title = "post-LN (the original Transformer, BERT)\n"
        title += "$x \\leftarrow \\mathrm{LN}(x + \\mathrm{MHA}(x))$,  "
        title += "$x \\leftarrow \\mathrm{LN}(x + \\mathrm{FF}(x))$"
        note = "a LayerNorm sits on the stream after each sum:\nevery token leaves the block "
        note += "normalised"
    ax.text(3.2, 11.35, title, ha="center", va="top", fontsize=11.5, linespacing=1.5)
    ax.text(3.2, -0.45, note, ha="center", va="top", fontsize=9.5, color="0.3")


def transformer_blocks(figsize=(12.0, 7.6)) -> Figure:
    """A post-LN and a pre-LN Transformer block side by side (notebook 04, section 11).

    Each panel draws the residual stream up its left side, x (B, N, E) in at the bottom and
    the output at the top; each sublayer (multi-head attention, then the feed-forward network)
    branches off the stream and its output is added back (a circled +). Post-LN puts a
    LayerNorm on the stream after each sum; pre-LN puts it at the start of each branch, so the
    stream itself is never normalised. Returns the Figure.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=figsize)
    _block_panel(left, norm_first=False)
    _block_panel(right, norm_first=True)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.98, bottom=0.06, wspace=0.05)
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
