"""Checkers for notebook 07 (attention as convolution).

- `check_relative_scores(fn)`: fn(H, W, shift, kappa) -> the (N, N) scores
  −κ‖(p_m − p_n) − Δ‖² of one head over the N = H·W pixels of an image,
  numbered row by row (rows = query pixels n, columns = key pixels m);
- `check_value_weights(fn)`: fn(weight) -> W_v (C_in, k²·C_out), the value
  projections of the k² heads side by side, head i·k + j holding
  W_V^h = weight[:, :, i, j]ᵀ.

This module imports numpy only (torch is imported inside `check_value_weights`,
which hands the learner a torch tensor), so `mha_lib.exercises` exports it.
"""

from __future__ import annotations

import numpy as np

from ..attention import softmax
from ._base import as_array, checker, run

__all__ = ["check_relative_scores", "check_value_weights"]


# ---------------------------------------------------------------------------- scores


def _positions(H: int, W: int, column_major: bool = False) -> np.ndarray:
    """(H·W, 2): (row, column) of each pixel, numbered row by row (or column by column)."""
    n = np.arange(H * W)
    if column_major:
        return np.stack([n % H, n // H], axis=1)
    return np.stack([n // W, n % W], axis=1)


def _scores(pos: np.ndarray, shift, kappa: float, dist=lambda d: (d**2).sum(-1)) -> np.ndarray:
    """(N, N): −κ dist((p_m − p_n) − Δ) for query n (row) and key m (column)."""
    delta = pos[None, :, :] - pos[:, None, :]  # (N, N, 2): key minus query
    return -kappa * dist(delta - np.asarray(shift))  # (N, N)


def _same_softmax(a: np.ndarray, b: np.ndarray, tol: float = 1e-8) -> bool:
    """True when a − b is constant along every row: the row softmaxes are equal."""
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return False
    diff = a - b  # (N, N)
    scale = max(1.0, float(np.abs(b).max()))
    return bool(np.all(np.ptp(diff, axis=-1) <= tol * scale))


@checker("relative_scores")
def check_relative_scores(fn):
    """Check fn(H, W, shift, kappa) -> (H·W, H·W) scores −κ‖(p_m − p_n) − Δ‖².

    Any answer that differs from the reference by a constant along each row is
    accepted: the softmax of a row cannot tell them apart.
    """
    problem = None
    for H, W, shift, kappa in ((3, 4, (1, 2), 2.0), (4, 2, (-1, 2), 0.5)):
        N = H * W
        pos = _positions(H, W)  # (N, 2)
        expected = _scores(pos, shift, kappa)  # (N, N)
        result, problem = run(fn, H, W, tuple(shift), kappa)
        if problem is None:
            result, problem = as_array(result, (N, N))
        if problem is None and not _same_softmax(result, expected):
            problem = _diagnose_scores(result, expected, H, W, shift, kappa)
        if problem is not None:
            break
    return problem


def _diagnose_scores(result, expected, H, W, shift, kappa) -> str:
    pos = _positions(H, W)
    if np.allclose(result, softmax(expected), atol=1e-8):
        return (
            "it returns the softmax of the scores (the attention weights); return the scores "
            "themselves, −κ‖(p − q) − Δ‖²"
        )
    wrong = {
        "the peak is at q − Δ instead of q + Δ: rows are query pixels q, columns key pixels "
        "p, and the relative position is δ = p − q (key minus query)": _scores(-pos, shift, kappa),
        "the sign is wrong: the score is −κ‖δ − Δ‖², largest (0) at the target pixel and "
        "negative everywhere else": -expected,
        "κ is missing: multiply the squared distance by κ": expected / kappa,
        "the distance is not squared: use ‖δ − Δ‖², the square is what makes the score a dot "
        "product of dimension 3": _scores(pos, shift, kappa, lambda d: np.sqrt((d**2).sum(-1))),
        "that is the distance |δ_1 − Δ_1| + |δ_2 − Δ_2|; use the squared Euclidean distance "
        "‖δ − Δ‖²": _scores(pos, shift, kappa, lambda d: np.abs(d).sum(-1)),
        "the pixels are numbered column by column: number them row by row, pixel n at row "
        "n // W and column n % W": _scores(_positions(H, W, column_major=True), shift, kappa),
        "the two components of the shift are swapped: Δ = (rows, columns), the same order as "
        "the pixel positions (row, column)": _scores(pos, shift[::-1], kappa),
    }
    for message, candidate in wrong.items():
        if _same_softmax(result, candidate):
            return message
    return "wrong values: entry [n, m] must be −κ‖(p_m − p_n) − Δ‖² for query n and key m"


# ---------------------------------------------------------------------------- value weights


@checker("value_weights")
def check_value_weights(fn):
    """Check fn(weight) -> W_v (C_in, k²·C_out), head i·k + j holding weight[:, :, i, j]ᵀ."""
    try:
        import torch
    except ImportError:
        return "this exercise needs torch (pip install torch)"
    problem = None
    for seed, (C_out, C_in, k) in ((70, (3, 2, 3)), (71, (2, 4, 5))):
        gen = torch.Generator().manual_seed(seed)
        weight = torch.randn(C_out, C_in, k, k, generator=gen, dtype=torch.float64)
        expected = weight.permute(1, 2, 3, 0).reshape(C_in, k * k * C_out).numpy()
        result, problem = run(fn, weight.clone())
        if problem is None:
            problem = _diagnose_value_weights(result, weight, expected)
        if problem is not None:
            break
    return problem


def _diagnose_value_weights(result, weight, expected) -> str | None:
    C_out, C_in, k, _ = weight.shape
    h = k * k
    try:
        shape = tuple(np.shape(result))
    except Exception:
        shape = None
    if shape == (C_out, h * C_in):
        return (
            f"it has shape {shape} = (C_out, h·C_in): W_V^h is weight[:, :, i, j] transposed, "
            "(C_in, C_out), because the pixels are the rows of X and the values are X W_V"
        )
    if shape == (C_in, C_out):
        return (
            f"it has shape {shape}, one head's block: put all k² heads side by side, "
            f"(C_in, k²·C_out) = {(C_in, h * C_out)}"
        )
    if shape == (h * C_in, C_out):
        return (
            f"it has shape {shape}: the heads are stacked along the rows; they go side by side "
            f"along the columns, (C_in, k²·C_out) = {(C_in, h * C_out)}"
        )
    arr, problem = as_array(result, expected.shape)
    if problem is not None:
        return problem
    if np.allclose(arr, expected, rtol=1e-10, atol=1e-12):
        return None
    w = weight.numpy()
    wrong = {
        "the values are scrambled: a reshape without a permute mixes output channels, input "
        "channels and taps (the reshape pitfall of notebook 03); put C_in first and C_out last, "
        "then reshape": w.reshape(C_in, -1),
        "the heads are in the wrong order: tap (i, j), i the kernel row, belongs to head "
        "i·k + j (row by row), not j·k + i": w.transpose(1, 3, 2, 0).reshape(C_in, -1),
        "the kernel is flipped: conv2d is a cross-correlation, tap (i, j) reads the pixel "
        "(i − k//2, j − k//2) away, with no flip": w[:, :, ::-1, ::-1]
        .transpose(1, 2, 3, 0)
        .reshape(C_in, -1),
        "the columns are grouped by output channel: each head's d_v = C_out columns must sit "
        "side by side, head h in columns h·C_out to (h+1)·C_out": w.transpose(1, 0, 2, 3).reshape(
            C_in, -1
        ),
    }
    for message, candidate in wrong.items():
        if np.allclose(arr, candidate, rtol=1e-10, atol=1e-12):
            return message
    return "wrong values: columns h·C_out:(h+1)·C_out must hold weight[:, :, i, j].T, h = i·k + j"
