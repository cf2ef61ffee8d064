"""Checkers for notebook 04 (multi-head attention in PyTorch).

- `check_numpy_to_torch(fn)`: fn(W_q, W_k, W_v, W_o) -> (in_proj_weight, out_proj_weight),
  the numpy weights of notebook 03 in `nn.MultiheadAttention`'s layout;
- `check_causal_attn_mask(fn)`: fn(L) -> the (L, L) causal `attn_mask` in
  `nn.MultiheadAttention`'s convention (True = may NOT attend);
- `check_key_padding_mask(fn)`: fn(lengths, S) -> the (B, S) `key_padding_mask`
  (True on the padding).

This module imports torch, so `mha_lib.exercises` does not import it: notebooks
write `from mha_lib.exercises.nb04 import ...`.
"""

from __future__ import annotations

import numpy as np
import torch

from ._base import report, run

__all__ = ["check_causal_attn_mask", "check_key_padding_mask", "check_numpy_to_torch"]

_FLOAT_MASK_HINT = (
    "a float mask is ADDED to the scores, so 1.0 blocks nothing; return a bool mask "
    "(True = may NOT attend) or a float mask of 0 and -inf"
)


def _as_tensor(result, name: str):
    """A learner's array or tensor as a float64 tensor, or (None, what is wrong)."""
    try:
        return torch.as_tensor(np.asarray(result, dtype=np.float64)), None
    except (TypeError, ValueError, RuntimeError):
        return None, f"{name} must be an array or tensor; got {type(result).__name__}"


# ---------------------------------------------------------------------------- weights


def _weights(C: int, seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((C, C)) for _ in range(4)]  # W_q, W_k, W_v, W_o


def check_numpy_to_torch(fn) -> bool:
    """Check fn(W_q, W_k, W_v, W_o) -> (in_proj_weight (3C, C), out_proj_weight (C, C))."""
    name = "numpy_to_torch"
    problem = None
    for C, seed in ((6, 0), (4, 1)):
        W_q, W_k, W_v, W_o = _weights(C, seed)  # numpy layout: X @ W, each (C, C)
        result, problem = run(fn, W_q.copy(), W_k.copy(), W_v.copy(), W_o.copy())
        if problem is None and (not isinstance(result, (tuple, list)) or len(result) != 2):
            problem = "expected a pair (in_proj_weight, out_proj_weight)"
        if problem is not None:
            break
        in_proj, problem = _as_tensor(result[0], "in_proj_weight")
        if problem is None:
            out_proj, problem = _as_tensor(result[1], "out_proj_weight")
        if problem is not None:
            break
        problem = _diagnose_weights(in_proj.numpy(), out_proj.numpy(), W_q, W_k, W_v, W_o)
        if problem is not None:
            break
    return report(name, problem)


def _diagnose_weights(in_proj, out_proj, W_q, W_k, W_v, W_o) -> str | None:
    C = W_q.shape[0]
    if in_proj.shape != (3 * C, C):
        if in_proj.shape == (C, 3 * C):
            return (
                f"in_proj_weight has shape {in_proj.shape}; expected (3C, C) = {(3 * C, C)}: "
                "torch stores the three projections stacked along the rows, each as (out, in)"
            )
        return f"in_proj_weight has shape {in_proj.shape}; expected (3C, C) = {(3 * C, C)}"
    if out_proj.shape != (C, C):
        return f"out_proj_weight has shape {out_proj.shape}; expected (C, C) = {(C, C)}"
    expected = np.concatenate([W_q.T, W_k.T, W_v.T])  # (3C, C)
    if not np.allclose(in_proj, expected):
        if np.allclose(in_proj, np.concatenate([W_q, W_k, W_v])):
            return (
                "the projections are not transposed: torch's Linear stores weight as (out, in) "
                "and computes X @ weight.T, so in_proj_weight = [W_q.T; W_k.T; W_v.T]"
            )
        for order in ((W_k, W_q, W_v), (W_v, W_k, W_q), (W_q, W_v, W_k), (W_k, W_v, W_q)):
            if np.allclose(in_proj, np.concatenate([W.T for W in order])):
                return "the three blocks are in the wrong order: in_proj_weight is [W_q; W_k; W_v]"
        return "wrong values in in_proj_weight: expected [W_q.T; W_k.T; W_v.T] stacked along rows"
    if not np.allclose(out_proj, W_o.T):
        if np.allclose(out_proj, W_o):
            return "out_proj_weight is not transposed: out_proj is a Linear too, so it holds W_o.T"
        return "wrong values in out_proj_weight: expected W_o.T"
    return None


# ---------------------------------------------------------------------------- masks


def _blocked(result, shape: tuple[int, ...], name: str):
    """A learner's mask as a bool tensor, True where blocked, or (None, what is wrong)."""
    if isinstance(result, np.ndarray):
        return None, (
            f"{name} must be a torch.Tensor (nn.MultiheadAttention takes tensors); got a numpy "
            "array: wrap it with torch.from_numpy"
        )
    if not isinstance(result, torch.Tensor):
        return None, f"{name} must be a torch.Tensor; got {type(result).__name__}"
    if tuple(result.shape) != shape:
        return None, f"{name} has shape {tuple(result.shape)}; expected {shape}"
    if result.dtype == torch.bool:
        return result.cpu(), None
    if not torch.is_floating_point(result):
        return None, (
            f"{name} has dtype {result.dtype}; nn.MultiheadAttention takes bool "
            "(True = may NOT attend) or float (added to the scores)"
        )
    values = result.detach().cpu().double()
    if torch.all((values == 0) | torch.isneginf(values)):
        return torch.isneginf(values), None
    if torch.all((values == 0) | (values == 1)):
        return None, _FLOAT_MASK_HINT
    return None, f"{name} is a float mask with values other than 0 and -inf"


def check_causal_attn_mask(fn) -> bool:
    """Check fn(L) -> (L, L) attn_mask, True (or -inf) above the diagonal."""
    name = "causal_attn_mask"
    problem = None
    for L in (4, 1, 7):
        expected = torch.ones(L, L, dtype=torch.bool).triu(1)  # True = may NOT attend
        result, problem = run(fn, L)
        if problem is None:
            blocked, problem = _blocked(result, (L, L), "the mask")
        if problem is None and not torch.equal(blocked, expected):
            if torch.equal(blocked, ~expected):
                problem = (
                    "it is inverted: True on and below the diagonal is the numpy core's "
                    "convention (True = may attend); nn.MultiheadAttention blocks where the mask "
                    "is True, so use triu(diagonal=1)"
                )
            elif torch.equal(blocked, torch.ones(L, L, dtype=torch.bool).triu(0)):
                problem = (
                    "it also blocks the diagonal: token i may attend to itself. Token 0 is then "
                    "left with nothing to attend to (a fully masked row, NaN in "
                    "nn.MultiheadAttention); use triu(diagonal=1)"
                )
            elif torch.equal(blocked, torch.ones(L, L, dtype=torch.bool).tril(-1)):
                problem = (
                    "it blocks the past instead of the future: query i (row) must not see keys "
                    "j > i (columns to the right of the diagonal)"
                )
            else:
                problem = "wrong entries: row i must block exactly the columns j > i"
        if problem is not None:
            break
    return report(name, problem)


def check_key_padding_mask(fn) -> bool:
    """Check fn(lengths, S) -> (B, S) key_padding_mask, True on padding keys."""
    name = "key_padding_mask"
    problem = None
    for lengths, S in (([5, 3, 1], 5), ([2, 4], 6)):
        positions = torch.arange(S)[None, :]  # (1, S)
        lens = torch.tensor(lengths)[:, None]  # (B, 1)
        expected = positions >= lens  # (B, S), True on padding
        result, problem = run(fn, list(lengths), S)
        if problem is None and isinstance(result, torch.Tensor):
            if tuple(result.shape) == (len(lengths), 1, 1, S):
                problem = (
                    f"it has the numpy core's shape (B, 1, 1, M) = {tuple(result.shape)}; "
                    "nn.MultiheadAttention's key_padding_mask is (B, S)"
                )
        if problem is None:
            blocked, problem = _blocked(result, (len(lengths), S), "the mask")
        if problem is None and not torch.equal(blocked, expected):
            if torch.equal(blocked, ~expected):
                problem = (
                    "it is inverted: True must mark the padding (the keys to ignore), not the "
                    "real tokens"
                )
            elif torch.equal(blocked, positions > lens) or torch.equal(
                blocked, positions >= lens - 1
            ):
                problem = (
                    "off by one: sequence b has real tokens at positions 0 .. lengths[b] - 1 "
                    "and padding from position lengths[b] on"
                )
            else:
                problem = "wrong entries: row b must be True exactly at positions >= lengths[b]"
        if problem is not None:
            break
    return report(name, problem)
